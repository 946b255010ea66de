"""A setup's noise floor: the seed variance τ² that a paired comparison's D carries, measured once and reused.

τ² = Var(D_s), the variance over training seed pairs of a comparison's per-seed difference with the documents held
fixed (the seed effect of the difference plus the seed × document interaction averaged over the documents). It is a
property of the setup — size, recipe, budget, evaluation set — far more than of the candidate change, so it can be
measured without the candidate:

* from A/A runs, k runs of one configuration that differ only by training seed: with run means m_1 … m_k on the
  evaluation set, a paired comparison has Var(D_s) = σ²_B + σ²_V − 2 Cov(m_B, m_V) ≤ 2 σ²_run whenever the two arms'
  seed effects are not negatively correlated and their run-to-run variances are alike, so τ̂² = 2 s²_m (k − 1 df) is
  a conservative floor (the more the pairing helps, the more conservative);
* from earlier paired studies of the same setup, each with S_i ≥ 2 seed pairs: the per-seed differences' variances
  s²_i pooled with weights S_i − 1 (Σ(S_i − 1) df), after Bartlett's test of their homogeneity.

docs/noise-floor.md derives this and shows by simulation when it holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from gatedv_stats.core.errors import InputError

# The level of the F test that the study's own seed spread is no larger than the floor allows (one-sided): below it
# the floor understates this candidate's seed variance, the study's spread is used alone and the output says so. A
# spread smaller than the floor's is no evidence against it: falling back to a spread that is small by chance would
# make the interval too narrow exactly then (bench/noise_floor_calibration.py).
CONSISTENCY_LEVEL = 0.05
# Below this many df a floor's own noise shows in the verdict's error rate (bench/noise_floor_calibration.py): the
# output warns.
MIN_FLOOR_DF = 9


@dataclass(frozen=True)
class SeedVariance:
    """An estimate of τ², the seed variance of a paired comparison's D (in D's units squared), with its df."""

    variance: float
    df: float


@dataclass(frozen=True)
class FloorEstimate:
    """The noise floor measured from A/A runs or from earlier paired studies."""

    seed: SeedVariance
    source: str  # "A/A runs" or "paired studies"
    n_sources: int  # runs (A/A) or studies
    values: tuple[float, ...]  # the A/A runs' means, or the studies' per-seed variances
    homogeneity_p: float | None  # Bartlett's test across the studies (None for A/A runs or one study)

    def to_dict(self) -> dict:
        return {"seed_variance": self.seed.variance, "df": self.seed.df, "source": self.source,
                "n_sources": self.n_sources, "values": list(self.values), "homogeneity_p": self.homogeneity_p}


def aa_floor(run_means: np.ndarray) -> FloorEstimate:
    """τ̂² = 2 s²_m from the means m_s of k ≥ 3 runs of one configuration that differ only by seed (k − 1 df)."""
    means = np.asarray(run_means, dtype=np.float64)
    if means.ndim != 1 or means.size < 3:
        raise InputError(f"noise floor: needs at least 3 runs that differ only by training seed, got {means.size}")
    if not np.all(np.isfinite(means)):
        raise InputError("noise floor: the runs' means must be finite")
    variance = 2.0 * float(np.var(means, ddof=1))
    if not variance > 0.0:
        raise InputError("noise floor: the runs' means are all equal, so they show no seed variance (reruns of one "
                         "seed measure only kernel nondeterminism)")
    return FloorEstimate(SeedVariance(variance, means.size - 1.0), "A/A runs", int(means.size),
                         tuple(float(m) for m in means), None)


def pooled_floor(per_seed_differences: Sequence[np.ndarray]) -> FloorEstimate:
    """τ̂² pooled over earlier paired studies, each given by its per-seed differences D_s (S_i ≥ 2), weighted by
    S_i − 1, with Bartlett's test of homogeneity (`scipy.stats.bartlett`) when there are two studies or more."""
    studies = [np.asarray(values, dtype=np.float64) for values in per_seed_differences]
    if not studies or any(values.ndim != 1 or values.size < 2 for values in studies):
        raise InputError("noise floor: every earlier study needs at least 2 seed pairs")
    df = float(sum(values.size - 1 for values in studies))
    if df < 2:
        raise InputError(f"noise floor: the studies give {df:g} degree of freedom; at least 2 are needed (3 seed "
                         "pairs, or two studies of 2)")
    variances = [float(np.var(values, ddof=1)) for values in studies]
    pooled = sum((values.size - 1) * variance for values, variance in zip(studies, variances)) / df
    if not pooled > 0.0:
        raise InputError("noise floor: the studies' per-seed differences do not vary")
    homogeneity = float(stats.bartlett(*studies).pvalue) if len(studies) > 1 else None
    return FloorEstimate(SeedVariance(pooled, df), "paired studies", len(studies), tuple(variances), homogeneity)


@dataclass(frozen=True)
class FloorUse:
    """How a study's seed variance was obtained with a floor: the floor alone (one seed pair), the floor and the
    study's own spread pooled, or the study's own where the F test finds them inconsistent."""

    how: str  # "floor", "pooled" or "study"
    floor: SeedVariance
    study_variance: float | None  # the study's s²_D (None with one seed pair)
    study_df: float | None
    f_statistic: float | None  # s²_D / τ̂²_floor
    f_p_value: float | None  # one-sided (the study's spread larger), F(S − 1, ν_floor)
    seed: SeedVariance  # what the interval uses

    def to_dict(self) -> dict:
        return asdict(self)  # the floor and the seed variance as their own dicts


def use_floor(floor: SeedVariance, per_seed: np.ndarray) -> FloorUse:
    """How the study with the per-seed differences `per_seed` uses the floor: from two seed pairs on, pooled with its
    own spread by df unless the F test of s²_D / τ̂² against F(S − 1, ν) rejects at `CONSISTENCY_LEVEL`."""
    values = np.asarray(per_seed, dtype=np.float64)
    if values.size < 2:
        return FloorUse("floor", floor, None, None, None, None, floor)
    study_df = values.size - 1.0
    study = float(np.var(values, ddof=1))
    f = study / floor.variance
    p = float(stats.f.sf(f, study_df, floor.df))
    if p < CONSISTENCY_LEVEL:
        return FloorUse("study", floor, study, study_df, f, p, SeedVariance(study, study_df))
    pooled_df = floor.df + study_df
    pooled = (floor.df * floor.variance + study_df * study) / pooled_df
    return FloorUse("pooled", floor, study, study_df, f, p, SeedVariance(pooled, pooled_df))
