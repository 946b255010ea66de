"""The crossed seeds × documents model, fitted by the method of moments: variance components, Var̂(D), its df.

From per-token paired differences y_si (seed pair s, document i) and weights w_i, `crossed_moments` computes
D = Σ_s Σ_i w_i y_si / S, the three weighted mean squares V_seed (per-seed D_s), Q_doc (documents) and Q_int
(interaction), the components σ̂²_seed, σ̂²_doc, σ̂²_int, Var̂(D) = V_seed / S + Σw² σ̂²_doc (the document term
left out unless its F pre-test is significant at the pooling level, `DEFAULTS.pooling_level` of
gatedv_stats.core.defaults, which says why it is 0.25) and Satterthwaite's df under the few-seed guard, in
closed form, O(S·N). `clustered_moments` does the same over clusters of documents, with the df of a nested
working model. The model, the derivation of every formula, the df, the pooling rule and the calibration are in
docs/statistics.md ("The seed-and-document interval", "Clusters (web domains)").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy import special

from gatedv_stats.core.defaults import DEFAULTS
from gatedv_stats.core.errors import InputError


class ClusterSums(NamedTuple):
    """Per-cluster sums: `values` (…, C) and `n_units` (C,) in the order of the sorted `labels` (C,);
    `cluster_of` (N,) is each document's cluster."""

    values: np.ndarray
    n_units: np.ndarray
    labels: np.ndarray
    cluster_of: np.ndarray


def cluster_sums(values: np.ndarray, n_units: np.ndarray, labels: np.ndarray) -> ClusterSums:
    """Sum loss (differences) and unit counts (targets or bytes) over the documents of each cluster (e.g. web domain).

    `values` has documents on its last axis: (N,) per-document differences d_i, or (S, N) loss sums. The
    document bootstrap of Σ d / Σ n over the cluster sums is the cluster bootstrap; the seed-and-document
    interval over them treats clusters as the sampled units. D = Σ d / Σ n is the same either way.
    """
    values = np.asarray(values, dtype=np.float64)
    n = np.asarray(n_units, dtype=np.float64)
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.shape[0] != values.shape[-1] or n.shape != labels.shape:
        raise InputError(f"clusters: {labels.shape[0] if labels.ndim == 1 else labels.shape} labels for "
                         f"{values.shape[-1]} documents; give one label per document")
    unique, inverse, _ = label_codes(labels, "clusters")
    order = np.argsort(inverse, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(inverse[order]) != 0])
    return ClusterSums(values=np.add.reduceat(values[..., order], starts, axis=-1),
                       n_units=np.add.reduceat(n[order], starts), labels=unique, cluster_of=inverse)


