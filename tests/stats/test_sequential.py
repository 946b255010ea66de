"""Group-sequential boundaries: the published O'Brien–Fleming-type values, the recursion's crossing probabilities
against an independent computation with `scipy.stats.multivariate_normal` (the canonical joint distribution), the
boundaries against R's rpact, and the t conversion, repeated intervals and decisions of a look."""

from __future__ import annotations

import math
import os
import subprocess

import numpy as np
import pytest
from scipy import stats

from conftest import REQUIRE_SYSTEM_TOOLS, require_program
from gatedv_stats.core.errors import ParameterError
from gatedv_stats.stats import sequential as gs

RPACT_INSTALL = "apt-get install -y r-cran-rpact"

# (one-sided α, spending function, information fractions): equal and unequal looks, 2 to 8 of them
DESIGNS = [
    (0.025, "obf", [0.2, 0.4, 0.6, 0.8, 1.0]),
    (0.025, "pocock", [0.3, 0.7, 1.0]),
    (0.05, "obf", [0.15, 0.4, 0.8, 1.0]),
    (0.0125, "pocock", [0.1, 0.25, 0.45, 0.6, 0.85, 1.0]),
    (0.025, "obf", [0.5, 1.0]),
    (0.025, "obf", [k / 8 for k in range(1, 9)]),
    (0.005, "pocock", [0.05, 0.5, 0.55, 1.0]),
]


def _covariance(fractions):
    t = np.asarray(fractions, dtype=float)
    return np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))


def _box(fractions, upper, lower, drift, k, last_lower, last_upper):
    """P(lower_j < Z_j < upper_j for j < k, last_lower < Z_k < last_upper), Z from the canonical joint distribution
    (Corr(Z_j, Z_l) = √(t_j / t_l), E Z_j = drift √t_j), by scipy's multivariate normal CDF."""
    t = np.asarray(fractions[:k + 1], dtype=float)
    high = np.minimum(np.array([*upper[:k], last_upper]), 40.0)
    low = np.maximum(np.array([*lower[:k], last_lower]), -40.0)
    return stats.multivariate_normal.cdf(high, mean=drift * np.sqrt(t), cov=_covariance(t), lower_limit=low,
                                         abseps=1e-8, releps=1e-8, maxpts=100_000 * (k + 1),
                                         rng=np.random.default_rng(k))


def _crossings_by_mvn(fractions, upper, lower, drift):
    above = [_box(fractions, upper, lower, drift, k, upper[k], math.inf) for k in range(len(fractions))]
    below = [_box(fractions, upper, lower, drift, k, -math.inf, lower[k]) if np.isfinite(lower[k]) else 0.0
             for k in range(len(fractions))]
    return np.array(above), np.array(below)


def test_the_published_obrien_fleming_type_bounds_of_five_equal_looks():
    bounds, spent = gs.efficacy_bounds([0.2, 0.4, 0.6, 0.8, 1.0], 0.025, "obf")
    assert np.round(bounds, 3).tolist() == [4.877, 3.357, 2.680, 2.290, 2.031]
    assert spent[-1] == pytest.approx(0.025, abs=1e-15)


def test_the_spending_functions():
    for function in gs.SPENDING_FUNCTIONS:
        values = [gs.spending(t, 0.025, function) for t in np.linspace(0.0, 1.0, 21)]
        assert values[0] == 0.0 and values[-1] == pytest.approx(0.025, rel=1e-12)
        assert np.all(np.diff(values) > 0.0)
    obrien_fleming = 2 - 2 * stats.norm.cdf(stats.norm.ppf(1 - 0.0125) / 0.5 ** 0.5)
    assert gs.spending(0.5, 0.025, "obf") == pytest.approx(obrien_fleming)
    assert gs.spending(0.5, 0.025, "pocock") == pytest.approx(0.025 * math.log(1 + (math.e - 1) * 0.5))
    with pytest.raises(ParameterError, match="spending: must be one of obf, pocock"):
        gs.spending(0.5, 0.025, "haybittle")
    with pytest.raises(ParameterError, match="fractions: information fractions must increase strictly"):
        gs.efficacy_bounds([0.5, 0.5, 1.0], 0.025)


@pytest.mark.parametrize("alpha, function, fractions", DESIGNS)
def test_under_h0_each_look_spends_its_increment_by_the_multivariate_normal(alpha, function, fractions):
    bounds, spent = gs.efficacy_bounds(fractions, alpha, function)
    increments = np.diff(spent, prepend=0.0)
    ours, _ = gs.crossing_probabilities(fractions, bounds)
    theirs, _ = _crossings_by_mvn(fractions, bounds, np.full(len(fractions), -math.inf), 0.0)
    np.testing.assert_allclose(ours, increments, atol=1e-9)
    np.testing.assert_allclose(theirs, increments, atol=2e-7)


