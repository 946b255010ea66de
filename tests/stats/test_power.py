"""t-test power and detectable effects: against statsmodels where its solver converges, against the noncentral t
directly everywhere, including the few-seed corners where statsmodels' solver stops short."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.power import TTestPower

from gatedv_stats.core.errors import ParameterError
from gatedv_stats.stats.planning import (
    MAX_PAIRS,
    detectable_effect_size,
    detectable_noncentrality,
    one_sample_power,
    required_pairs,
    t_power,
)


@pytest.mark.parametrize("nobs", [3, 5, 10, 40])
@pytest.mark.parametrize("effect_size", [0.2, 0.8, 2.0])
def test_power_equals_statsmodels(nobs, effect_size):
    expected = TTestPower().power(effect_size=effect_size, nobs=nobs, alpha=0.05, alternative="two-sided")
    assert one_sample_power(effect_size, nobs, 0.05) == pytest.approx(expected, rel=1e-9)


def test_power_equals_a_simulated_t_test():
    rng = np.random.default_rng(4)
    samples = rng.normal(0.9, 1.0, size=(40_000, 6))
    rejected = stats.ttest_1samp(samples, 0.0, axis=1).pvalue <= 0.05
    assert rejected.mean() == pytest.approx(one_sample_power(0.9, 6, 0.05), abs=4 * math.sqrt(0.25 / 40_000))


@pytest.mark.parametrize(("nobs", "alpha", "power"), [(2, 0.05, 0.8), (3, 0.01, 0.9), (3, 0.05, 0.8), (4, 0.001, 0.95),
                                                     (5, 0.05, 0.5), (30, 0.05, 0.8), (1000, 0.01, 0.99)])
def test_detectable_effect_has_exactly_the_power(nobs, alpha, power):
    effect = detectable_effect_size(nobs, alpha, power)
    assert one_sample_power(effect, nobs, alpha) == pytest.approx(power, abs=1e-9)
    assert one_sample_power(effect * 0.99, nobs, alpha) < power


def test_a_three_seed_pilot_at_alpha_001_and_power_09():
    """statsmodels' solver returns an effect at which 3 seeds have power 0.41, not 0.9; ours has 0.9."""
    ours = detectable_effect_size(3, 0.01, 0.9)
    theirs = TTestPower().solve_power(nobs=3, alpha=0.01, power=0.9, alternative="two-sided")
    assert one_sample_power(ours, 3, 0.01) == pytest.approx(0.9, abs=1e-9)
    assert ours > 2 * theirs


@pytest.mark.parametrize("effect_size", [0.3, 0.9, 2.5, 10.0])
def test_required_pairs_is_the_smallest_n_with_the_power(effect_size):
    n = required_pairs(effect_size, alpha=0.05, power=0.8)
    assert one_sample_power(effect_size, n, 0.05) >= 0.8
    assert n == 2 or one_sample_power(effect_size, n - 1, 0.05) < 0.8


def test_required_pairs_stops_at_the_largest_feasible_study():
    at_the_bound = 2.9 / math.sqrt(MAX_PAIRS)
    assert required_pairs(at_the_bound) <= MAX_PAIRS
    with pytest.raises(ParameterError, match="too small to detect") as raised:
        required_pairs(1e-12, parameter="effect")
    assert raised.value.parameter == "effect"


@pytest.mark.parametrize("power", [0.01, 0.05])
def test_power_at_most_alpha_names_the_power(power):
    for solve in (lambda: detectable_noncentrality(5.0, 0.05, power), lambda: required_pairs(0.5, power=power)):
        with pytest.raises(ParameterError, match="must exceed alpha") as raised:
            solve()
        assert raised.value.parameter == "power"


def test_noncentrality_for_fractional_degrees_of_freedom():
    """Satterthwaite degrees of freedom are not integers."""
    nc = detectable_noncentrality(4.37, 0.05, 0.8)
    assert t_power(nc, 4.37, 0.05) == pytest.approx(0.8, abs=1e-9)
    assert detectable_noncentrality(4.0, 0.05, 0.8) > nc > detectable_noncentrality(5.0, 0.05, 0.8)
