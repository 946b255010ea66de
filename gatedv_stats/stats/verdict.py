"""The verdict of a paired comparison, from the seed-and-document (or seeds × items) interval, on any scale.

At level α = 1 − confidence_level, two-sided: "better" when the interval for D excludes 0 on the variant's side
(below 0 for a loss, above for a metric where higher is better), "worse" on the other side, otherwise "no detectable
difference". With a smallest effect size of interest X, "equivalent" when the two one-sided tests (TOST; Schuirmann
1987, Lakens 2017) both reject a difference outside ±X — on the log-ratio scale of perplexity
log(1 − X) < log(1 + ΔP) < log(1 + X), on a metric's absolute scale −X < D < X — each at level α with the
interval's standard error and df. Equivalence wins over better/worse: a difference that is real but smaller than X
is reported as equivalent, and the explanation names its direction. Given adjusted p-values (Holm over several
arms or tasks), the verdict is read off them instead: a direction when the adjusted p is at most α.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from scipy import special, stats

from gatedv_stats.core import formatting as fmt
from gatedv_stats.stats.scale import PERPLEXITY, Scale
from gatedv_stats.stats.seed_document import SeedDocumentResult

VERDICTS = ("better", "worse", "no detectable difference", "equivalent")


@dataclass(frozen=True)
class Verdict:
    """One of VERDICTS, the p-values behind it and one plain sentence."""

    verdict: str
    alpha: float
    p_value: float  # two-sided t test of D = 0 (adjusted, where the verdict was read off adjusted p-values)
    sesoi: float | None  # smallest effect size of interest: a relative ΔP, or a difference in the metric's units
    equivalence_bounds: tuple[float, float] | None  # on the scale the equivalence tests are run on
    tost_p_value: float | None  # the larger of the two one-sided p-values
    explanation: str

    def to_dict(self) -> dict:
        bounds = self.equivalence_bounds
        return {**asdict(self), "equivalence_bounds": None if bounds is None else list(bounds)}

    def summary(self) -> str:
        return f"verdict: {self.verdict} — {self.explanation}"


def verdict(result: SeedDocumentResult, scale: Scale = PERPLEXITY, *, sesoi: float | None = None,
            unit: str = "token", p_value: float | None = None, tost_p_value: float | None = None) -> Verdict:
    """Decide better / worse / no detectable difference / equivalent from a seed-and-document result whose D is
    read on `scale` per `unit` ("token", "word", "byte" or "item"). `p_value` and `tost_p_value` replace the
    fit's own (e.g. by Holm-adjusted ones across arms or tasks)."""
    alpha = result.alpha
    if p_value is None:
        p_value = result.p_value
        low, high = result.confidence_interval
        excludes_zero = bool(high < 0.0 or low > 0.0)
    else:
        excludes_zero = p_value <= alpha
    direction = scale.direction(result.estimate) if excludes_zero else None
    bounds = None
    if sesoi is not None:
        sesoi = scale.check_sesoi(sesoi)
        bounds = scale.equivalence_bounds(sesoi)
        if tost_p_value is None:
            tost_p_value = tost_p(*scale.tested(result), result.df, bounds)
    equivalent = tost_p_value is not None and tost_p_value < alpha
    outcome = "equivalent" if equivalent else direction or "no detectable difference"
    return Verdict(verdict=outcome, alpha=alpha, p_value=p_value, sesoi=sesoi, equivalence_bounds=bounds,
                   tost_p_value=tost_p_value,
                   explanation=_explain(outcome, direction, result, p_value, sesoi, tost_p_value, scale, unit))


def tost_p(estimate: float, se: float, df: float, bounds: tuple[float, float]) -> float:
    """Two one-sided t tests of H0: estimate ≤ bounds[0] or ≥ bounds[1]; the p-value is the larger of the two."""
    below = stats.t.sf((estimate - bounds[0]) / se, df)
    above = stats.t.cdf((estimate - bounds[1]) / se, df)
    return float(max(below, above))


def one_sided_p(estimate: float, se: float, df: float, higher_is_better: bool) -> float:
    """p of H0 "the variant is not better": t = estimate / se on `df` df, the tail that favours the variant (below
    for a loss, where lower is better; above for a metric where higher is better)."""
    t = estimate / se
    return float(special.stdtr(df, -t if higher_is_better else t))  # scipy.stats.t.cdf without its checks


def _explain(outcome: str, direction: str | None, result: SeedDocumentResult, p_value: float,
             sesoi: float | None, tost_p_value: float | None, scale: Scale, unit: str) -> str:
    noun = scale.noun
    floor = result.floor_use is not None and result.floor_use.how != "study"
    scope = f"accounting for training seeds{' (their variance from the noise floor)' if floor else ''} and {noun}s"
    if result.doc_var is None:  # one unit or cluster: nothing is known about others
        scope = f"accounting for training seeds, on this one {noun if result.n_clusters is None else 'cluster'}"
    elif result.n_clusters is not None:
        scope += f" ({noun}s grouped into {result.n_clusters:,} clusters)"
    interval = (f"{fmt.format_level(result.confidence_level)} interval{scale.interval_of} "
                f"{scale.format_interval(result.confidence_interval)}")
    change = scale.change(result)
    if outcome == "equivalent":
        assert sesoi is not None  # equivalence is tested only against a smallest effect of interest
        text = (f"The arms are equivalent within {scale.format_sesoi(sesoi)} {scale.quantity}: both one-sided tests "
                f"reject a larger difference (TOST p = {tost_p_value:.3g}), {scope}")
        if direction is not None:
            text += (f"; the variant is slightly {direction} ({change + ', ' if change else ''}{interval} excludes "
                     "0), but by less than the smallest effect of interest")
        return text + "."
    if direction is not None:
        lower_or_higher = "lower" if result.estimate < 0.0 else "higher"
        return (f"The variant is {direction}: its {scale.metric} is {lower_or_higher} by "
                f"{scale.format_size(result.estimate, unit)} ({change + '; ' if change else ''}{interval}, "
                f"p = {p_value:.3g}), {scope}.")
    text = f"No detectable difference: the {interval} includes 0 (p = {p_value:.3g}), {scope}"
    if sesoi is not None:
        text += (f", and equivalence within {scale.format_sesoi(sesoi)} is not shown either "
                 f"(TOST p = {tost_p_value:.3g})")
    return text + "."
