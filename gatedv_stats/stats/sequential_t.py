"""t boundaries for group-sequential looks whose variance comes from the looks' own seed pairs (no noise floor).

At look k after n_k seed pairs the statistic is the one-sample t of the per-seed differences on n_k − 1 df. The
looks share their seeds, in the mean and in the variance estimate, so the joint law of T_1, T_2, … is not that of
the z's: read marginally on t (the same tail probability), z boundaries spend more than α on so few df, because an
extreme t on one or two df comes from a small variance estimate that the next seed pairs no longer share. Here the
critical values are calibrated to the joint law itself: P₀(T_j < c_j for j < k, T_k ≥ c_k) = α(s_k) − α(s_{k−1})
under independent normal seed pairs, by a seeded Monte Carlo of the looks' sufficient statistics. α is spent at
the fractions of the looks' effective information, which give little of it to looks where a t on one or two df
cannot use it. Pure functions over numbers; docs/sequential-seeds.md derives and calibrates them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator

import numpy as np
from scipy import special

from gatedv_stats.core.errors import ParameterError
from gatedv_stats.stats.sequential import Numbers, efficacy_bounds, find_root, t_critical

# Simulated paths of seed pairs, each used with its mirror image (−D): the one-sided α a design spends then lies
# within about ±1e-4 of the spending function's (two SD; docs/sequential-seeds.md).
T_PATHS = 2**21
T_SEED = 20_250_601  # fixed, so that the same looks always give bit-identical boundaries
# Paths under a drift, for the median-unbiased estimate (a probability of 1/2 needs no more than this to about 0.001).
DRIFT_PATHS = 2**17


def effective_fractions(counts: Numbers, alpha: float, function: str = "obf") -> np.ndarray:
    """The fractions α is spent at when the look after n_k of n_K seed pairs is a t on n_k − 1 df: n_k·w_k / (n_K·w_K),
    w_k = (e_k / c_k)² with e_k the z boundary of one-sided `alpha` spent by `function` at n_k / n_K and c_k its t
    reading with the same tail. A z statistic crosses e_k with probability one half at drift e_k, the t crosses c_k at
    about noncentrality c_k: at its boundary the t has the power of the z at information I_k·w_k. A look whose z
    boundary spends nothing keeps a vanishing fraction."""
    n = _check_counts(counts)
    bounds, _ = efficacy_bounds(n / n[-1], alpha, function)
    readings = np.array([t_critical(bound, size - 1.0) for bound, size in zip(bounds, n)])
    with np.errstate(invalid="ignore"):
        weights = np.where(np.isfinite(bounds), (bounds / readings) ** 2, 0.0)
    effective = n * np.maximum(weights, np.finfo(np.float64).tiny)
    return effective / effective[-1]


def joint_t_bounds(counts: Numbers, spent: Numbers) -> np.ndarray:
    """The z boundaries e_k whose reading on t with n_k − 1 df, c_k = t_{n_k−1, 1−p_k} with p_k = 1 − Φ(e_k), spends
    the cumulative one-sided α `spent` under the joint law of the looks' t statistics (after `counts` seed pairs),
    with the other direction and any futility boundary left out (non-binding). +∞ where a look spends nothing."""
    n = _check_counts(counts)
    total = np.asarray(spent, dtype=np.float64)
    if total.shape != n.shape or np.any(np.diff(total) < 0.0) or total[0] < 0.0:
        raise ParameterError("spent", "the cumulative α spent must be one non-decreasing value per look")
    critical = np.array(_calibrated_critical(tuple(int(v) for v in n), tuple(float(v) for v in total)))
    return -special.ndtri(special.stdtr(n - 1.0, -critical))


@functools.lru_cache(maxsize=256)
def _calibrated_critical(counts: tuple[int, ...], spent: tuple[float, ...]) -> tuple[float, ...]:
    """c_k look by look from α(s_k) − α(s_{k−1}) = P(T_k ≥ c_k) − P(T_j ≥ c_j for some j < k, T_k ≥ c_k): the first
    term exact (T_k is t on n_k − 1 df), only the second, the overlap with the earlier crossings, from the simulated
    paths, so that the Monte Carlo error is that of the small overlap. c_k is the fixed point of c ↦
    t_{n_k−1, 1−(increment + overlap(c))}, reached from the marginal value (overlap 0) in a few steps."""
    increments = np.diff(spent, prepend=0.0)
    crossed = np.zeros(2 * T_PATHS, dtype=bool)
    critical = []
    for k, statistic in enumerate(_null_t_paths(counts)):
        bound, overlap = np.inf, 0
        while increments[k] > 0.0:
            bound = float(-special.stdtrit(counts[k] - 1.0, increments[k] + overlap / crossed.size))
            previous, overlap = overlap, int(np.count_nonzero(crossed & (statistic >= bound)))
            if overlap == previous:
                break
        critical.append(bound)
        crossed |= statistic >= bound
    return tuple(critical)


def joint_t_stagewise_p(counts: Numbers, spent: Numbers, look: int, statistic: float | np.ndarray,
                        crossed: bool | np.ndarray) -> float | np.ndarray:
    """The stage-wise ordering p-value of H0 "not better" (`stats.sequential.stagewise_probability`) under the joint
    law of the looks' t statistics: α(s_{k−1}) + P₀(T_j < c_j for j < k, T_k ≥ t) (+ the α of the looks after k when
    the look did not cross), the middle term P₀(T_k ≥ t), exact from t on n_k − 1 df, less its overlap with the
    earlier crossings, from the same simulated paths as the boundaries. `counts` and `spent` cover every look of the
    design (those taken, then the planned ones), as `joint_t_bounds` takes them; `look` is 0-based. Elementwise over
    arrays of statistics (and crossings) stopped at the same look."""
    n = _check_counts(counts)
    total = np.asarray(spent, dtype=np.float64)
    crossed_before = _crossed_statistics(tuple(int(v) for v in n), tuple(float(v) for v in total))[look]
    t = np.asarray(statistic, dtype=np.float64)
    overlap = (crossed_before.size - np.searchsorted(crossed_before, t, side="left")) / (2 * T_PATHS)
    tail = np.maximum(special.stdtr(n[look] - 1.0, -t) - overlap, 0.0)
    later = np.where(crossed, 0.0, total[-1] - total[look])
    p_value = np.minimum(1.0, (total[look - 1] if look else 0.0) + tail + later)
    return float(p_value) if p_value.ndim == 0 else p_value


def joint_t_median_unbiased(counts: Numbers, spent: Numbers, look: int, statistic: float, crossed: bool) -> float:
    """The drift per seed pair, in units of the seed pairs' SD, at which the observed outcome is the median of the
    stage-wise ordering under the looks' joint t law (seeded simulated paths): the median-unbiased estimate of the
    difference is this times the look's se·√n_k."""
    n = _check_counts(counts)
    critical = np.array(_calibrated_critical(tuple(int(v) for v in n), tuple(float(v) for v in spent)))
    centred, slope = _drift_paths(tuple(int(v) for v in n))

    def excess(drift: float) -> float:
        above = centred + drift * slope >= critical[:, None]
        first = np.where(above.any(axis=0), above.argmax(axis=0), n.size)
        here = centred[look] + drift * slope[look] >= statistic
        extreme = (first < look) | ((first >= look) & here)
        if not crossed:
            extreme |= (first > look) & (first < n.size)
        return float(np.count_nonzero(extreme)) / extreme.size - 0.5

    root = math.sqrt(float(n[look]))
    return find_root(excess, statistic / root - 10.0, statistic / root + 10.0, xtol=1e-6,
                     rtol=4 * np.finfo(float).eps)  # brentq's default rtol