def label_codes(labels: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct labels in sorted order, each document's index among them and how many documents each holds."""
    try:
        return np.unique(labels, return_inverse=True, return_counts=True)
    except TypeError as error:  # mixed types (e.g. strings and None) cannot be sorted
        raise InputError(f"{what}: labels must be all strings or all numbers ({error})") from None


@dataclass(frozen=True)
class CrossedMoments:
    """Method-of-moments fit of the crossed model; every field is an array over the leading batch axes of y.

    `seed_var` and `doc_var` are truncated at 0 (`seed_truncated`, `doc_truncated` say where); `doc_pooled` says
    where the document term is left out of `var_d` (truncated, or its pre-test p-value `doc_pretest_p` is at
    least the pooling level). With one document (or cluster) `doc_var`, `interaction_var`, `q_doc`, `q_int` and
    `doc_pretest_p` are NaN.
    """

    estimate: np.ndarray  # D
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


def form_diagonal(weights: np.ndarray) -> np.ndarray:
    """A_ii = w_i² (1 − 2 w_i + Σw²) of A = Mᵀ diag(w²) M, M = I − 1wᵀ, the quadratic form of Q_doc and Q_int:
    E Q_doc = Σ_i A_ii Var(ȳ_i), and κ = tr A."""
    w = np.asarray(weights, dtype=np.float64)
    return w * w * (1.0 - 2.0 * w + np.sum(w * w))


def weighted_df(weights: np.ndarray, variances: np.ndarray | None = None) -> float | np.ndarray:
    """Effective df (tr AV)² / tr((AV)²) of Q = Σ w_i² (z_i − Σ w z)² for independent z_i with variances
    proportional to `variances` (…, N) (equal when None, the homoskedastic working model): N − 1 for equal
    weights and variances.

    A = Mᵀ diag(w²) M with M = I − 1wᵀ, i.e. diag(ω) + G K Gᵀ with ω = w², G = [ω, w] and
    K = [[0, −1], [−1, Σω]], so both traces are sums over units.
    """
    w = np.asarray(weights, dtype=np.float64)
    v = np.ones_like(w) if variances is None else np.asarray(variances, dtype=np.float64)
    omega = w * w
    g = np.stack([omega, w], axis=1)
    k = np.array([[0.0, -1.0], [-1.0, omega.sum()]])
    trace = v @ form_diagonal(w)
    gvg = np.einsum("...i,ia,ib->...ab", v, g, g)
    gvdvg = np.einsum("...i,ia,ib->...ab", v * v * omega, g, g)
    trace_sq = ((v * v) @ (omega * omega) + 2.0 * np.einsum("ab,...ba->...", k, gvdvg)
                + np.einsum("ab,...bc,cd,...da->...", k, gvg, k, gvg))
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(trace_sq > 0.0, trace ** 2 / trace_sq, np.nan)
    return float(df) if df.ndim == 0 else df


def crossed_moments(y: np.ndarray, weights: np.ndarray, pooling_level: float = DEFAULTS.pooling_level, *,
                    unit_variances: np.ndarray | None = None,
                    interaction_variances: np.ndarray | None = None) -> CrossedMoments:
    """Fit the crossed model to per-token differences y (…, S, N) with weights (N,) summing to 1 (S ≥ 2).

    The document term enters Var̂(D) when its pre-test p-value is below `pooling_level` (1: whenever
    σ̂²_doc > 0). `unit_variances` (…, N) and `interaction_variances` (N,) are working models of how the
    variances of the units' seed means and of their interaction terms differ, for the df of Q_doc and Q_int
    (equal when None; `clustered_moments` gives them for clusters of documents).
    """
    y = np.asarray(y, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    n_seeds = y.shape[-2]
    per_seed = y @ w
    d = per_seed.mean(axis=-1)
    seed_dev = per_seed - d[..., None]
    v_seed = np.sum(seed_dev ** 2, axis=-1) / (n_seeds - 1)
    seed_part = v_seed / n_seeds  # the per-seed differences' own spread: σ²_seed/S + σ²_int Σw²/S
    doc_means = y.mean(axis=-2)
    squares = w * w
    q_doc = (doc_means - d[..., None]) ** 2 @ squares
    residual = y - doc_means[..., None, :] - seed_dev[..., :, None]
    q_int = np.sum(residual ** 2 @ squares, axis=-1) / (n_seeds - 1)
    # Components, Var̂(D) and its df from the three mean squares (docs/statistics.md).
    w2 = float(np.sum(squares))
    kappa = float(form_diagonal(w).sum())  # E[Q_doc], E[Q_int] per unit of variance
    if kappa <= 1e-12 * w2:  # one document or cluster: nothing to separate the document term with
        nan = np.full_like(d, np.nan)
        no = np.zeros(d.shape, dtype=bool)
        seed_df = np.full_like(d, n_seeds - 1.0)
        return CrossedMoments(estimate=d, per_seed=per_seed, v_seed=v_seed, q_doc=nan, q_int=nan,
                              seed_var=v_seed, doc_var=nan, interaction_var=nan, seed_truncated=no,
                              doc_truncated=no, doc_pretest_p=nan, doc_pooled=no, var_d=seed_part, df=seed_df,
                              satterthwaite_df=seed_df)
    nu_doc = weighted_df(w, unit_variances)
    nu_int = (n_seeds - 1) * weighted_df(w, interaction_variances)
    interaction_var = q_int / kappa
    doc_raw = (q_doc - q_int / n_seeds) / kappa
    seed_raw = v_seed - w2 * interaction_var
    doc_truncated = doc_raw < 0.0
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
    df = interval_df(satterthwaite, var_d, seed_part, n_seeds)
    return CrossedMoments(estimate=d, per_seed=per_seed, v_seed=v_seed, q_doc=q_doc, q_int=q_int,
                          seed_var=np.maximum(seed_raw, 0.0), doc_var=np.maximum(doc_raw, 0.0),
                          interaction_var=interaction_var, seed_truncated=seed_raw < 0.0,
                          doc_truncated=doc_truncated, doc_pretest_p=pretest_p, doc_pooled=doc_pooled, var_d=var_d,
                          df=df, satterthwaite_df=satterthwaite)


def clustered_moments(y: np.ndarray, n_units: np.ndarray, labels: np.ndarray,
                      pooling_level: float = DEFAULTS.pooling_level) -> CrossedMoments:
    """`crossed_moments` with clusters (e.g. web domains) as the sampled units, from per-token differences
    y (…, S, N) of documents with `n_units` (N,) and one cluster label per document.

    The df of the cluster mean squares come from the working model Var(ȳ_c) = σ²_u + τ² h_c with
    h_c = Σ_{i∈c} (n_i / n_c)²: a cluster of many documents averages away more of the document-level variance
    τ² (which holds σ²_doc + σ²_int / S), and its interaction term has variance σ²_int h_c. τ² comes from the
    documents' spread around their cluster's mean, σ²_u from Q_doc less τ²'s share (docs/statistics.md).
    """
    y = np.asarray(y, dtype=np.float64)
    n = np.asarray(n_units, dtype=np.float64)
    sums = cluster_sums(y * n, n, labels)
    share = n / sums.n_units[sums.cluster_of]
    h = np.bincount(sums.cluster_of, weights=share * share, minlength=sums.labels.size)
    means = sums.values / sums.n_units
    w = sums.n_units / sums.n_units.sum()
    if np.all(h == 1.0) or sums.labels.size == 1:
        # one document per cluster: the documents are the units, of equal working variance; one cluster: there is
        # no spread between units to estimate, as with one document
        return crossed_moments(means, w, pooling_level)
    unit_means = means.mean(axis=-2)
    within = (y.mean(axis=-2) - unit_means[..., sums.cluster_of]) ** 2 @ share  # E = τ² Σ_c (1 − h_c)
    tau2 = within / np.sum(1.0 - h)
    diagonal = form_diagonal(w)
    q_doc = (unit_means - (unit_means @ w)[..., None]) ** 2 @ (w * w)
    sigma2_u = np.maximum((q_doc - tau2 * (diagonal @ h)) / diagonal.sum(), 0.0)
    unit_variances = sigma2_u[..., None] + tau2[..., None] * h
    unit_variances = np.where(unit_variances.sum(axis=-1, keepdims=True) > 0.0, unit_variances, 1.0)
    return crossed_moments(means, w, pooling_level, unit_variances=unit_variances, interaction_variances=h)


# With this many seed pairs or fewer, the interval's df is at most S − 1: the seed variance rests on S − 1 df,
# and Satterthwaite's df, which adds the document part's, left 2-seed studies at 7–9% false verdicts where the seeds
# hold most of the variance. From 3 seed pairs on the few-seed guard keeps them at or below 6%, and a cap would cost
# most of the power of studies whose documents hold the variance (docs/noise-floor.md;
# bench/noise_floor_calibration.py).
FEW_SEEDS = 2


def interval_df(satterthwaite: np.ndarray | float, variance: np.ndarray | float, seed_part: np.ndarray | float,
                n_seeds: int) -> np.ndarray:
    """The df of the interval: Satterthwaite's under the few-seed guard, never more than the seed part's S − 1
    divided by its share of Var(D) (plain Satterthwaite inflates the df exactly when the few seeds happen to
    agree), and at most S − 1 with `FEW_SEEDS` seed pairs or fewer (docs/noise-floor.md)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.minimum(satterthwaite, (n_seeds - 1) * np.asarray(variance) / seed_part)
    return np.minimum(df, n_seeds - 1.0) if n_seeds <= FEW_SEEDS else df
