"""Numbers as the paper prints them (negative signs are the Unicode minus U+2212)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

MINUS = "\u2212"


def _minus(text: str) -> str:
    return text.replace("-", MINUS)


def format_ppl(mean: float, sd: float | None = None) -> str:
    """Mean perplexity ± SD over seeds, 3 decimals with thousands separators: "59.118 ± 0.530"; no SD → "59.118"."""
    spread = "" if sd is None or math.isnan(sd) else f" ± {sd:,.3f}"
    return _minus(f"{mean:,.3f}{spread}")


def format_delta_p(fraction: float) -> str:
    """ΔP as a signed percentage with 2 decimals: −0.0203 → "−2.03%", 0.0161 → "+1.61%"."""
    percent = round(fraction * 100.0, 2) + 0.0  # + 0.0 turns −0.0 into 0.0
    return _minus(f"{percent:+.2f}%")


def format_pairs(improved: int, n_pairs: int) -> str:
    """Improved pairs out of all pairs: "5/5"."""
    return f"{improved}/{n_pairs}"


def format_nll_diff(value: float) -> str:
    """A mean NLL difference with 6 decimals: "−0.020591"."""
    return _minus(f"{value + 0.0:.6f}")


def format_interval(low: float, high: float) -> str:
    """A confidence interval of NLL differences: "[−0.021869, −0.019356]"."""
    return f"[{format_nll_diff(low)}, {format_nll_diff(high)}]"


def format_delta_p_interval(interval: tuple[float, float]) -> str:
    """An interval of relative changes: "[−2.54%, −1.10%]"."""
    return f"[{', '.join(map(format_delta_p, interval))}]"


def format_difference(value: float, proportion: bool, *, signed: bool = True) -> str:
    """A difference of scores: in points of a proportion ("+1.23 points"), else with 4 significant digits."""
    sign = "+" if signed else ""
    text = f"{100.0 * value + 0.0:{sign}.2f} points" if proportion else f"{value + 0.0:{sign}.4g}"
    return _minus(text)


def format_difference_interval(interval: tuple[float, float], proportion: bool) -> str:
    """An interval of score differences: "[+0.52, +2.10] points" for a proportion."""
    low, high = (format_difference(value, proportion).removesuffix(" points") for value in interval)
    return f"[{low}, {high}]" + (" points" if proportion else "")


def format_scores(per_seed: Sequence[float], proportion: bool) -> str:
    """An arm's mean score ± SD over seeds: a proportion in percent ("62.41 ± 0.53%"), else 4 significant digits."""
    values = np.asarray(per_seed) * (100.0 if proportion else 1.0)
    sd = f" ± {np.std(values, ddof=1):.2f}" if values.size > 1 else ""
    return _minus(f"{values.mean():.2f}{sd}%" if proportion else f"{values.mean():.4g}{sd}")


def format_percent_interval(interval: tuple[float, float], digits: int = 1) -> str:
    """An interval of fractions as percentages: "[58.2%, 70.1%]"."""
    return f"[{', '.join(format_percent(value, digits) for value in interval)}]"


def format_count(count: float) -> str:
    """An integer with thousands separators: "1,672"."""
    return _minus(f"{int(count):,}")


def format_percent(fraction: float, digits: int = 1) -> str:
    """A fraction as a percentage: 0.8164 → "81.6%"."""
    return _minus(f"{fraction * 100.0 + 0.0:.{digits}f}%")


def format_level(confidence_level: float) -> str:
    """A confidence level as a percentage with the digits it has: 0.95 → "95%", 0.999 → "99.9%", 1e-9 →
    "0.0000001%" (never rounded to 100% or 0%)."""
    return np.format_float_positional(round(confidence_level * 100.0, 10), trim="-") + "%"


EVAL_SET_NAMES = {"heldout": "held-out set", "dev": "development set", None: "unnamed evaluation set"}


def eval_set_name(eval_set: str | None) -> str:
    """An evaluation set as prose: "held-out set", "development set", "evaluation set NAME"."""
    return EVAL_SET_NAMES.get(eval_set, f"evaluation set {eval_set}")


def format_lr(lr: float | None) -> str:
    """A learning rate as the paper prints it: 0.0048, 0.00001; "unrecorded" when absent."""
    return "unrecorded" if lr is None else np.format_float_positional(float(lr), trim="-")


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> list[str]:
    """Lines of a plain-text table whose columns are as wide as their widest cell, two spaces apart; `align`
    holds "l" (left) or "r" (right) per column."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.ljust(width) if side == "l" else cell.rjust(width)
                         for cell, width, side in zip(cells, widths, align)).rstrip()

    return [line(header)] + [line(row) for row in rows]
