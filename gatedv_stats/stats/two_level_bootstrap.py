"""The two-level seed × document bootstrap: an interval for ΔP itself over new seeds and new documents.

The document bootstrap holds the trained models fixed. This one treats seeds as a sample too: it resamples seed
pairs and, independently, documents (the two are crossed: every seed is evaluated on every document; the
"pigeonhole" bootstrap of Owen 2007). With few seeds its seed level is coarse, and `percentile_seed_coverage`
says how far its percentile interval falls short.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from gatedv_stats.core.errors import InputError
from gatedv_stats.core.validation import check_confidence_level, check_n_resamples, check_seed
from gatedv_stats.pairing.losses import paired_arrays
from gatedv_stats.stats import metrics
from gatedv_stats.stats.intervals import ConfidenceInterval
from gatedv_stats.stats.resampling import resampled_sums


@dataclass(frozen=True)
class TwoLevelBootstrapInterval:
    """Two-level (seed × document) percentile bootstrap interval for ΔP."""

    delta_p: float  # observed ΔP = P̄_variant / P̄_baseline − 1
    confidence_interval: ConfidenceInterval  # for ΔP
    confidence_level: float
    n_resamples: int
    rng_seed: int
    n_seeds: int
    n_docs: int
    distinct_seed_resamples: int  # C(2S − 1, S): how coarse the seed level of the bootstrap is
    seed_level_coverage: float  # approximate coverage of the percentile interval when seed variation dominates

    def to_dict(self) -> dict:
        """The published JSON keys (low, high, confidence, samples)."""
        return {"delta_p": self.delta_p, "low": self.confidence_interval.low, "high": self.confidence_interval.high,
                "confidence": self.confidence_level, "samples": self.n_resamples, "rng_seed": self.rng_seed,
                "n_seeds": self.n_seeds, "n_docs": self.n_docs,
                "distinct_seed_resamples": self.distinct_seed_resamples,
                "seed_level_coverage": self.seed_level_coverage}


def two_level_bootstrap(baseline: np.ndarray, variant: np.ndarray, n_units: np.ndarray, *,
                        n_resamples: int = 2000, confidence_level: float = 0.95, rng_seed: int = 0,
                        progress: bool | None = False) -> TwoLevelBootstrapInterval:
    """Percentile interval for ΔP from resampling seed pairs and, independently, documents.

    Each resample draws S seed pairs and N documents with replacement; per-seed PPLs are recomputed on the
    resampled documents and ΔP = mean PPL_variant / mean PPL_baseline − 1 over the resampled pairs.
    """
    baseline, variant, n = paired_arrays(baseline, variant, n_units)
    if baseline.shape[0] < 2:
        raise InputError(f"seed × document bootstrap: needs at least 2 paired seeds, got {baseline.shape[0]}")
    check_n_resamples(n_resamples)
    check_confidence_level(confidence_level)
    check_seed(rng_seed, "rng_seed")
    n_seeds, n_docs = baseline.shape
    observed = metrics.delta_p(metrics.perplexity(metrics.token_nll(baseline, n)).mean(),
                               metrics.perplexity(metrics.token_nll(variant, n)).mean())
    seed_counts = np.random.default_rng(rng_seed).multinomial(n_seeds, np.full(n_seeds, 1.0 / n_seeds),
                                                              size=n_resamples)  # (B, S)
    # Per resample, the drawn documents' loss sums of every seed of both arms and their units (documents drawn
    # as the document bootstrap draws them, from generators spawned from the same RNG seed).
    sums = resampled_sums(np.column_stack([baseline.T, variant.T, n]), n_resamples=n_resamples, rng_seed=rng_seed,
                          progress=progress, desc="seed × document bootstrap")
    tokens = sums[:, -1:]
    ppl_baseline = metrics.perplexity(sums[:, :n_seeds] / tokens)  # (B, S)
    ppl_variant = metrics.perplexity(sums[:, n_seeds:2 * n_seeds] / tokens)
    estimates = (seed_counts * ppl_variant).sum(axis=1) / (seed_counts * ppl_baseline).sum(axis=1) - 1.0
    alpha = 1.0 - confidence_level
    low, high = np.quantile(estimates, [alpha / 2, 1 - alpha / 2])
    return TwoLevelBootstrapInterval(
        delta_p=float(observed), confidence_interval=ConfidenceInterval(float(low), float(high)),
        confidence_level=confidence_level, n_resamples=n_resamples, rng_seed=rng_seed, n_seeds=n_seeds, n_docs=n_docs,
        distinct_seed_resamples=math.comb(2 * n_seeds - 1, n_seeds),
        seed_level_coverage=percentile_seed_coverage(n_seeds, confidence_level),
    )


def percentile_seed_coverage(n_seeds: int, confidence_level: float = 0.95) -> float:
    """Approximate coverage of a percentile bootstrap over n seeds for a mean of normal seed effects.

    The bootstrap spread is the plug-in SD (ddof 0) and its quantiles are normal ones, so the interval covers
    when |t_{n−1}| ≤ z·sqrt((n−1)/n).
    """
    if n_seeds < 2:
        return math.nan
    z = stats.norm.ppf(0.5 + confidence_level / 2)
    return float(1.0 - 2.0 * stats.t.sf(z * math.sqrt((n_seeds - 1) / n_seeds), n_seeds - 1))