@functools.lru_cache(maxsize=8)
def _crossed_statistics(counts: tuple[int, ...], spent: tuple[float, ...]) -> tuple[np.ndarray, ...]:
    """For each look, the sorted T_k of the simulated null paths that crossed at an earlier look."""
    crossed = np.zeros(2 * T_PATHS, dtype=bool)
    out = []
    for statistic, bound in zip(_null_t_paths(counts), _calibrated_critical(counts, spent)):
        out.append(np.sort(statistic[crossed]))
        crossed |= statistic >= bound
    return tuple(out)


@functools.lru_cache(maxsize=8)
def _drift_paths(counts: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """T_k of `DRIFT_PATHS` paths at drift 0 and its change per unit of drift, √n_k / s_k (looks × paths)."""
    rows = list(_t_paths(counts, DRIFT_PATHS, np.random.default_rng(T_SEED + 1)))
    return np.array([row[0] for row in rows]), np.array([row[1] for row in rows])


def _null_t_paths(counts: tuple[int, ...]) -> Iterator[np.ndarray]:
    """T_k, look by look, of `T_PATHS` paths of independent N(0, 1) seed-pair differences and of their mirror
    images."""
    for statistic, _ in _t_paths(counts, T_PATHS, np.random.default_rng(T_SEED)):
        yield np.concatenate((statistic, -statistic))


def _t_paths(counts: tuple[int, ...], size: int, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """T_k and √n_k / s_k, look by look, of `size` paths of independent N(0, 1) seed-pair differences: each block of
    new seed pairs adds its sum (normal) and its within sum of squares (χ² on its size − 1 df), so the draws per look
    do not grow with the seed pairs. A drift θ per seed pair adds θ·√n_k / s_k to T_k."""
    total, squares, previous = np.zeros(size), np.zeros(size), 0
    for n in counts:
        block = n - previous
        block_sum = math.sqrt(block) * rng.standard_normal(size)
        if block > 1:
            squares += rng.chisquare(block - 1, size)
        if previous:
            squares += previous * block / n * (total / previous - block_sum / block) ** 2
        total += block_sum
        spread = np.sqrt(squares / (n - 1))
        yield total / math.sqrt(n) / spread, math.sqrt(n) / spread
        previous = n


def _check_counts(counts: Numbers) -> np.ndarray:
    n = np.asarray(counts, dtype=np.float64)
    if n.ndim != 1 or n.size == 0 or n[0] < 2 or np.any(np.diff(n) <= 0) or np.any(n != np.round(n)):
        raise ParameterError("counts", f"the looks' seed pairs must be integers of at least 2 that increase strictly, "
                             f"got {n.tolist()}")
    return n