@pytest.mark.slow  # 15 numerical integrations against scipy's: the H0 ones above are the fast check
@pytest.mark.parametrize("alpha, function, fractions", [DESIGNS[i] for i in (0, 1, 2, 4, 6)])
@pytest.mark.parametrize("drift", [3.0, 1.2, -2.0])
def test_under_a_drift_with_futility_the_crossings_match_the_multivariate_normal(alpha, function, fractions, drift):
    """Efficacy above, β-spent futility below (the design drift 3, spending β = 0.1), at the design drift, a
    smaller one and a harmful one: both exits at every look."""
    efficacy, _ = gs.efficacy_bounds(fractions, alpha, function)
    futility, beta_spent = gs.futility_bounds(fractions, efficacy, 3.0, 0.1, function)
    lower = np.array([*futility[:-1], -math.inf])
    above, below = gs.crossing_probabilities(fractions, efficacy, lower, drift)
    mvn_above, mvn_below = _crossings_by_mvn(fractions, efficacy, lower, drift)
    np.testing.assert_allclose(above, mvn_above, atol=5e-7)
    np.testing.assert_allclose(below, mvn_below, atol=5e-7)
    if drift == 3.0:  # the futility boundary spends β by the function at its own drift, where it does not cap
        spent_below = np.diff(beta_spent, prepend=0.0)[:-1]
        capped = futility[:-1] >= efficacy[:-1]
        np.testing.assert_allclose(below[:-1][~capped], spent_below[~capped], atol=1e-9)


# ten designs of 2 to 8 looks, both spending functions, unequal fractions, for the stage-wise p
STAGEWISE_DESIGNS = [
    *DESIGNS,
    (0.0027, "obf", [0.25, 0.5, 0.75, 1.0]),
    (0.001, "pocock", [0.3, 0.35, 0.9, 1.0]),
    (0.025, "pocock", [0.12, 0.3, 0.41, 0.55, 0.7, 0.8, 0.93, 1.0]),
]


def _stagewise_by_mvn(fractions, efficacy, spent, look, z, crossed):
    """Σ_{j<k} α increments + P(Z_j < e_j for j < k, Z_k ≥ z) (+ α after k when not crossed), the middle term by
    scipy's multivariate normal CDF on the canonical covariance."""
    middle = _box(fractions, efficacy, np.full(len(fractions), -math.inf), 0.0, look, z, math.inf)
    before = spent[look - 1] if look else 0.0
    return before + middle + (0.0 if crossed else spent[-1] - spent[look])


