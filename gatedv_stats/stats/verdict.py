"""The verdict of a paired comparison, from the seed-and-document interval.

At level α = 1 − confidence_level, two-sided: "better" when the whole interval for D lies below 0, "worse"
when it lies above, otherwise "no detectable difference". With a smallest effect size of interest X (a
relative ΔP), "equivalent" when the two one-sided tests (TOST; Schuirmann 1987, Lakens 2017) both reject a
difference outside |ΔP| < X, i.e. log(1 − X) < log(1 + ΔP) < log(1 + X), each at level α with the interval's
standard error and df. Equivalence wins over better/worse: a difference that is real but smaller than X is
reported as equivalent, and the explanation names its direction.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from scipy import stats

from gatedv_stats.core import formatting as fmt
from gatedv_stats.core.validation import check_open_unit
from gatedv_stats.stats.seed_document import SeedDocumentResult

VERDICTS = ("better", "worse", "no detectable difference", "equivalent")


@dataclass(frozen=True)
class Verdict:
    """One of VERDICTS, the p-values behind it and one plain sentence."""

    verdict: str
    alpha: float
    p_value: float  # two-sided t test of D = 0
    sesoi: float | None  # smallest effect size of interest, relative ΔP
    equivalence_bounds: tuple[float, float] | None  # (log(1 − sesoi), log(1 + sesoi)) on the log-ratio scale
    tost_p_value: float | None  # the larger of the two one-sided p-values
    explanation: str

    def to_dict(self) -> dict:
        data = asdict(self)
        data["equivalence_bounds"] = None if self.equivalence_bounds is None else list(self.equivalence_bounds)
        return data

    def summary(self) -> str:
        return f"verdict: {self.verdict} — {self.explanation}"


def verdict(result: SeedDocumentResult, *, sesoi: float | None = None, unit: str = "token") -> Verdict:
    """Decide better / worse / no detectable difference / equivalent from a seed-and-document result whose D is
    in nats per `unit` ("token" or "byte")."""
    if sesoi is not None:
        sesoi = check_open_unit("sesoi", sesoi)
    alpha = result.alpha
    p_value = result.p_value
    low, high = result.confidence_interval
    direction = "better" if high < 0.0 else "worse" if low > 0.0 else None
    bounds = tost_p = None
    if sesoi is not None:
        bounds = (math.log1p(-sesoi), math.log1p(sesoi))
        tost_p = tost_p_value(result.log_ratio, result.log_ratio_se, result.df, bounds)
    outcome = "equivalent" if tost_p is not None and tost_p < alpha else direction or "no detectable difference"
    return Verdict(verdict=outcome, alpha=alpha, p_value=p_value, sesoi=sesoi, equivalence_bounds=bounds,
                   tost_p_value=tost_p,
                   explanation=_explain(outcome, direction, result, p_value, sesoi, tost_p, unit))


def tost_p_value(estimate: float, se: float, df: float, bounds: tuple[float, float]) -> float:
    """Two one-sided t tests of H0: estimate ≤ bounds[0] or ≥ bounds[1]; the p-value is the larger of the two."""
    below = stats.t.sf((estimate - bounds[0]) / se, df)
    above = stats.t.cdf((estimate - bounds[1]) / se, df)
    return float(max(below, above))


def _explain(outcome: str, direction: str | None, result: SeedDocumentResult, p_value: float,
             sesoi: float | None, tost_p: float | None, unit: str) -> str:
    scope = "accounting for training seeds and documents"
    if result.doc_var is None:  # one document or cluster: nothing is known about others
        scope = f"accounting for training seeds, on this one {'document' if result.n_clusters is None else 'cluster'}"
    elif result.n_clusters is not None:
        scope += f" (documents grouped into {result.n_clusters:,} clusters)"
    pct = fmt.format_level(result.confidence_level)
    interval = fmt.format_interval(*result.confidence_interval)
    if outcome == "equivalent":
        assert sesoi is not None  # equivalence is tested only against a smallest effect of interest
        text = (f"The arms are equivalent within ±{fmt.format_percent(sesoi, 2)} in PPL: both one-sided tests reject "
                f"a larger difference (TOST p = {tost_p:.3g}), {scope}")
        if direction is not None:
            text += (f"; the variant is slightly {direction} (ΔP {fmt.format_delta_p(result.delta_p)}, {pct} interval "
                     f"for D {interval} excludes 0), but by less than the smallest effect of interest")
        return text + "."
    if direction is not None:
        lower_or_higher = "lower" if direction == "better" else "higher"
        size = (f"{abs(result.nll_diff_mean) / math.log(2.0):.6f} bits per byte" if unit == "byte" else
                f"{fmt.format_nll_diff(abs(result.nll_diff_mean))} nats per {unit}")
        return (f"The variant is {direction}: its loss is {lower_or_higher} by {size} (ΔP "
                f"{fmt.format_delta_p(result.delta_p)}; {pct} interval for D {interval}, p = {p_value:.3g}), {scope}.")
    text = (f"No detectable difference: the {pct} interval for D {interval} includes 0 (p = {p_value:.3g}), "
            f"{scope}")
    if sesoi is not None:
        text += (f", and equivalence within ±{fmt.format_percent(sesoi, 2)} is not shown either "
                 f"(TOST p = {tost_p:.3g})")
    return text + "."
