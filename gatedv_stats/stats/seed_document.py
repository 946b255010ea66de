"""An interval for the mean NLL difference that generalises over training seeds and documents.

D, the token-weighted mean over seed pairs of the per-token NLL difference, with SE² = Var̂(D) from the crossed
seeds × documents (or × clusters) model of gatedv_stats.stats.crossed and a t interval on its df; ΔP through
the log ratio of mean perplexities. The derivation is in docs/statistics.md, the calibration in docs/verdicts.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special

from gatedv_stats.core.defaults import DEFAULTS
from gatedv_stats.core.errors import InputError, NoSpreadError
from gatedv_stats.core.validation import check_confidence_level
from gatedv_stats.stats import metrics
from gatedv_stats.stats.crossed import (
    CrossedMoments,
    cluster_sums,
    clustered_moments,
    crossed_moments,
    form_diagonal,
    weighted_df,
)
from gatedv_stats.stats.intervals import ConfidenceInterval, finite_or_none, log_interval_as_change
from gatedv_stats.stats.noise_floor import MIN_FLOOR_DF, FloorUse, SeedVariance, use_floor


@dataclass(frozen=True)
class SeedDocumentResult:
    """The seed-and-document interval for D (nats per token, or a difference in a metric's units), and ΔP on the
    log scale of losses."""

    estimate: float  # D: the mean over seeds of the unit-weighted difference
    se: float  # sqrt(Var̂(D))
    df: float
    satterthwaite_df: float
    confidence_level: float
    confidence_interval: ConfidenceInterval  # D ± t_{df} · se
    log_ratio: float | None  # log(P̄_var / P̄_base) = log(1 + ΔP); None off the log scale of losses
    log_ratio_se: float | None  # taken equal to se (the approximation log ratio ≈ D)
    delta_p: float | None
    delta_p_interval: ConfidenceInterval | None  # exp(log_ratio ± t_{df} · se) − 1, approximate
    per_seed: tuple[float, ...]  # D_s
    seed_var: float  # σ̂²_seed (per-token nats²), truncated at 0
    doc_var: float | None  # σ̂²_doc (of clusters when clustered), truncated at 0; None with one document
    interaction_var: float | None  # σ̂²_int; None with one document
    v_seed: float  # the weighted mean squares the components come from
    q_doc: float | None
    q_int: float | None
    n_seeds: int
    n_docs: int
    n_clusters: int | None  # None when documents are the sampled units
    truncated: tuple[str, ...]  # components estimated below 0 and set to 0: "seed", and the units' ("document")
    doc_pretest_p: float | None  # pre-test of σ²_doc = 0 (F test of Q_doc against Q_int / S); None with one document
    doc_pooled: bool  # the document term is left out of SE² (pooled into the interaction)
    notes: tuple[str, ...]
    floor_use: FloorUse | None = None  # where the seed variance came from, with a noise floor

    @property
    def alpha(self) -> float:
        return 1.0 - self.confidence_level

    @property
    def p_value(self) -> float:
        """Two-sided t test of D = 0 with the interval's SE and df."""
        # scipy.stats.t.sf without its checks
        return float(2.0 * special.stdtr(self.df, -abs(self.estimate) / self.se))

    def to_dict(self) -> dict:
        """Strict JSON: undefined or infinite numbers become None."""
        return {name: _json_safe(getattr(self, name)) for name in self.__dataclass_fields__}

    def components(self, noun: str = "document") -> list[str]:
        """The variance components as printed: "seed …", then the units' ("document …", or "cluster …") and the
        interaction's, where estimated (with one seed pair the units' holds the interaction)."""
        unit = "cluster" if self.n_clusters is not None else noun
        components = [f"seed {self.seed_var:.3g}"]
        if self.doc_var is not None:
            with_interaction = " (with the interaction)" if self.interaction_var is None else ""
            components.append(f"{unit}{with_interaction} {self.doc_var:.3g}")
        if self.interaction_var is not None:
            components.append(f"interaction {self.interaction_var:.3g}")
        return components


def seed_document_interval(baseline: np.ndarray, variant: np.ndarray, n_units: np.ndarray, *,
                           clusters: np.ndarray | None = None, confidence_level: float = DEFAULTS.confidence_level,
                           noun: str = "document", floor: SeedVariance | None = None,
                           log_scale: bool = True) -> SeedDocumentResult:
    """Interval for D and ΔP over new seeds and new documents (or clusters: one label per document; `noun` names
    the units in the notes, e.g. "item"), from (S, N) loss sums in nats (row = seed pair) and (N,) `n_units`;
    with `log_scale` False the values are scores, whose D has no ΔP.

    ΔP's interval exp(log(1 + ΔP) ± t_df · SE) − 1 gives the log ratio of mean PPLs D's standard error, which
    holds while per-seed PPL spreads are small (log(1 + ΔP) − D is about half the difference of the arms'
    variances of NLL over seeds). With a noise `floor` (the setup's τ², measured elsewhere) one seed pair
    suffices (`stats.noise_floor.use_floor`).
    """
    confidence_level = check_confidence_level(confidence_level)
    baseline, variant, n = metrics.paired_arrays(baseline, variant, n_units)
    n_seeds, n_docs = baseline.shape
    if n_seeds < 2 and floor is None:
        raise InputError(f"seed-and-document interval: needs at least 2 paired seeds for an interval that "
                         f"generalises over seeds, got {n_seeds} (or a noise floor)")
    if not (np.all(np.isfinite(baseline)) and np.all(np.isfinite(variant))):
        raise InputError("seed-and-document interval: loss sums must be finite")
    if not np.all(n > 0):
        raise InputError("seed-and-document interval: every n_units must be at least 1")
    y = (variant - baseline) / n
    if n_seeds < 2:
        fit = _one_seed_moments(y, n, clusters, floor)  # type: ignore[arg-type]  # floor given: checked above
    else:
        fit = crossed_moments(y, n / n.sum()) if clusters is None else clustered_moments(y, n, clusters)
    n_clusters = None if clusters is None else int(np.unique(np.asarray(clusters)).size)
    use = None if floor is None else use_floor(floor, fit.per_seed)
    var_d, df = float(fit.var_d), float(fit.df)
    if use is not None and use.how == "pooled":
        var_d, df = _pooled_variance(fit, n_seeds, use.seed)
    if not var_d > 0.0:  # with a floor only where the floor's own τ² is 0
        raise NoSpreadError("seed-and-document interval: the paired differences do not vary over seeds or units, "
                            "so there is no spread to form an interval from")
    se = math.sqrt(var_d)
    # scipy.stats.t.ppf's own function, without its argument checks (they cost 30× more, per group of a breakdown)
    half_width = float(special.stdtrit(df, 0.5 + confidence_level / 2)) * se
    log_ratio = (math.log(metrics.mean_perplexity(variant, n) / metrics.mean_perplexity(baseline, n)) if log_scale
                 else None)
    truncated = tuple(name for name, flag in (("seed", fit.seed_truncated), (noun, fit.doc_truncated)) if bool(flag))
    unit = noun if n_clusters is None else "cluster"
    return SeedDocumentResult(
        estimate=float(fit.estimate), se=se, df=df, satterthwaite_df=float(fit.satterthwaite_df),
        confidence_level=confidence_level,
        confidence_interval=ConfidenceInterval(float(fit.estimate) - half_width, float(fit.estimate) + half_width),
        log_ratio=log_ratio, log_ratio_se=None if log_ratio is None else se,
        delta_p=None if log_ratio is None else math.expm1(log_ratio),
        delta_p_interval=None if log_ratio is None else log_interval_as_change(log_ratio - half_width,
                                                                               log_ratio + half_width),
        per_seed=tuple(float(v) for v in np.atleast_1d(fit.per_seed)), seed_var=float(fit.seed_var),
        doc_var=finite_or_none(fit.doc_var), interaction_var=finite_or_none(fit.interaction_var),
        v_seed=float(fit.v_seed), q_doc=finite_or_none(fit.q_doc), q_int=finite_or_none(fit.q_int),
        n_seeds=n_seeds, n_docs=n_docs, n_clusters=n_clusters, truncated=truncated,
        doc_pretest_p=finite_or_none(fit.doc_pretest_p), doc_pooled=bool(fit.doc_pooled),
        notes=_notes(fit, n_seeds, n_clusters or n_docs, unit) + (() if use is None else _floor_notes(use, df)),
        floor_use=use,
    )


def _pooled_variance(fit: CrossedMoments, n_seeds: int, seed: SeedVariance) -> tuple[float, float]:
    """Var̂(D) and its df with the seed part's variance replaced by `seed` (the floor pooled with the study's own):
    the document part and its noise stay the fit's, recovered from its Satterthwaite df."""
    var_d, seed_part = float(fit.var_d), float(fit.v_seed) / n_seeds
    doc_part = var_d - seed_part
    # no spread at all (a candidate that trains to the baseline's weights): the floor's τ² is the whole variance
    doc_noise = (max(var_d ** 2 / float(fit.satterthwaite_df) - seed_part ** 2 / (n_seeds - 1), 0.0) if var_d > 0.0
                 else 0.0)
    pooled_part = seed.variance / n_seeds
    variance = pooled_part + doc_part
    return variance, variance ** 2 / (pooled_part ** 2 / seed.df + doc_noise)


def _one_seed_moments(y: np.ndarray, n: np.ndarray, clusters: np.ndarray | None,
                      floor: SeedVariance) -> CrossedMoments:
    """The fit of one seed pair with a floor: Var̂(D) = τ̂² + Σw² q / κ, where the units' weighted spread q around D
    estimates κ (σ²_doc + σ²_int) — the interaction is in τ² too, so the document part is conservative — with
    Satterthwaite's df from the floor's and the units' (docs/noise-floor.md)."""
    if clusters is None:
        units, weights = y[0], n / n.sum()
    else:
        sums = cluster_sums(y * n, n, clusters)
        units, weights = sums.values[0] / sums.n_units, sums.n_units / sums.n_units.sum()
    d = float(units @ weights)
    w2, kappa = float(np.sum(weights * weights)), float(form_diagonal(weights).sum())
    q = float(((units - d) ** 2) @ (weights * weights)) if units.size > 1 else math.nan
    doc_part = w2 * q / kappa if units.size > 1 else 0.0
    doc_noise = doc_part ** 2 / float(weighted_df(weights)) if units.size > 1 else 0.0
    variance = floor.variance + doc_part
    df = variance ** 2 / (floor.variance ** 2 / floor.df + doc_noise)
    scalar, nan, no = np.float64, np.float64(math.nan), np.array(False)
    return CrossedMoments(estimate=scalar(d), per_seed=np.array([d]), v_seed=scalar(floor.variance),
                          q_doc=scalar(q), q_int=nan, seed_var=scalar(floor.variance),
                          doc_var=scalar(q / kappa) if units.size > 1 else nan, interaction_var=nan,
                          seed_truncated=no, doc_truncated=no, doc_pretest_p=nan, doc_pooled=no,
                          var_d=scalar(variance), df=scalar(df), satterthwaite_df=scalar(df))


def _floor_notes(use: FloorUse, df: float) -> tuple[str, ...]:
    floor = f"the noise floor (τ² {use.floor.variance:.3g}, {use.floor.df:g} df)"
    transfer = "the verdict is only as good as the floor's transfer to this candidate"
    if use.how == "floor":
        note = f"one seed pair: the seed variance is {floor}; {transfer}"
    elif use.how == "pooled":
        note = (f"the seed variance pools {floor} with this study's own spread (F test of their consistency p = "
                f"{use.f_p_value:.2f}): {df:.1f} df; {transfer}")
    else:
        note = (f"this study's seed spread is larger than {floor} allows (F = {use.f_statistic:.3g}, p = "
                f"{use.f_p_value:.3g}): the interval uses the study's own spread, not the floor")
    low_df = () if use.floor.df >= MIN_FLOOR_DF else (
        f"the noise floor rests on {use.floor.df:g} df, fewer than {MIN_FLOOR_DF}: a verdict from it can be wrong "
        "more often than its level says (docs/statistics.md); measure the floor from more runs",)
    return (note,) + low_df


def _notes(fit: CrossedMoments, n_seeds: int, n_sampled: int, unit: str) -> tuple[str, ...]:
    notes = []
    if n_sampled == 1:
        notes.append(f"one {unit}: no {unit} component can be estimated; the interval is the paired t over seeds "
                     f"and speaks to this {unit} only")
    if n_seeds == 2:
        notes.append("2 seed pairs: the seed variance rests on 1 degree of freedom, so the interval is a t with 1 df "
                     "(calibrated, but wide); a third seed pair or a noise floor (gatedv noise-floor) narrows it")
    if bool(fit.doc_truncated):
        notes.append(f"the {unit} component was estimated below 0 and set to 0: the interval rests on the spread "
                     f"of the per-seed differences alone ({n_seeds - 1} df)")
    elif bool(fit.doc_pooled):
        notes.append(f"the {unit} component is not distinguishable from the seed × {unit} interaction (pre-test "
                     f"p = {float(fit.doc_pretest_p):.2f} ≥ {DEFAULTS.pooling_level:g}), so its noisy estimate is "
                     f"left out of the interval, which rests on the spread of the per-seed differences alone "
                     f"({n_seeds - 1} df)")
    if bool(fit.seed_truncated):
        notes.append("the seed component was estimated below 0 and is shown as 0; the interval keeps the observed "
                     "spread of the per-seed differences, which already holds the interaction term")
    return tuple(notes)


def _json_safe(value):
    """A field as strict JSON: tuples as lists, a floor use as its dict, undefined or infinite numbers as None."""
    if isinstance(value, tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, FloorUse):
        return value.to_dict()
    if isinstance(value, (float, np.floating)):
        return finite_or_none(value)
    return value
