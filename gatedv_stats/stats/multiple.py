"""Adjusted p-values over a family of tests: Holm (family-wise error rate) and Benjamini–Hochberg (false discovery
rate).

Computed as `statsmodels.stats.multitest.multipletests(method="holm" | "fdr_bh")` computes them, to the bit
(tests/stats/test_multiple.py), without the full garbage collection it runs on every Holm call, which costs
milliseconds to a tenth of a second per call once torch is loaded (bench/multiple_testing.py)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _holm(sorted_p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjustment of ascending p-values: max over j ≤ i of (m − j + 1) p_(j), at most 1."""
    return np.minimum(np.maximum.accumulate(sorted_p * np.arange(sorted_p.size, 0, -1)), 1.0)


def _benjamini_hochberg(sorted_p: np.ndarray) -> np.ndarray:
    """Benjamini–Hochberg's step-up adjustment of ascending p-values: min over j ≥ i of m p_(j) / j, at most 1."""
    raw = sorted_p / (np.arange(1, sorted_p.size + 1) / float(sorted_p.size))
    return np.minimum(np.minimum.accumulate(raw[::-1])[::-1], 1.0)


ADJUSTMENTS = {"holm": _holm, "bh": _benjamini_hochberg}


def adjust_p_values(p_values: Sequence[float]) -> dict[str, list[float]]:
    """Holm and Benjamini–Hochberg adjusted p-values, in the order given."""
    p = np.asarray(p_values, dtype=np.float64)
    order = np.argsort(p)
    inverse = np.argsort(order)  # each p-value's position among the sorted ones
    return {key: [float(value) for value in adjust(p[order])[inverse]] for key, adjust in ADJUSTMENTS.items()}


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm-adjusted p-values over those given; None (no test) stays None and takes no share of the family."""
    given = [p for p in p_values if p is not None]
    adjusted = iter(adjust_p_values(given)["holm"] if given else [])
    return [None if p is None else next(adjusted) for p in p_values]
