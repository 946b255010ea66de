"""E-values for "the variant is not better": nonnegative statistics with E₀[e] ≤ 1 under every difference that does
not favour the variant, which e-LOND tests under any dependence between candidates (Xu & Ramdas 2024).

The likelihood ratio of the estimate D̂ ~ N(θ, V) at the smallest effect of interest δ against θ = 0,
e = exp((δ·d − δ²/2) / V) with d the oriented estimate, has E_θ[e] = exp(δθ/V) ≤ 1 for every θ ≤ 0. Along a
sequential design's looks, S_k = d_k·I_k is a Brownian motion at the planned information I_k, so
e_k = exp(δS_k − δ²I_k/2) is an e-process: an e-value at any stopping look, however the stop was chosen. With the
variance estimated both hold as its df grow (docs/research-ledger.md, "Using the pieces together").
"""

from __future__ import annotations

import math

from gatedv_stats.core.errors import ParameterError

MAX_E_VALUE = 1e300  # beyond the reciprocal of any level, and finite in strict JSON


def likelihood_ratio_e_value(estimate: float, variance: float, effect: float, higher_is_better: bool) -> float:
    """exp((δ·d − δ²/2) / V) for the estimate D̂ with variance V, δ = `effect` > 0 (a size on D's scale) and d the
    estimate oriented so that a benefit to the variant is positive; at most `MAX_E_VALUE`."""
    if not (effect > 0.0 and math.isfinite(effect)):
        raise ParameterError("sesoi", f"the e-value's alternative must be a positive effect, got {effect}")
    if not (variance > 0.0 and math.isfinite(variance)):
        raise ParameterError("variance", f"must be positive and finite, got {variance}")
    exponent = (effect * (estimate if higher_is_better else -estimate) - effect * effect / 2.0) / variance
    return MAX_E_VALUE if exponent > math.log(MAX_E_VALUE) else math.exp(exponent)
