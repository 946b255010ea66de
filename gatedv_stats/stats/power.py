"""Power of the two-sided t test, from the noncentral t distribution (scipy.stats.nct), and what it can detect.

A t test with `df` degrees of freedom whose statistic has noncentrality λ = δ / SE(δ̂) rejects at level α with
probability P(T > t) + P(T < −t), T ~ nct(df, λ), t = t_{1−α/2, df}. statsmodels' `TTestPower.solve_power` can
stop short of the root with very few observations (3 seeds at α = 0.01); here the root is bracketed and found by
Brent's method, and every result is checked by recomputing its power.
"""

from __future__ import annotations

import math

from scipy import optimize, stats

from gatedv_stats.errors import ParameterError
from gatedv_stats.stats.validation import check_at_least, check_open_unit

_POWER_TOLERANCE = 1e-9
MAX_PAIRS = 10**12  # more pairs than any study can run: an effect that needs more is not detectable


def t_power(noncentrality: float, df: float, alpha: float) -> float:
    """Power of the two-sided level-α t test with `df` degrees of freedom at noncentrality λ ≥ 0."""
    critical = stats.t.ppf(1.0 - alpha / 2.0, df)
    lower = stats.nct.cdf(-critical, df, noncentrality)
    if not math.isfinite(lower):
        # scipy's lower tail fails far out (λ ≳ 8); it is below P(T < 0) = Φ(−λ), negligible there
        bound = stats.norm.cdf(-noncentrality)
        if bound > 1e-12:
            raise ArithmeticError(f"noncentral t lower tail undefined at λ = {noncentrality}, df = {df}")
        lower = 0.0
    return float(stats.nct.sf(critical, df, noncentrality) + lower)


def detectable_noncentrality(df: float, alpha: float, power: float) -> float:
    """The noncentrality λ at which the two-sided level-α t test with `df` degrees of freedom has `power`."""
    _check_power_above_alpha(alpha, power)
    high = 1.0
    while t_power(high, df, alpha) < power:
        high *= 2.0
    root = optimize.brentq(lambda nc: t_power(nc, df, alpha) - power, 0.0, high, xtol=1e-12, rtol=1e-12)
    if abs(t_power(root, df, alpha) - power) > _POWER_TOLERANCE:
        raise ArithmeticError(f"the power solver missed: λ = {root} gives power {t_power(root, df, alpha)}")
    return float(root)


def one_sample_power(effect_size: float, nobs: int, alpha: float) -> float:
    """Power of the two-sided one-sample (paired) t test at a standardised effect δ/σ with `nobs` observations."""
    return t_power(effect_size * math.sqrt(nobs), nobs - 1, alpha)


def detectable_effect_size(nobs: int, alpha: float, power: float) -> float:
    """The smallest standardised effect δ/σ the two-sided one-sample t test detects with `power` from `nobs`."""
    check_at_least("nobs", nobs, 2)
    return detectable_noncentrality(nobs - 1, alpha, power) / math.sqrt(nobs)


def required_pairs(effect_size: float, *, alpha: float = 0.05, power: float = 0.8,
                   parameter: str = "effect_size") -> int:
    """Smallest n ≥ 2 whose two-sided paired (one-sample) t test has at least `power` at `effect_size` = δ/σ.

    An effect that needs more than `MAX_PAIRS` pairs raises `ParameterError` under `parameter`.
    """
    if not effect_size > 0.0:
        raise ParameterError(parameter, f"the standardised effect must be positive, got {effect_size}")
    _check_power_above_alpha(alpha, power)
    high = 2
    while one_sample_power(effect_size, high, alpha) < power:
        if high == MAX_PAIRS:
            raise ParameterError(parameter, f"too small to detect: power {power} at alpha {alpha} needs more than "
                                            f"{MAX_PAIRS:.0e} pairs (standardised effect {effect_size:.3g})")
        high = min(2 * high, MAX_PAIRS)
    if high == 2:
        return 2
    low = high // 2  # power(low) < power
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if one_sample_power(effect_size, middle, alpha) >= power else (middle, high)
    return high


def _check_power_above_alpha(alpha: float, power: float) -> None:
    check_open_unit("alpha", alpha)
    check_open_unit("power", power)
    if power <= alpha:
        raise ParameterError("power", f"{power} must exceed alpha {alpha}: a test has power α at no effect")
