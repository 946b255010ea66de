"""t boundaries calibrated to the joint law of the looks' t statistics (no noise floor): each look's first crossings
against a brute-force simulation of seed pairs whose t's come from `scipy.stats.ttest_1samp`, the effective
fractions against scipy's t and normal quantiles, the marginal reading's overspending they correct, determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from gatedv_stats.core.errors import ParameterError
from gatedv_stats.stats import sequential as gs
from gatedv_stats.stats import sequential_t as gst

ALPHA = 0.025  # one direction's
# (spending function, the looks' seed pairs): one look per seed pair from 2, and looks that skip seed pairs
# one look per seed pair and looks that skip seed pairs; the fast loop has one, the slow suite all
DESIGNS = [pytest.param("obf", [2, 3, 4, 5, 6], marks=pytest.mark.slow),
           pytest.param("pocock", [2, 3, 4, 5, 6], marks=pytest.mark.slow),
           pytest.param("pocock", [2, 4, 5, 8], marks=pytest.mark.slow), ("obf", [3, 4, 6, 10])]


def brute_force_t(counts, n_paths, seed):
    """T_k of independent N(0, 1) seed pairs at every look, by scipy's one-sample t test, and of the mirror paths."""
    draws = np.random.default_rng(seed).standard_normal((n_paths, counts[-1]))
    statistic = np.array([stats.ttest_1samp(draws[:, :n], 0.0, axis=1).statistic for n in counts])
    return np.concatenate((statistic, -statistic), axis=1)


def first_crossings(statistic, critical):
    """The share of paths whose first crossing of T_k ≥ c_k is at look k."""
    crossed = np.zeros(statistic.shape[1], dtype=bool)
    shares = []
    for row, bound in zip(statistic, critical):
        now = ~crossed & (row >= bound)
        shares.append(now.mean())
        crossed |= now
    return np.array(shares)


def design(function, counts):
    """The spent α at the effective fractions and the calibrated critical values on n_k − 1 df."""
    fractions = gst.effective_fractions(counts, ALPHA, function)
    spent = np.array([gs.spending(value, ALPHA, function) for value in fractions])
    bounds = gst.joint_t_bounds(counts, spent)
    return spent, np.array([gs.t_critical(bound, n - 1.0) for bound, n in zip(bounds, counts)])


