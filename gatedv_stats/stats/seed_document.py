"""An interval for the mean NLL difference that generalises over training seeds and documents.

Seeds are the subjects and documents the items of a crossed design (Clark 1973; Baayen, Davidson & Bates
2008). Per-token paired difference of seed pair s on document i, token weights w_i = n_i / Σ n:

    y_si = (ℓ_var,s,i − ℓ_base,s,i) / n_i = δ + a_s + b_i + e_si,    D = Σ_s Σ_i w_i y_si / S
    Var(D) = σ²_seed / S + σ²_doc Σw² + σ²_int Σw² / S

The components come from three weighted mean squares (method of moments, closed form, O(S·N)), with
κ = Σw² − 2Σw³ + (Σw²)², the trace of the quadratic form of the last two:

    D_s = Σ_i w_i y_si,            V_seed = Σ_s (D_s − D)² / (S − 1)          E = σ²_seed + σ²_int Σw²
    ȳ_i = mean_s y_si,             Q_doc  = Σ_i w_i² (ȳ_i − D)²                E = (σ²_doc + σ²_int / S) κ
    r_si = y_si − ȳ_i − D_s + D,   Q_int  = Σ_s Σ_i w_i² r_si² / (S − 1)       E = σ²_int κ

so Var̂(D) = V_seed / S + Σw² σ̂²_doc with σ̂²_doc = (Q_doc − Q_int / S) / κ; with equal weights this is
(MS_seed + MS_doc − MS_int) / (S·N). Q_doc is the document bootstrap's own (delta-method) variance of D, so
the document term stays unbiased when documents (or clusters) of different sizes have different variances.
The document term is pooled into the interaction (left out) unless Q_doc / (Q_int / S) passes a pre-test
F test at the 0.25 level. The derivation, the degrees of freedom, the pooling rule and the calibration are in
docs/statistics.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy import special

from gatedv_stats import formatting as fmt
from gatedv_stats.stats import metrics
from gatedv_stats.errors import InputError
from gatedv_stats.stats.seed_uncertainty import paired_arrays
from gatedv_stats.stats.intervals import ConfidenceInterval
from gatedv_stats.stats.validation import check_confidence_level

# Level of the pre-test that keeps the document term in Var̂(D): the level Bozivich, Bancroft & Hartley (1956)
# recommend for "sometimes pool" rules. Truncating the term at 0 alone keeps its positive noise and over-covers
# (up to 0.987 at a stated 0.95) when the interaction dominates; pooling at 0.10 under-covers (docs/statistics.md).
POOLING_LEVEL = 0.25


class ClusterSums(NamedTuple):
    """Per-cluster sums: `values` (…, C) and `n_targets` (C,) in the order of the sorted `labels` (C,)."""

    values: np.ndarray
    n_targets: np.ndarray
    labels: np.ndarray


def cluster_sums(values: np.ndarray, n_targets: np.ndarray, labels: np.ndarray) -> ClusterSums:
    """Sum loss (differences) and target counts over the documents of each cluster (e.g. web domain).

    `values` has documents on its last axis: (N,) per-document differences d_i, or (S, N) loss sums. The
    document bootstrap of Σ d / Σ n over the cluster sums is the cluster bootstrap; the seed-and-document
    interval over them treats clusters as the sampled units. D = Σ d / Σ n is the same either way.
    """
    values = np.asarray(values, dtype=np.float64)
    n = np.asarray(n_targets, dtype=np.float64)
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.shape[0] != values.shape[-1] or n.shape != labels.shape:
        raise InputError(f"clusters: {labels.shape[0] if labels.ndim == 1 else labels.shape} labels for "
                         f"{values.shape[-1]} documents; give one label per document")
    try:
        unique, inverse = np.unique(labels, return_inverse=True)
    except TypeError as error:  # mixed types (e.g. strings and None) cannot be sorted
        raise InputError(f"clusters: labels must be all strings or all numbers ({error})") from None
    order = np.argsort(inverse, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(inverse[order]) != 0])
    return ClusterSums(values=np.add.reduceat(values[..., order], starts, axis=-1),
                       n_targets=np.add.reduceat(n[order], starts), labels=unique)


@dataclass(frozen=True)
class CrossedMoments:
    """Method-of-moments fit of the crossed model; every field is an array over the leading batch axes of y.

    `seed_var` and `doc_var` are truncated at 0 (`seed_truncated`, `doc_truncated` say where); `doc_pooled` says
    where the document term is left out of `var_d` (truncated, or its pre-test p-value `doc_pretest_p` is at
    least POOLING_LEVEL). With one document (or cluster) `doc_var`, `interaction_var`, `q_doc`, `q_int` and
    `doc_pretest_p` are NaN.
    """

    d: np.ndarray  # D
    per_seed: np.ndarray  # (…, S) D_s
    v_seed: np.ndarray
    q_doc: np.ndarray
    q_int: np.ndarray
    seed_var: np.ndarray
    doc_var: np.ndarray
    interaction_var: np.ndarray
    seed_truncated: np.ndarray
    doc_truncated: np.ndarray
    doc_pretest_p: np.ndarray  # P(F(ν_doc, ν_int) ≥ Q_doc / (Q_int / S)): σ²_doc = 0 against > 0
    doc_pooled: np.ndarray
    var_d: np.ndarray  # V_seed / S + Σw² σ̂²_doc unless the document term is pooled
    df: np.ndarray  # Satterthwaite's df under the few-seed guard: the df of the interval
    satterthwaite_df: np.ndarray


def weighted_df(weights: np.ndarray) -> float:
    """Effective df (tr A)² / tr(A²) of Q_doc = Σ w_i² (z_i − Σ w z)² for independent z_i of equal variance.

    A = Mᵀ diag(w²) M with M = I − 1wᵀ, i.e. diag(ω) + G K Gᵀ with ω = w², G = [ω, w] and
    K = [[0, −1], [−1, Σω]], so both traces are sums over documents. N − 1 for equal weights.
    """
    w = np.asarray(weights, dtype=np.float64)
    omega = w * w
    g = np.stack([omega, w], axis=1)
    k = np.array([[0.0, -1.0], [-1.0, omega.sum()]])
    gram = g.T @ g
    trace_a = omega.sum() - 2.0 * np.dot(omega, w) + omega.sum() ** 2
    trace_a2 = (np.sum(omega ** 2) + 2.0 * np.trace(k @ (g.T @ (omega[:, None] * g)))
                + np.trace(k @ gram @ k @ gram))
    return float(trace_a ** 2 / trace_a2) if trace_a2 > 0.0 else math.nan


def crossed_moments(y: np.ndarray, weights: np.ndarray, pooling_level: float = POOLING_LEVEL) -> CrossedMoments:
    """Fit the crossed model to per-token differences y (…, S, N) with weights (N,) summing to 1 (S ≥ 2);
    the document term enters Var̂(D) when its pre-test p-value is below `pooling_level` (1: whenever σ̂²_doc > 0)."""
    y = np.asarray(y, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    n_seeds = y.shape[-2]
    per_seed = y @ w
    d = per_seed.mean(axis=-1)
    seed_dev = per_seed - d[..., None]
    v_seed = np.sum(seed_dev ** 2, axis=-1) / (n_seeds - 1)
    doc_means = y.mean(axis=-2)
    w2 = w * w
    q_doc = (doc_means - d[..., None]) ** 2 @ w2
    residual = y - doc_means[..., None, :] - seed_dev[..., :, None]
    q_int = np.sum(residual ** 2 @ w2, axis=-1) / (n_seeds - 1)
    return _combine(d, per_seed, v_seed, q_doc, q_int, w, n_seeds, pooling_level)


def _combine(d, per_seed, v_seed, q_doc, q_int, w, n_seeds, pooling_level) -> CrossedMoments:
    """Components, Var̂(D) and its df from the three mean squares (see the module docstring)."""
    w2 = float(np.sum(w * w))
    kappa = w2 - 2.0 * float(np.sum(w ** 3)) + w2 * w2  # E[Q_doc], E[Q_int] per unit of variance
    seed_part = v_seed / n_seeds  # the per-seed differences' own spread: σ²_seed/S + σ²_int Σw²/S
    if kappa <= 1e-12 * w2:  # one document or cluster: nothing to separate the document term with
        nan = np.full_like(d, np.nan)
        no = np.zeros(d.shape, dtype=bool)
        seed_df = np.full_like(d, n_seeds - 1.0)
        return CrossedMoments(d=d, per_seed=per_seed, v_seed=v_seed, q_doc=nan, q_int=nan, seed_var=v_seed,
                              doc_var=nan, interaction_var=nan, seed_truncated=no, doc_truncated=no,
                              doc_pretest_p=nan, doc_pooled=no, var_d=seed_part, df=seed_df,
                              satterthwaite_df=seed_df)
    interaction_var = q_int / kappa
    doc_raw = (q_doc - q_int / n_seeds) / kappa
    seed_raw = v_seed - w2 * interaction_var
    doc_truncated = doc_raw < 0.0
    nu_doc = weighted_df(w)
    nu_int = (n_seeds - 1) * nu_doc
    with np.errstate(divide="ignore", invalid="ignore"):  # Q_int = 0: no interaction to pool into
        pretest_p = special.fdtrc(nu_doc, nu_int, q_doc / (q_int / n_seeds))
    doc_pooled = doc_truncated | ~(pretest_p < pooling_level)
    var_d = seed_part + np.where(doc_pooled, 0.0, w2 * doc_raw)
    # Satterthwaite: each mean square M_k with coefficient c_k is taken as c_k E[M_k] χ²_ν / ν.
    doc_noise = np.where(doc_pooled, 0.0,
                         (w2 / kappa * q_doc) ** 2 / nu_doc + (w2 / kappa / n_seeds * q_int) ** 2 / nu_int)
    seed_noise = seed_part ** 2 / (n_seeds - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        satterthwaite = var_d ** 2 / (seed_noise + doc_noise)
        # Few-seed guard: never more df than the seed part's S − 1 divided by its share of Var(D); plain
        # Satterthwaite inflates the df exactly when the few seeds happen to agree (docs/statistics.md).
        df = np.minimum(satterthwaite, (n_seeds - 1) * var_d / seed_part)
    return CrossedMoments(d=d, per_seed=per_seed, v_seed=v_seed, q_doc=q_doc, q_int=q_int,
                          seed_var=np.maximum(seed_raw, 0.0), doc_var=np.maximum(doc_raw, 0.0),
                          interaction_var=interaction_var, seed_truncated=seed_raw < 0.0,
                          doc_truncated=doc_truncated, doc_pretest_p=pretest_p, doc_pooled=doc_pooled, var_d=var_d,
                          df=df, satterthwaite_df=satterthwaite)


@dataclass(frozen=True)
class SeedDocumentResult:
    """The seed-and-document interval for D and ΔP (nats per token; negative favours the variant)."""

    d: float  # mean over seeds of the token-averaged NLL difference
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
        return float(2.0 * special.stdtr(self.df, -abs(self.d) / self.se))  # scipy.stats.t.sf without its checks

    def interval_at(self, confidence_level: float) -> ConfidenceInterval:
        """D ± t · SE at another level (e.g. a Bonferroni-adjusted one)."""
        half_width = float(special.stdtrit(self.df, 0.5 + confidence_level / 2)) * self.se
        return ConfidenceInterval(self.d - half_width, self.d + half_width)

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
        pct = fmt.format_percent(self.confidence_level, 0)
        low, high = self.delta_p_interval
        components = [f"seed {self.seed_var:.3g}"]
        if self.doc_var is not None:
            components += [f"{'cluster' if self.n_clusters is not None else 'document'} {self.doc_var:.3g}",
                           f"interaction {self.interaction_var:.3g}"]
        lines = [
            f"seed-and-document interval ({self.n_seeds} seed pairs × {units}): D {fmt.format_nll_diff(self.d)} "
            f"(SE {self.se:.3g}, df {self.df:.1f}), {pct} interval {fmt.format_interval(*self.confidence_interval)}",
            f"ΔP {fmt.format_delta_p(self.delta_p)}, {pct} interval [{fmt.format_delta_p(low)}, "
            f"{fmt.format_delta_p(high)}] (through the log PPL ratio; approximate)",
            "variance components (per-token nats²): " + ", ".join(components),
            *(f"  note: {note}" for note in self.notes),
        ]
        return "\n".join(lines)


def seed_document_interval(baseline: np.ndarray, variant: np.ndarray, n_targets: np.ndarray, *,
                           clusters: np.ndarray | None = None,
                           confidence_level: float = 0.95) -> SeedDocumentResult:
    """Interval for D and ΔP over new seeds and new documents (or clusters: one label per document).

    `baseline`, `variant`: (S, N) loss sums in nats (row = seed pair); `n_targets`: (N,). D ± t_df · SE with
    SE² = V_seed / S + Σw² σ̂²_doc and df Satterthwaite's, capped at (S − 1) / (the seed part's share of SE²).
    ΔP = P̄_var / P̄_base − 1; its interval is exp(log(1 + ΔP) ± t_df · SE) − 1, which treats the log ratio
    of mean PPLs as having D's standard error: an approximation that holds while per-seed PPL spreads are
    small (log(1 + ΔP) − D is about half the difference of the arms' variances of NLL over seeds).
    """
    confidence_level = check_confidence_level(confidence_level)
    baseline, variant, n = paired_arrays(baseline, variant, n_targets)
    n_seeds, n_docs = baseline.shape
    if n_seeds < 2:
        raise InputError(f"seed-and-document interval: needs at least 2 paired seeds for an interval that "
                         f"generalises over seeds, got {n_seeds}")
    if not (np.all(np.isfinite(baseline)) and np.all(np.isfinite(variant))):
        raise InputError("seed-and-document interval: loss sums must be finite")
    if not np.all(n > 0):
        raise InputError("seed-and-document interval: every n_targets must be at least 1")
    differences, units_n = variant - baseline, n
    if clusters is not None:
        differences, units_n, _ = cluster_sums(differences, n, clusters)
    fit = crossed_moments(differences / units_n, units_n / units_n.sum())
    if not float(fit.var_d) > 0.0:
        raise InputError("seed-and-document interval: the loss differences do not vary over seeds or documents, "
                         "so there is no spread to form an interval from")
    se, df = math.sqrt(float(fit.var_d)), float(fit.df)
    # scipy.stats.t.ppf's own function, without its argument checks (they cost 30× more, per group of a breakdown)
    half_width = float(special.stdtrit(df, 0.5 + confidence_level / 2)) * se
    mean_ppl_base = float(metrics.perplexity(metrics.token_nll(baseline, n)).mean())
    mean_ppl_var = float(metrics.perplexity(metrics.token_nll(variant, n)).mean())
    log_ratio = math.log(mean_ppl_var / mean_ppl_base)
    n_clusters = None if clusters is None else int(units_n.size)
    truncated = tuple(name for name, flag in (("seed", fit.seed_truncated), ("document", fit.doc_truncated))
                      if bool(flag))
    return SeedDocumentResult(
        d=float(fit.d), se=se, df=df, satterthwaite_df=float(fit.satterthwaite_df),
        confidence_level=confidence_level,
        confidence_interval=ConfidenceInterval(float(fit.d) - half_width, float(fit.d) + half_width),
        log_ratio=log_ratio, log_ratio_se=se, delta_p=math.expm1(log_ratio),
        delta_p_interval=ConfidenceInterval(_expm1(log_ratio - half_width), _expm1(log_ratio + half_width)),
        per_seed=tuple(float(v) for v in fit.per_seed), seed_var=float(fit.seed_var),
        doc_var=_finite_or_none(fit.doc_var), interaction_var=_finite_or_none(fit.interaction_var),
        v_seed=float(fit.v_seed), q_doc=_finite_or_none(fit.q_doc), q_int=_finite_or_none(fit.q_int),
        n_seeds=n_seeds, n_docs=n_docs, n_clusters=n_clusters, truncated=truncated,
        doc_pretest_p=_finite_or_none(fit.doc_pretest_p), doc_pooled=bool(fit.doc_pooled),
        notes=_notes(fit, n_seeds, units_n.size, n_clusters is not None),
    )


def _notes(fit: CrossedMoments, n_seeds: int, n_units: int, clustered: bool) -> tuple[str, ...]:
    unit = "cluster" if clustered else "document"
    notes = []
    if n_units == 1:
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
                     f"p = {float(fit.doc_pretest_p):.2f} ≥ {POOLING_LEVEL:g}), so its noisy estimate is left out "
                     f"of the interval, which rests on the spread of the per-seed differences alone "
                     f"({n_seeds - 1} df)")
    if bool(fit.seed_truncated):
        notes.append("the seed component was estimated below 0 and is shown as 0; the interval keeps the observed "
                     "spread of the per-seed differences, which already holds the interaction term")
    return tuple(notes)


def _expm1(x: float) -> float:
    """exp(x) − 1, infinite where a very wide interval's upper end overflows float64."""
    return math.expm1(x) if x < 709.0 else math.inf


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def _finite_or_none(value) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def _json_safe(value):
    if isinstance(value, (float, np.floating)):
        return _finite_or_none(value)
    return value
