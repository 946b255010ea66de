"""Group-sequential boundaries for verdicts over seed pairs: one look per completed seed pair, up to K.

Lan–DeMets (1983) α-spending at arbitrary information fractions t_k = I_k / I_K, with the O'Brien–Fleming-type
function α(t) = 2 − 2Φ(z_{1−α/2} / √t) or the Pocock-type α·log(1 + (e − 1)t), spent at α/2 in each direction (two
one-sided efficacy boundaries); the boundaries come from the recursive numerical integration of the canonical joint
distribution (Armitage, McPherson & Rowe 1969; Jennison & Turnbull 2000, ch. 19): Z_k ~ N(θ√I_k, 1) with
Corr(Z_k, Z_l) = √(I_k / I_l). A non-binding futility boundary comes from β-spending with the same function at the
drift θ√I_K of the smallest effect of interest. Each look's z boundary is read as a t critical value on the look's df
(the same tail probability; without a noise floor the z's are first calibrated to the looks' joint t law by
`stats.sequential_t`), the repeated confidence interval is D̂_k ± c_k·se_k, and the decision at a look is read off
both. Pure functions over numbers; docs/sequential-seeds.md derives and calibrates them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
from scipy import optimize, special

from gatedv_stats.core.errors import ParameterError
from gatedv_stats.core.validation import check_open_unit
from gatedv_stats.stats.intervals import ConfidenceInterval

SPENDING_FUNCTIONS = ("obf", "pocock")  # O'Brien–Fleming type, Pocock type (Lan & DeMets 1983; Kim & DeMets 1987)
GRID_POINTS = 16  # r of Jennison & Turnbull's grid (about 12r Simpson nodes per look): their choice, errors ≲ 1e-6
# The most power at the smallest effect of interest that the futility boundary may cost (docs/sequential-seeds.md).
MAX_FUTILITY_COST = 0.01
STOPS = ("better", "worse", "equivalent", "no useful gain", "no detectable difference")
DECISIONS = (*STOPS, "continue")
Numbers: TypeAlias = Sequence[float] | np.ndarray  # one value per look
_FAR = 40.0  # |z| beyond which no probability is left in double precision
_Grid = tuple[np.ndarray, np.ndarray]  # nodes z_j and the sub-density of Z_k at them times the Simpson weights


def spending(t: float, total: float, function: str = "obf") -> float:
    """The cumulative error spent by information fraction `t` (0 ≤ t ≤ 1) of a one-sided `total`: α(1) = total."""
    t = min(max(float(t), 0.0), 1.0)
    if t == 0.0:
        return 0.0
    if function == "obf":
        return float(2.0 * special.ndtr(-special.ndtri(1.0 - total / 2.0) / math.sqrt(t)))
    if function == "pocock":
        return total * math.log1p((math.e - 1.0) * t)
    raise ParameterError("spending", f"must be one of {', '.join(SPENDING_FUNCTIONS)} (got {function!r})")


def check_fractions(fractions: Numbers) -> np.ndarray:
    """Information fractions strictly increasing in (0, 1]."""
    t = np.asarray(fractions, dtype=np.float64)
    if t.ndim != 1 or t.size == 0 or not np.all(np.isfinite(t)) or t[0] <= 0.0 or t[-1] > 1.0 + 1e-12 \
            or np.any(np.diff(t) <= 0.0):
        raise ParameterError("fractions", f"information fractions must increase strictly within (0, 1], got "
                             f"{[round(float(v), 6) for v in t]}")
    return np.minimum(t, 1.0)


# --- the recursion (Jennison & Turnbull 2000, §19.2) ---


def _grid(mean: float, low: float, high: float, r: int) -> tuple[np.ndarray, np.ndarray]:
    """Simpson's nodes and weights on (low, high) ∩ Jennison & Turnbull's grid about `mean`: 6r − 1 points, dense
    within ±3 SD, sparse out to ±(3 + 4 log r), trimmed at the limits (which become nodes), with midpoints added."""
    i = np.arange(1, 6 * r, dtype=np.float64)
    x = np.where(i < r, -3.0 - 4.0 * np.log(r / i),
                 np.where(i <= 5 * r, -3.0 + 3.0 * (i - r) / (2.0 * r), 3.0 + 4.0 * np.log(r / (6 * r - i)))) + mean
    y = np.concatenate(([low] if low > x[0] else [], x[(x > low) & (x < high)], [high] if high < x[-1] else []))
    if y.size < 2:
        return np.empty(0), np.empty(0)
    z = np.empty(2 * y.size - 1)
    z[0::2], z[1::2] = y, (y[:-1] + y[1:]) / 2.0
    d = np.diff(y) / 6.0
    w = np.zeros(z.size)
    w[1::2] = 4.0 * d
    w[:-1:2] += d
    w[2::2] += d
    return z, w


def _advance(grid: _Grid, t: np.ndarray, k: int, drift: float, low: float, high: float) -> _Grid:
    """Z_k on its continuation region (low, high): at the first look from its own law, later from Z_{k−1} on its
    `grid`, the convolution of §19.2."""
    t_k = float(t[k])
    mean = drift * math.sqrt(t_k)
    z, w = _grid(mean, low, high, GRID_POINTS)
    if k == 0:
        return z, w * np.exp(-0.5 * (z - mean) ** 2) / math.sqrt(2.0 * math.pi)
    if grid[0].size == 0 or z.size == 0:
        return np.empty(0), np.empty(0)
    t_prev = float(t[k - 1])
    step = t_k - t_prev
    u = (z[:, None] * math.sqrt(t_k) - grid[0][None, :] * math.sqrt(t_prev) - drift * step) / math.sqrt(step)
    density = (np.exp(-0.5 * u * u) @ grid[1]) * math.sqrt(t_k / step) / math.sqrt(2.0 * math.pi)
    return z, w * density


def _beyond(grid: _Grid, t: np.ndarray, k: int, drift: float, bound: float | np.ndarray,
            above: bool) -> float | np.ndarray:
    """P(continue through the looks before k, Z_k ≥ bound) when `above`, else P(…, Z_k ≤ bound), from Z_{k−1} on
    its `grid` (Z_0 from its own law); elementwise over an array of bounds."""
    b = np.asarray(bound, dtype=np.float64)
    if k == 0:
        mean = drift * math.sqrt(float(t[0]))
        probability = special.ndtr(mean - b if above else b - mean)
    else:
        t_prev, t_k = float(t[k - 1]), float(t[k])
        step = t_k - t_prev
        # (bound − E[Z_k | Z_{k−1} = z_j]) / SD[Z_k | Z_{k−1}] at every node z_j of the previous look
        u = (b[..., None] * math.sqrt(t_k) - grid[0] * math.sqrt(t_prev) - drift * step) / math.sqrt(step)
        probability = special.ndtr(-u if above else u) @ grid[1]
    return float(probability) if probability.ndim == 0 else probability


def find_root(excess: Callable[[float], float], low: float, high: float, xtol: float = 1e-10,
              rtol: float = 1e-12) -> float:
    """The root of a monotone `excess` on [low, high] (brentq), or the end where it does not change sign."""
    f_low, f_high = excess(low), excess(high)
    if f_low * f_high > 0.0:
        return low if abs(f_low) < abs(f_high) else high
    return float(optimize.brentq(excess, low, high, xtol=xtol, rtol=rtol))


# --- boundaries ---


def efficacy_bounds(fractions: Numbers, alpha: float, function: str = "obf") -> tuple[np.ndarray, np.ndarray]:
    """The one-sided efficacy boundaries e_k of z spending `alpha` (one direction's) by `function` at `fractions`,
    under H0 and ignoring any futility boundary (non-binding); with the cumulative α spent at each look. An
    increment too small to spend gives e_k = +∞."""
    t = check_fractions(fractions)
    spent = np.array([spending(value, alpha, function) for value in t])
    bounds = np.empty(t.size)
    grid: _Grid = (np.empty(0), np.empty(0))
    for k, increment in enumerate(np.diff(spent, prepend=0.0)):
        if increment <= 1e-300:
            bounds[k] = math.inf
        elif k == 0:
            bounds[k] = float(-special.ndtri(increment))
        else:
            bounds[k] = find_root(lambda b: _beyond(grid, t, k, 0.0, b, above=True) - increment, -_FAR, _FAR)
        grid = _advance(grid, t, k, 0.0, -math.inf, bounds[k])
    return bounds, spent


def futility_bounds(fractions: Numbers, efficacy: Numbers, drift: float, beta: float,
                    function: str = "obf") -> tuple[np.ndarray, np.ndarray]:
    """The futility boundaries f_k ≤ e_k of z (oriented so that the benefit is positive) spending a total `beta` by
    `function` under the `drift` θ√I_K: P_θ(f_j < Z_j < e_j for j < k, Z_k ≤ f_k) = β(t_k) − β(t_{k−1}); where no
    f_k ≤ e_k spends that much, f_k = e_k. With the cumulative β spent at each look."""
    t = check_fractions(fractions)
    upper = np.asarray(efficacy, dtype=np.float64)
    spent = np.array([spending(value, beta, function) for value in t])
    bounds = np.empty(t.size)
    grid: _Grid = (np.empty(0), np.empty(0))
    for k, increment in enumerate(np.diff(spent, prepend=0.0)):
        mean = drift * math.sqrt(float(t[k]))
        if increment <= 1e-300:
            bound = -math.inf
        elif k == 0:
            bound = mean + float(special.ndtri(increment))
        else:
            bound = find_root(lambda f: _beyond(grid, t, k, drift, f, above=False) - increment, mean - _FAR,
                              min(upper[k], mean + _FAR))
        bounds[k] = min(bound, upper[k])
        grid = _advance(grid, t, k, drift, bounds[k], upper[k])
    return bounds, spent


def crossing_probabilities(fractions: Numbers, upper: Numbers, lower: Numbers | None = None,
                           drift: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """P(the first exit from the continuation regions (lower_k, upper_k) is above upper_k at look k) and below
    lower_k, for Z_k ~ N(drift·√t_k, 1) with Corr(Z_k, Z_l) = √(t_k / t_l)."""
    t = check_fractions(fractions)
    high = np.asarray(upper, dtype=np.float64)
    low = np.full(t.size, -math.inf) if lower is None else np.asarray(lower, dtype=np.float64)
    above, below = np.zeros(t.size), np.zeros(t.size)
    grid: _Grid = (np.empty(0), np.empty(0))
    for k in range(t.size):
        above[k] = _beyond(grid, t, k, drift, float(high[k]), above=True)
        below[k] = _beyond(grid, t, k, drift, float(low[k]), above=False)
        grid = _advance(grid, t, k, drift, low[k], high[k])
    return above, below


def futility_beta(fractions: Numbers, efficacy: Numbers, drift: float, beta: float, function: str = "obf") -> float:
    """The total β the futility boundary spends at `drift`: `beta` (1 − the target power), or less where that would
    cost more than `MAX_FUTILITY_COST` of the power at the drift (against the efficacy boundaries alone); 0 with
    no look before the last."""
    t = check_fractions(fractions)
    if t.size < 2:
        return 0.0
    alone = power(t, efficacy, drift)

    def excess(total: float) -> float:
        lower, _ = futility_bounds(t, efficacy, drift, total, function)
        return alone - power(t, efficacy, drift, [*lower[:-1], -math.inf]) - MAX_FUTILITY_COST

    if excess(beta) <= 0.0:
        return beta
    return float(optimize.brentq(excess, 1e-12, beta, xtol=1e-6))


def power(fractions: Numbers, efficacy: Numbers, drift: float, futility: Numbers | None = None) -> float:
    """P(crossing the efficacy boundary in the direction of `drift`) at that drift (futility obeyed, if given)."""
    return float(crossing_probabilities(fractions, efficacy, futility, drift)[0].sum())


def drift_for_power(fractions: Numbers, efficacy: Numbers, target: float) -> float:
    """The drift θ√I_K at which the efficacy boundaries (no futility) have power `target`."""
    return float(optimize.brentq(lambda drift: power(fractions, efficacy, drift) - target, 0.0, 2 * _FAR, xtol=1e-8))


# --- the stage-wise ordering (Jennison & Turnbull 2000, §8.4) ---


def stagewise_probability(fractions: Numbers, efficacy: Numbers, look: int, statistic: float | np.ndarray,
                          crossed: bool | np.ndarray, drift: float = 0.0) -> float | np.ndarray:
    """P_drift(an outcome at least as extreme as the observed one) in the stage-wise ordering of the "better"
    direction: a crossing of the efficacy boundary at look j is more extreme than every outcome of a later look and
    than every other stop; any other end at look j (futility, "worse", equivalence, the last look) is less extreme
    than every crossing and than every outcome of a later look; outcomes of one look rank by their z.

    `fractions` and `efficacy` cover every look of the design (those taken, then the planned ones), `look` is the
    stopping look (0-based), `statistic` its z (oriented so that large = better) and `crossed` whether it crossed;
    elementwise over arrays of outcomes stopped at the same look. Every other boundary is ignored (as if the looks
    only stopped for a crossing), which can only add paths to the event, so the p-value (drift 0) is conservative
    whatever futility or equivalence stops were taken:
    Σ_{j<k} P(first crossing at j) + P(Z_j < e_j for j < k, Z_k ≥ z) (+ the crossings after k, when not crossed)."""
    t = check_fractions(fractions)
    upper = np.asarray(efficacy, dtype=np.float64)
    if upper.shape != t.shape or not 0 <= look < t.size:
        raise ParameterError("look", f"a look of the {t.size} looks with a boundary each, got look {look} "
                             f"(0-based) and {upper.size} boundaries")
    above, _ = crossing_probabilities(t, upper, None, drift)
    grid: _Grid = (np.empty(0), np.empty(0))
    for k in range(look):
        grid = _advance(grid, t, k, drift, -math.inf, float(upper[k]))
    tail = _beyond(grid, t, look, drift, statistic, above=True)
    later = np.where(crossed, 0.0, float(above[look + 1:].sum()))
    probability = np.minimum(1.0, float(above[:look].sum()) + tail + later)
    return float(probability) if probability.ndim == 0 else probability


def stagewise_p(fractions: Numbers, efficacy: Numbers, look: int, statistic: float | np.ndarray,
                crossed: bool | np.ndarray) -> float | np.ndarray:
    """The stage-wise ordering p-value of H0 "not better" (`stagewise_probability` at drift 0): at most the α
    spent by the stopping look when it crossed, above the whole one-sided α when it did not."""
    return stagewise_probability(fractions, efficacy, look, statistic, crossed)


def median_unbiased_drift(fractions: Numbers, efficacy: Numbers, look: int, statistic: float, crossed: bool) -> float:
    """The drift θ√I_K at which the observed outcome is the median of the stage-wise ordering (probability 1/2 of
    one at least as extreme): the median-unbiased estimate on the drift's scale (Jennison & Turnbull 2000, §8.3)."""
    root = math.sqrt(float(check_fractions(fractions)[look]))
    return find_root(lambda drift: float(stagewise_probability(fractions, efficacy, look, statistic, crossed, drift))
                     - 0.5, (statistic - _FAR / 2) / root, (statistic + _FAR / 2) / root)


# --- information with the documents fixed ---


def information(n_pairs: int | float, seed_variance: float, document_term: float) -> float:
    """I = 1 / Var(D̂) = 1 / (τ²/S + c) after S seed pairs on fixed documents: below the cap 1/c however many seeds."""
    variance = seed_variance / n_pairs + document_term
    return math.inf if variance <= 0.0 else 1.0 / variance


def information_cap(document_term: float) -> float:
    """1/c: the information that no number of seed pairs on these documents reaches."""
    return math.inf if document_term <= 0.0 else 1.0 / document_term


# --- a look ---


def t_critical(z: float, df: float) -> float:
    """The t critical value on `df` with the upper tail of the z boundary: t_{ν, 1−p}, p = 1 − Φ(z). A marginal
    reading, close enough on a noise floor's many df; on the few df of looks without one it overspends α, and
    `stats.sequential_t.joint_t_bounds` gives the z's to read instead."""
    if z == math.inf:
        return math.inf
    return float(-special.stdtrit(df, special.ndtr(-z)))


def t_futility(z: float, df: float, mean: float = 0.0) -> float:
    """The futility boundary f read on t with `df`, with the probability it was spent with: under the drift, where
    E Z_k = `mean` = θ√t_k, P(T_k ≤ c) = P(Z_k ≤ f) = Φ(f − mean) for T_k noncentral t on `df` with noncentrality
    `mean` (the central t at mean 0). The central t at Φ(f) would stop far too often on few df."""
    if z in (math.inf, -math.inf):
        return z
    return float(special.nctdtrit(df, mean, special.ndtr(z - mean)))


@dataclass(frozen=True)
class LookDecision:
    """What one look decides: the repeated confidence interval, the t boundaries on the look's df and the decision."""

    decision: str  # one of DECISIONS
    direction: str | None  # "better" / "worse" where the RCI excludes 0 (also when the decision is "equivalent")
    statistic: float  # T_k = D̂ / se, oriented so that a benefit to the variant is positive
    critical: float  # c_k: |T_k| ≥ c_k crosses the efficacy boundary
    futility: float | None  # T_k ≤ this stops for futility (None: no futility boundary at this look)
    interval: ConfidenceInterval  # D̂ ± c_k·se

    @property
    def stop(self) -> bool:
        return self.decision in STOPS


def decide_look(estimate: float, se: float, df: float, *, efficacy: float, futility: float | None, final: bool,
                higher_is_better: bool, equivalence: tuple[float, float] | None = None,
                futility_mean: float = 0.0, better: bool | None = None) -> LookDecision:
    """The decision at a look from D̂ = `estimate` with its `se` and `df`, the look's z boundaries (`efficacy` e_k;
    `futility` f_k oriented to the benefit, or None, spent where E Z_k = `futility_mean`) and the equivalence region
    on D's scale (or None): equivalent when the RCI lies inside the region (even where it excludes 0), else better /
    worse when T crosses ±c_k, else "no useful gain" before the last look when T_k ≤ the futility boundary, else
    continue, or at the last "no detectable difference". `better`, where given, replaces T_k ≥ c_k by a rule of its
    own (an e-process's)."""
    critical = t_critical(efficacy, df)
    half = critical * se
    interval = ConfidenceInterval(estimate - half, estimate + half)
    statistic = (1.0 if higher_is_better else -1.0) * estimate / se
    crossed = statistic >= critical if better is None else better
    direction = "better" if crossed else "worse" if statistic <= -critical else None
    limit = None if futility is None or final else t_futility(futility, df, futility_mean)
    if equivalence is not None and equivalence[0] < interval.low and interval.high < equivalence[1]:
        decision = "equivalent"
    elif direction is not None:
        decision = direction
    elif final:
        decision = "no detectable difference"
    else:
        decision = "no useful gain" if limit is not None and statistic <= limit else "continue"
    return LookDecision(decision, direction, statistic, critical, limit, interval)


def check_design(alpha: float, power_target: float, spending_function: str) -> None:
    """α and the power in (0, 1), power above α, and a known spending function."""
    check_open_unit("alpha", alpha)
    check_open_unit("power", power_target)
    if power_target <= alpha / 2.0:
        raise ParameterError("power", f"must exceed α/2 = {alpha / 2:g} (got {power_target:g})")
    if spending_function not in SPENDING_FUNCTIONS:
        raise ParameterError("spending", f"must be one of {', '.join(SPENDING_FUNCTIONS)} (got {spending_function!r})")