@pytest.mark.parametrize("function, counts", DESIGNS)
def test_each_look_spends_its_increment_under_the_joint_t_law(function, counts):
    spent, critical = design(function, counts)
    statistic = brute_force_t(counts, 150_000, seed=sum(counts))
    n_paths = statistic.shape[1]
    increments = np.diff(spent, prepend=0.0)
    shares = first_crossings(statistic, critical)
    tolerance = 4.0 * np.sqrt(increments / n_paths) + 1e-4  # the brute force's error and the calibration's
    np.testing.assert_array_less(np.abs(shares - increments), tolerance)
    assert abs(shares.sum() - ALPHA) < 4.0 * math.sqrt(ALPHA / n_paths) + 2e-4
    coverage = np.all(np.abs(statistic[:, :n_paths // 2]) < critical[:, None], axis=0).mean()
    assert coverage > 1.0 - 2.0 * ALPHA - 4.0 * math.sqrt(2.0 * ALPHA / (n_paths // 2)) - 4e-4


def test_the_marginal_reading_of_z_boundaries_overspends_on_few_df():
    """The z boundaries at k / K read on t with the same tail: 0.0286 instead of 0.025 at K = 6."""
    counts = [2, 3, 4, 5, 6]
    bounds, _ = gs.efficacy_bounds(np.array(counts) / 6.0, ALPHA, "obf")
    marginal = [gs.t_critical(bound, n - 1.0) for bound, n in zip(bounds, counts)]
    statistic = brute_force_t(counts, 150_000, seed=1)
    overspent = first_crossings(statistic, marginal).sum() - ALPHA
    assert overspent > 4.0 * math.sqrt(ALPHA / statistic.shape[1])
    assert first_crossings(statistic, design("obf", counts)[1]).sum() < ALPHA + overspent / 2.0


def test_the_first_look_is_its_t_quantile_and_no_look_exceeds_its_marginal_quantile():
    spent, critical = design("pocock", [2, 3, 4, 5, 6])
    increments = np.diff(spent, prepend=0.0)
    assert stats.t.sf(critical[0], 1) == pytest.approx(spent[0], rel=1e-9)
    assert np.all(critical <= stats.t.isf(increments, np.arange(1, 6)) * (1.0 + 1e-12))
    assert np.all(np.diff(critical) < 0.0)


def test_effective_fractions_weigh_each_look_by_its_t():
    counts = np.array([2, 3, 4, 5, 6])
    for function in gs.SPENDING_FUNCTIONS:
        bounds, _ = gs.efficacy_bounds(counts / 6.0, ALPHA, function)
        readings = stats.t.isf(stats.norm.sf(bounds), counts - 1)
        expected = counts * (bounds / readings) ** 2
        np.testing.assert_allclose(gst.effective_fractions(counts, ALPHA, function), expected / expected[-1],
                                   rtol=1e-9)
    many = np.array([200, 300, 400])  # on many df a t is a z: the fractions are the information's
    np.testing.assert_allclose(gst.effective_fractions(many, ALPHA), many / 400.0, rtol=0.02)
    tiny = gst.effective_fractions([2, 3, 1000], ALPHA)  # early looks whose z boundaries spend nothing
    assert 0.0 < tiny[0] < tiny[1] < 1e-300 and tiny[-1] == 1.0


@pytest.mark.slow
def test_the_same_looks_give_bit_identical_boundaries_and_later_looks_leave_earlier_ones():
    spent = np.array([gs.spending(t, ALPHA, "pocock") for t in gst.effective_fractions([2, 3, 4, 5], ALPHA,
                                                                                        "pocock")])
    first = gst.joint_t_bounds([2, 3, 4, 5], spent)
    gst._calibrated_critical.cache_clear()  # recomputed, not remembered
    again = gst.joint_t_bounds([2, 3, 4, 5], spent)
    assert first.tobytes() == again.tobytes()
    assert gst.joint_t_bounds([2, 3, 4], spent[:3]).tobytes() == first[:3].tobytes()


def test_bad_looks_are_refused():
    with pytest.raises(ParameterError, match="counts: the looks' seed pairs must be integers of at least 2"):
        gst.effective_fractions([1, 2, 3], ALPHA)
    with pytest.raises(ParameterError, match="counts: "):
        gst.joint_t_bounds([2, 2, 3], [0.0, 0.01, 0.025])
    with pytest.raises(ParameterError, match="spent: the cumulative α spent must be one non-decreasing value"):
        gst.joint_t_bounds([2, 3], [0.02, 0.01])


@pytest.mark.slow  # 4 million brute-force paths per design: the precision the docs quote
@pytest.mark.parametrize("function, counts", DESIGNS[:2])
def test_the_alpha_spent_lies_within_its_monte_carlo_precision(function, counts):
    _, critical = design(function, counts)
    spent = np.mean([first_crossings(brute_force_t(counts, 500_000, seed=seed), critical).sum()
                     for seed in range(4)])
    assert abs(spent - ALPHA) < 2e-4  # the brute force's own SE: 4e-5


@pytest.mark.slow  # 4 million studies of five looks
@pytest.mark.parametrize("function", ["obf", "pocock"])
def test_under_h0_the_joint_t_stagewise_p_is_never_anti_conservative(function):
    """Studies of up to 6 seed pairs (looks at 2 … 6; scipy's one-sample t's), stopped at the first crossing of
    either direction; the stage-wise p of each at its stop against uniformity at the ledger's levels."""
    counts = [2, 3, 4, 5, 6]
    spent, critical = design(function, counts)
    p_values = []
    for seed in range(10, 20):
        statistic = brute_force_t(counts, 200_000, seed=seed)
        crossed = np.abs(statistic) >= critical[:, None]
        stops = np.where(crossed.any(axis=0), crossed.argmax(axis=0), len(counts) - 1)
        at_stop = statistic[stops, np.arange(statistic.shape[1])]
        better = at_stop >= critical[stops]
        for look in range(len(counts)):
            here = stops == look
            p_values.append(gst.joint_t_stagewise_p(counts, spent, look, at_stop[here], better[here]))
    p_values = np.concatenate(p_values)
    for level in (0.0005, 0.0027, 0.01, 0.05):
        share = float(np.mean(p_values <= level))
        assert share <= level + 2.0 * math.sqrt(level * (1.0 - level) / p_values.size), (level, share)


def test_the_joint_t_stagewise_p_and_median_unbiased_estimate():
    counts = [2, 3, 4, 5, 6]
    spent, critical = design("obf", counts)
    # a crossing's p is at most the α spent by its look; the last look's, not crossed, is its t tail beyond the α
    # spent before it, less what earlier crossings took of that tail
    assert gst.joint_t_stagewise_p(counts, spent, 4, float(critical[4]), True) == pytest.approx(spent[4], abs=2e-4)
    last = gst.joint_t_stagewise_p(counts, spent, 4, 0.5, False)
    assert spent[3] + stats.t.sf(0.5, 5) - spent[3] <= last <= spent[3] + stats.t.sf(0.5, 5)
    assert gst.joint_t_stagewise_p(counts, spent, 1, -3.0, False) >= spent[-1]
    # the estimate at an early crossing is pulled toward 0 from the naive T / √n
    t = float(critical[2]) + 0.5
    drift = gst.joint_t_median_unbiased(counts, spent, 2, t, True)
    assert 0.0 < drift < t / math.sqrt(4)
    assert drift == gst.joint_t_median_unbiased(counts, spent, 2, t, True)  # seeded: the same every time
