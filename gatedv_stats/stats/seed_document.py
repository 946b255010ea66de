"""An interval for the mean NLL difference that generalises over training seeds and documents.

D, the token-weighted mean over seed pairs of the per-token NLL difference, with SE² = Var̂(D) from the crossed
seeds × documents (or × clusters) model of gatedv_stats.stats.crossed and a t interval on its df; ΔP through
the log ratio of mean perplexities. The derivation and the calibration are in docs/statistics.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special

from gatedv_stats.core import formatting as fmt
from gatedv_stats.core.defaults import DEFAULTS
from gatedv_stats.core.errors import InputError, NoSpreadError
from gatedv_stats.core.validation import check_confidence_level
from gatedv_stats.stats import metrics
from gatedv_stats.stats.crossed import CrossedMoments, clustered_moments, crossed_moments
from gatedv_stats.stats.intervals import ConfidenceInterval, log_interval_as_change
from gatedv_stats.stats.metrics import paired_arrays


@dataclass(frozen=True)
class SeedDocumentResult:
    """The seed-and-document interval for D and ΔP (nats per token; negative favours the variant)."""

    nll_diff_mean: float  # D: the mean over seeds of the token-averaged NLL difference
    se: float  # sqrt(Var̂(D))
    df: float
    satterthwaite_df: float
    confidence_level: float
    confidence_interval: ConfidenceInterval  # D ± t_{df} · se
    log_ratio: float  # log(P̄_var / P̄_base) = log(1 + ΔP)
    log_ratio_se: float  # taken equal to se (the approximation log ratio ≈ D)
    delta_p: float
    delta_p_interval: ConfidenceInterval  # exp(log_ratio ± t_{df} · se) − 1, approximate
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
    truncated: tuple[str, ...]  # components estimated below 0 and set to 0: "seed", "document"
    doc_pretest_p: float | None  # pre-test of σ²_doc = 0 (F test of Q_doc against Q_int / S); None with one document
    doc_pooled: bool  # the document term is left out of SE² (pooled into the interaction)
    notes: tuple[str, ...]

    @property
    def alpha(self) -> float:
        return 1.0 - self.confidence_level

    @property
    def p_value(self) -> float:
        """Two-sided t test of D = 0 with the interval's SE and df."""
        # scipy.stats.t.sf without its checks
        return float(2.0 * special.stdtr(self.df, -abs(self.nll_diff_mean) / self.se))

    def to_dict(self) -> dict:
        """Strict JSON: undefined or infinite numbers become None."""
        data = {name: _json_safe(getattr(self, name)) for name in self.__dataclass_fields__}
        data["confidence_interval"] = [_json_safe(v) for v in self.confidence_interval]
        data["delta_p_interval"] = [_json_safe(v) for v in self.delta_p_interval]
        data["per_seed"] = [_json_safe(v) for v in self.per_seed]
        data["truncated"], data["notes"] = list(self.truncated), list(self.notes)
        return data

    def summary(self) -> str:
        units = _count(self.n_docs, "document")
        if self.n_clusters is not None:
            units = f"{_count(self.n_clusters, 'cluster')} of {units}"
        pct = fmt.format_level(self.confidence_level)
        low, high = self.delta_p_interval
        components = [f"seed {self.seed_var:.3g}"]
        if self.doc_var is not None:
            components += [f"{'cluster' if self.n_clusters is not None else 'document'} {self.doc_var:.3g}",
                           f"interaction {self.interaction_var:.3g}"]
        lines = [
            f"seed-and-document interval ({self.n_seeds} seed pairs × {units}): "
            f"D {fmt.format_nll_diff(self.nll_diff_mean)} "
            f"(SE {self.se:.3g}, df {self.df:.1f}), {pct} interval {fmt.format_interval(*self.confidence_interval)}",
            f"ΔP {fmt.format_delta_p(self.delta_p)}, {pct} interval [{fmt.format_delta_p(low)}, "
            f"{fmt.format_delta_p(high)}] (through the log PPL ratio; approximate)",
            "variance components (per-token nats²): " + ", ".join(components),
            *(f"  note: {note}" for note in self.notes),
        ]
        return "\n".join(lines)