@pytest.mark.parametrize("alpha, function, fractions", STAGEWISE_DESIGNS)
def test_the_stagewise_p_matches_the_multivariate_normal(alpha, function, fractions):
    efficacy, spent = gs.efficacy_bounds(fractions, alpha, function)
    last = len(fractions) - 1
    finite = [k for k in range(last + 1) if np.isfinite(efficacy[k])]
    outcomes = [(finite[0], efficacy[finite[0]] + 0.4, True),  # an early crossing
                (last // 2, -0.3, False),  # a stop below the boundary half-way (futility, equivalence, worse)
                (last, efficacy[last] - 0.8, False)]  # the last look, not crossed
    for look, z, crossed in outcomes:
        ours = gs.stagewise_p(fractions, efficacy, look, z, crossed)
        assert ours == pytest.approx(_stagewise_by_mvn(fractions, efficacy, spent, look, z, crossed), abs=1e-5)
    # a crossing's p is at most the α spent by its look, any other end's at least the whole α
    assert gs.stagewise_p(fractions, efficacy, last, efficacy[last], True) == pytest.approx(spent[-1], abs=1e-9)
    assert gs.stagewise_p(fractions, efficacy, 0, efficacy[0] - 1e-9, False) >= spent[-1] - 1e-12


def test_the_median_unbiased_drift_shrinks_an_early_stop_toward_zero():
    fractions = [0.25, 0.5, 0.75, 1.0]
    efficacy, _ = gs.efficacy_bounds(fractions, 0.025, "obf")
    z = efficacy[1] + 0.2
    drift = gs.median_unbiased_drift(fractions, efficacy, 1, z, True)
    naive = z / math.sqrt(fractions[1])  # the drift at which E Z_2 = z
    assert 0.0 < drift < naive
    assert gs.stagewise_probability(fractions, efficacy, 1, z, True, drift) == pytest.approx(0.5, abs=1e-8)
    # a single look: the estimate is the observed z
    assert gs.median_unbiased_drift([1.0], [1.96], 0, 1.3, False) == pytest.approx(1.3, abs=1e-8)


def _simulated_design_p_values(rng, n_paths, fractions, alpha, function, sesoi_drift):
    """Paths of the canonical z's under H0 through the whole design, both directions, non-binding futility at the
    drift of the smallest effect of interest obeyed, and equivalence stops; each path's stage-wise p as
    `analysis.sequential` takes it (an equivalence stop that did not cross ranked at its continuation's foot)."""
    t = np.asarray(fractions)
    efficacy, _ = gs.efficacy_bounds(t, alpha, function)
    beta = gs.futility_beta(t, efficacy, sesoi_drift, 0.2, function)
    futility, _ = gs.futility_bounds(t, efficacy, sesoi_drift, beta, function)
    steps = rng.standard_normal((n_paths, t.size)) * np.sqrt(np.diff(t, prepend=0.0))
    z = np.cumsum(steps, axis=1) / np.sqrt(t)
    band = sesoi_drift * np.sqrt(t) - efficacy  # |Z| < band: the repeated interval lies within ±SESOI
    last = t.size - 1
    p_values = np.ones(n_paths)
    for i in range(n_paths):
        for k in range(t.size):
            value, final = z[i, k], k == last
            better, worse = value >= efficacy[k], value <= -efficacy[k]
            equivalent = abs(value) < band[k]
            no_gain = not final and value <= futility[k]
            if better or worse or equivalent or no_gain or final:
                statistic = value
                if equivalent and not better and not final:
                    statistic = min(value, max(-efficacy[k], futility[k]))
                if better or statistic > 1.6 or final and statistic > 1.6:  # all others have p > 0.05
                    p_values[i] = gs.stagewise_p(t, efficacy, k, statistic, better)
                break
    return p_values


@pytest.mark.slow  # 300,000 simulated designs
@pytest.mark.parametrize("function", ["obf", "pocock"])
def test_under_h0_the_stagewise_p_is_never_anti_conservative(function):
    rng = np.random.default_rng(20261202)
    n_paths = 300_000
    p_values = _simulated_design_p_values(rng, n_paths, [0.2, 0.45, 0.7, 0.85, 1.0], 0.025, function, 2.8)
    for level in (0.0005, 0.0027, 0.01, 0.05):
        share = float(np.mean(p_values <= level))
        assert share <= level + 2.0 * math.sqrt(level * (1.0 - level) / n_paths), (level, share)


def test_power_and_the_drift_for_it():
    fractions = [0.25, 0.5, 0.75, 1.0]
    efficacy, _ = gs.efficacy_bounds(fractions, 0.025, "obf")
    drift = gs.drift_for_power(fractions, efficacy, 0.8)
    assert gs.power(fractions, efficacy, drift) == pytest.approx(0.8, abs=1e-7)
    fixed = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    assert 1.0 < drift / fixed < 1.03  # O'Brien–Fleming's small inflation
    beta = gs.futility_beta(fractions, efficacy, drift, 0.2)
    futility, _ = gs.futility_bounds(fractions, efficacy, drift, beta)
    with_futility = gs.power(fractions, efficacy, drift, [*futility[:-1], -math.inf])
    assert beta < 0.2 and with_futility == pytest.approx(0.8 - gs.MAX_FUTILITY_COST, abs=1e-5)
    assert gs.futility_beta([1.0], efficacy[-1:], drift, 0.2) == 0.0


def test_information_is_capped_by_the_documents():
    assert gs.information(4, 2e-4, 1e-5) == pytest.approx(1 / (5e-5 + 1e-5))
    assert gs.information(10 ** 9, 2e-4, 1e-5) < gs.information_cap(1e-5) == pytest.approx(1e5)
    assert gs.information_cap(0.0) == math.inf and gs.information(2, 2e-4, 0.0) == pytest.approx(1e4)


def test_t_conversion_keeps_the_tail_probability():
    for z, df in [(2.0, 3.0), (4.877, 1.0), (2.5, 40.0), (-0.5, 5.0)]:
        assert stats.t.sf(gs.t_critical(z, df), df) == pytest.approx(stats.norm.sf(z), rel=1e-9)
        assert stats.t.cdf(gs.t_futility(z, df), df) == pytest.approx(stats.norm.cdf(z), rel=1e-9)
    assert gs.t_critical(math.inf, 3.0) == math.inf
    assert gs.t_critical(2.0, 1e9) == pytest.approx(2.0, abs=1e-6)


@pytest.mark.parametrize("estimate, higher, final, expected, direction", [
    (-0.05, False, False, "better", "better"),  # a loss: lower is better
    (0.05, False, False, "worse", "worse"),
    (0.05, True, False, "better", "better"),  # a metric where higher is better
    (0.001, False, False, "equivalent", None),
    (-0.004, False, False, "equivalent", "better"),  # real but smaller than the smallest effect of interest
    (0.012, False, False, "no useful gain", None),  # under the futility boundary (oriented to the benefit)
    (-0.012, False, False, "continue", None),
    (-0.012, False, True, "no detectable difference", None),
])
def test_the_decision_at_a_look(estimate, higher, final, expected, direction):
    se = 0.01 if abs(estimate) >= 0.01 else 0.001
    decided = gs.decide_look(estimate, se, 20.0, efficacy=2.5, futility=-0.5, final=final, higher_is_better=higher,
                             equivalence=(-0.01, 0.01))
    assert (decided.decision, decided.direction) == (expected, direction)
    assert decided.interval.low == pytest.approx(estimate - decided.critical * se)
    assert decided.stop == (expected != "continue")


# --- R's rpact ---


@pytest.fixture(scope="module")
def rscript():
    """Rscript with rpact loaded; skipped (failed under GATEDV_REQUIRE_SYSTEM_TOOLS=1) with the install command."""
    program = require_program("Rscript", RPACT_INSTALL)
    probe = subprocess.run([program, "-e", "suppressMessages(library(rpact))"], capture_output=True, text=True)
    if probe.returncode != 0:
        reason = f"the R package rpact is not installed (install it with: {RPACT_INSTALL})"
        if os.environ.get(REQUIRE_SYSTEM_TOOLS) == "1":
            pytest.fail(f"{reason}; {REQUIRE_SYSTEM_TOOLS}=1 requires it", pytrace=False)
        pytest.skip(reason)
    return program


# (one-sided α, spending, fractions, β or None): rpact's futility bounds come with the drift its design needs
RPACT_FUTILITY = [(0.025, "obf", [0.3, 0.7, 1.0], 0.2), (0.025, "pocock", [0.25, 0.5, 0.75, 1.0], 0.1),
                  (0.05, "obf", [0.2, 0.5, 0.8, 1.0], 0.15)]


def _rpact_designs(rscript):
    calls = []
    for i, (alpha, function, fractions, beta) in enumerate([(*d, None) for d in DESIGNS] + RPACT_FUTILITY):
        kind = {"obf": "OF", "pocock": "P"}[function]
        rates = ", ".join(repr(float(t)) for t in fractions)
        futility = (f", beta = {beta}, typeBetaSpending = 'bs{kind}', bindingFutility = FALSE" if beta else "")
        calls.append(f"d <- getDesignGroupSequential(kMax = {len(fractions)}, alpha = {alpha}, sided = 1, "
                     f"typeOfDesign = 'as{kind}', informationRates = c({rates}){futility}); "
                     f"cat('{i} crit', sprintf('%.10f', d$criticalValues), '\\n'); ")
        if beta:
            calls.append(f"cat('{i} futility', sprintf('%.10f', d$futilityBounds), '\\n'); "
                         f"cat('{i} shift', sprintf('%.10f', getDesignCharacteristics(d)$shift), '\\n'); ")
    script = "suppressMessages(library(rpact)); " + "".join(calls)
    output = subprocess.run([rscript, "-e", script], capture_output=True, text=True, check=True).stdout
    values: dict = {}
    for line in output.splitlines():
        index, name, *numbers = line.split()
        values.setdefault(int(index), {})[name] = np.array([float(v) for v in numbers])
    return values


@pytest.mark.slow  # starts R
def test_the_boundaries_agree_with_rpact(rscript):
    """rpact::getDesignGroupSequential(sided = 1, typeOfDesign = "asOF" / "asP", informationRates = …): its
    criticalValues against ours to 1e-3; with β-spending (typeBetaSpending "bsOF" / "bsP", non-binding) its
    futilityBounds against ours at the drift √shift of its design, where the two boundaries meet at the end."""
    rpact = _rpact_designs(rscript)
    designs = [(*d, None) for d in DESIGNS] + RPACT_FUTILITY
    assert len(rpact) == len(designs)
    for i, (alpha, function, fractions, beta) in enumerate(designs):
        efficacy, _ = gs.efficacy_bounds(fractions, alpha, function)
        np.testing.assert_allclose(efficacy, rpact[i]["crit"], atol=1e-3, err_msg=f"design {i}")
        if beta:
            futility, _ = gs.futility_bounds(fractions, efficacy, math.sqrt(rpact[i]["shift"][0]), beta, function)
            np.testing.assert_allclose(futility[:-1], rpact[i]["futility"], atol=1e-3, err_msg=f"design {i}")
            assert futility[-1] == pytest.approx(efficacy[-1], abs=1e-3)
