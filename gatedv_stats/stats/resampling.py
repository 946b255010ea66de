"""Document bootstrap of the mean NLL difference (docs/method.md §5), models held fixed.

The statistic is the ratio Σ d_i / Σ n_i over a resample of documents drawn with replacement. Resamples are
drawn in chunks of index rows (about 64Ki indices, or one resample when N is larger) so that the working arrays
stay in cache and memory stays at 16 bytes per document; the chunk size depends only on N and the number of
resamples, so a seed fixes the result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr, ndtri
from tqdm import tqdm

from gatedv_stats.errors import InputError, ParameterError
from gatedv_stats.stats.intervals import ConfidenceInterval
from gatedv_stats.stats.validation import check_confidence_level, check_n_resamples, check_rng_seed

METHODS = ("percentile", "bca")
CHUNK_ELEMENTS = 1 << 16  # indices per chunk: 512 KiB of int64 plus a 512 KiB gather buffer


@dataclass(frozen=True)
class BootstrapResult:
    """A bootstrap confidence interval, shaped like `scipy.stats.bootstrap`'s result."""

    statistic: float  # the statistic on the full sample
    confidence_interval: ConfidenceInterval
    bootstrap_distribution: np.ndarray  # (n_resamples,)
    n_resamples: int
    confidence_level: float
    seed: int
    method: str

    @property
    def standard_error(self) -> float:
        return float(np.std(self.bootstrap_distribution, ddof=1))

    def to_dict(self) -> dict:
        return {
            "statistic": self.statistic,
            "confidence_interval": list(self.confidence_interval),
            "standard_error": self.standard_error,
            "n_resamples": self.n_resamples,
            "confidence_level": self.confidence_level,
            "seed": self.seed,
            "method": self.method,
        }


def ratio_statistic(d: np.ndarray, n_targets: np.ndarray) -> float:
    """Σ d_i / Σ n_i."""
    return float(np.sum(d) / np.sum(n_targets, dtype=np.float64))


def bootstrap_ratio_distribution(d: np.ndarray, n_targets: np.ndarray, *, n_resamples: int, seed: int,
                                 progress: bool | None = False) -> np.ndarray:
    """Σ d_i / Σ n_i over `n_resamples` resamples of the documents with replacement, drawn from default_rng(seed)."""
    samples = n_resamples
    d = np.asarray(d, dtype=np.float64)
    n = np.asarray(n_targets, dtype=np.float64)
    count = d.shape[0]
    rng = np.random.default_rng(seed)
    # Equal target counts (the usual fixed-length windows) make every resample's denominator the same.
    constant_denominator = float(count * n[0]) if np.all(n == n[0]) else None
    rows = max(1, min(samples, CHUNK_ELEMENTS // count))
    distribution = np.empty(samples, dtype=np.float64)
    gathered = np.empty((rows, count), dtype=np.float64)
    with tqdm(total=samples, disable=None if progress is None else not progress, unit="resample",
              desc="document bootstrap", leave=False) as bar:
        for start in range(0, samples, rows):
            size = min(rows, samples - start)
            index = rng.integers(0, count, size=(size, count))
            numerator = np.take(d, index, out=gathered[:size]).sum(axis=1)
            if constant_denominator is None:
                denominator = np.take(n, index, out=gathered[:size]).sum(axis=1)
            else:
                denominator = constant_denominator
            distribution[start:start + size] = numerator / denominator
            bar.update(size)
    return distribution


def document_bootstrap(d: np.ndarray, n_targets: np.ndarray, *, n_resamples: int = 2000,
                       confidence_level: float = 0.95, seed: int = 0, method: str = "percentile",
                       progress: bool | None = False) -> BootstrapResult:
    """Bootstrap interval for D = Σ d_i / Σ n_i, resampling documents (percentile or BCa, as scipy defines them)."""
    d = np.asarray(d, dtype=np.float64)
    n_targets = np.asarray(n_targets, dtype=np.float64)
    if method not in METHODS:
        raise ParameterError("method", f"must be one of {', '.join(METHODS)} (got {method!r})")
    check_confidence_level(confidence_level)
    check_n_resamples(n_resamples)
    check_rng_seed(seed)
    if d.ndim != 1 or d.shape != n_targets.shape or d.size == 0:
        raise ValueError("d and n_targets must be non-empty 1-D arrays of equal length")
    statistic = ratio_statistic(d, n_targets)
    distribution = bootstrap_ratio_distribution(d, n_targets, n_resamples=n_resamples, seed=seed, progress=progress)
    interval = interval_from_distribution(d, n_targets, distribution, confidence_level=confidence_level, method=method)
    return BootstrapResult(statistic=statistic, confidence_interval=interval, bootstrap_distribution=distribution,
                           n_resamples=n_resamples, confidence_level=confidence_level, seed=seed, method=method)


def interval_from_distribution(d: np.ndarray, n_targets: np.ndarray, distribution: np.ndarray, *,
                               confidence_level: float, method: str = "percentile") -> ConfidenceInterval:
    """Two-sided interval from a bootstrap distribution of Σ d_i / Σ n_i (linear-interpolated quantiles)."""
    alpha = (1.0 - confidence_level) / 2.0
    if method == "bca":
        statistic = ratio_statistic(d, n_targets)
        probabilities = _bca_probabilities(np.asarray(d, dtype=np.float64), np.asarray(n_targets, dtype=np.float64),
                                           statistic, distribution, alpha)
    else:
        probabilities = (alpha, 1.0 - alpha)
    low, high = np.quantile(distribution, probabilities)
    return ConfidenceInterval(float(low), float(high))


def _bca_probabilities(d: np.ndarray, n: np.ndarray, statistic: float, distribution: np.ndarray,
                       alpha: float) -> tuple[float, float]:
    """Efron's bias-corrected and accelerated levels; the jackknife of a ratio has a closed form."""
    below = np.count_nonzero(distribution < statistic) + np.count_nonzero(distribution <= statistic)
    z0 = ndtri(below / (2.0 * distribution.size))
    if d.size < 2:
        raise InputError("the BCa interval needs at least two documents")
    jackknife = (d.sum() - d) / (n.sum() - n)
    spread = jackknife.mean() - jackknife
    scale = np.sum(spread ** 2) ** 1.5
    acceleration = np.sum(spread ** 3) / (6.0 * scale) if scale > 0 else 0.0
    probabilities = []
    for z_alpha in (ndtri(alpha), -ndtri(alpha)):
        shifted = z0 + z_alpha
        probabilities.append(float(ndtr(z0 + shifted / (1.0 - acceleration * shifted))))
    if any(math.isnan(p) for p in probabilities):
        raise InputError("the BCa interval is undefined for this sample (a degenerate bootstrap distribution)")
    return probabilities[0], probabilities[1]