def seed_document_interval(baseline: np.ndarray, variant: np.ndarray, n_units: np.ndarray, *,
                           clusters: np.ndarray | None = None, confidence_level: float = DEFAULTS.confidence_level,
                           noun: str = "document") -> SeedDocumentResult:
    """Interval for D and ΔP over new seeds and new documents (or clusters: one label per document; `noun` names
    the units in the notes, e.g. "item" for a task's items).

    `baseline`, `variant`: (S, N) loss sums in nats (row = seed pair); `n_units`: (N,). D ± t_df · SE with
    SE² = V_seed / S + Σw² σ̂²_doc and df Satterthwaite's, capped at (S − 1) / (the seed part's share of SE²).
    ΔP = P̄_var / P̄_base − 1; its interval is exp(log(1 + ΔP) ± t_df · SE) − 1, which treats the log ratio
    of mean PPLs as having D's standard error: an approximation that holds while per-seed PPL spreads are
    small (log(1 + ΔP) − D is about half the difference of the arms' variances of NLL over seeds).
    """
    confidence_level = check_confidence_level(confidence_level)
    baseline, variant, n = paired_arrays(baseline, variant, n_units)
    n_seeds, n_docs = baseline.shape
    if n_seeds < 2:
        raise InputError(f"seed-and-document interval: needs at least 2 paired seeds for an interval that "
                         f"generalises over seeds, got {n_seeds}")
    if not (np.all(np.isfinite(baseline)) and np.all(np.isfinite(variant))):
        raise InputError("seed-and-document interval: loss sums must be finite")
    if not np.all(n > 0):
        raise InputError("seed-and-document interval: every n_units must be at least 1")
    y = (variant - baseline) / n
    if clusters is None:
        fit, n_sampled = crossed_moments(y, n / n.sum()), n_docs
    else:
        fit, n_sampled = clustered_moments(y, n, clusters), int(np.unique(np.asarray(clusters)).size)
    if not float(fit.var_d) > 0.0:
        raise NoSpreadError("seed-and-document interval: the paired differences do not vary over seeds or units, "
                            "so there is no spread to form an interval from")
    se, df = math.sqrt(float(fit.var_d)), float(fit.df)
    # scipy.stats.t.ppf's own function, without its argument checks (they cost 30× more, per group of a breakdown)
    half_width = float(special.stdtrit(df, 0.5 + confidence_level / 2)) * se
    mean_ppl_base = float(metrics.perplexity(metrics.token_nll(baseline, n)).mean())
    mean_ppl_var = float(metrics.perplexity(metrics.token_nll(variant, n)).mean())
    log_ratio = math.log(mean_ppl_var / mean_ppl_base)
    n_clusters = None if clusters is None else n_sampled
    truncated = tuple(name for name, flag in (("seed", fit.seed_truncated), ("document", fit.doc_truncated))
                      if bool(flag))
    return SeedDocumentResult(
        nll_diff_mean=float(fit.nll_diff_mean), se=se, df=df, satterthwaite_df=float(fit.satterthwaite_df),
        confidence_level=confidence_level,
        confidence_interval=ConfidenceInterval(float(fit.nll_diff_mean) - half_width,
                                               float(fit.nll_diff_mean) + half_width),
        log_ratio=log_ratio, log_ratio_se=se, delta_p=math.expm1(log_ratio),
        delta_p_interval=log_interval_as_change(log_ratio - half_width, log_ratio + half_width),
        per_seed=tuple(float(v) for v in fit.per_seed), seed_var=float(fit.seed_var),
        doc_var=_finite_or_none(fit.doc_var), interaction_var=_finite_or_none(fit.interaction_var),
        v_seed=float(fit.v_seed), q_doc=_finite_or_none(fit.q_doc), q_int=_finite_or_none(fit.q_int),
        n_seeds=n_seeds, n_docs=n_docs, n_clusters=n_clusters, truncated=truncated,
        doc_pretest_p=_finite_or_none(fit.doc_pretest_p), doc_pooled=bool(fit.doc_pooled),
        notes=_notes(fit, n_seeds, n_sampled, "cluster" if n_clusters is not None else noun),
    )


def _notes(fit: CrossedMoments, n_seeds: int, n_sampled: int, unit: str) -> tuple[str, ...]:
    notes = []
    if n_sampled == 1:
        notes.append(f"one {unit}: no {unit} component can be estimated; the interval is the paired t over seeds "
                     f"and speaks to this {unit} only")
    if n_seeds == 2:
        notes.append("2 seed pairs: the seed variance rests on 1 degree of freedom, and when seeds hold most of the "
                     "variance a stated 95% interval can cover as little as about 90%; use at least 3")
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


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def _finite_or_none(value) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def _json_safe(value):
    if isinstance(value, (float, np.floating)):
        return _finite_or_none(value)
    return value
