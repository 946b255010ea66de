"""The online procedures behind the research ledger (`stats/online_fdr.py`, over the `online-fdr` package) against
R onlineFDR's published outputs, their wealth, and the one-sided p-value they test.

The expected levels (`alphai`) and decisions (`R`) are the printed outputs of the Examples sections of R onlineFDR's
reference documentation (package by D. S. Robertson et al., Bioconductor; repository dsrobertson/onlineFDR):

* ADDIS: docs/reference/ADDIS.md (commit 17574c34), `ADDIS(sample.df1, random=FALSE)`, the defaults
  (α = 0.05, w0 = α/2, λ = 0.25, τ = 0.5, γ_j ∝ j^−1.6);
* SAFFRON: docs/reference/SAFFRON.md (commit 17574c34), `SAFFRON(sample.df, random=FALSE)` (defaults α = 0.05,
  w0 = α/2, λ = 0.5) and `set.seed(1); SAFFRON(sample.df, alpha=0.1, w0=0.025)`;
* LORD++: docs/reference/LORD.html (onlineFDR 1.5.0's pkgdown, commit 05e3b887), `LORD(sample.df, random=FALSE)`
  (version "++", w0 = α/10) and `set.seed(1); LORD(sample.df, alpha=0.1, w0=0.05)`;
* alpha-spending: docs/reference/Alpha_spending.md (commit 1d89c48f), `Alpha_spending(sample.df, random=FALSE)` and
  `set.seed(1); Alpha_spending(sample.df, alpha=0.1)`;
* LOND: docs/reference/LOND.md (commit 1d89c48f), `LOND(sample.df, random=FALSE)` (the original form, (D + 1)·β_i;
  the ledger's LOND is the max(D, 1)·β_i form, whose levels follow from R's by the factor max(D, 1) / (D + 1)).

The `set.seed(1)` examples shuffle the p-values within each date; they are given here in the order R printed (and
tested) them. R prints 7 to 10 significant digits, hence the relative tolerance.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from gatedv_stats.core.errors import ParameterError
from gatedv_stats.stats.online_fdr import PROCEDURES, OnlineProcedure, next_level, online_decisions, online_procedure
from gatedv_stats.stats.verdict import one_sided_p

# sample.df's p-values, in the order of the id column (A15432 … B66033), as the ADDIS, SAFFRON and LORD examples give
P_VALUES = [2.90e-08, 0.06743, 0.01514, 0.08174, 0.00171, 3.60e-05, 0.79149, 0.27201, 0.28295, 7.59e-08, 0.69274,
            0.30443, 0.00136, 0.72342, 0.54757]
# the order `set.seed(1)` gave within dates (rows of the printed outputs)
SEED1_ORDER = [0, 1, 2, 3, 4, 7, 5, 6, 9, 8, 10, 13, 11, 14, 12]
SPENDING_P_VALUES = [2.90e-17, *P_VALUES[1:]]  # the Alpha_spending example's first p-value
# LOND(sample.df, random=FALSE): R's levels and discoveries (original LOND)
LOND_LEVELS = [0.0026758385, 0.0011638206, 0.0009912499, 0.0008243606, 0.0006988870, 0.0006045900, 0.0007979166,
               0.0007117838, 0.0006421423, 0.0005847378, 0.0007155186, 0.0006610273, 0.0006141682, 0.0005734509,
               0.0005377472]
LOND_REJECTIONS = [1, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0]

REFERENCE = {
    "addis": (None, P_VALUES, [
        0.002734314, 0.005468627, 0.005468627, 0.005468627, 0.005468627, 0.010937254, 0.016405881, 0.016405881,
        0.005411923, 0.002828822, 0.008297449, 0.008297449, 0.003589243, 0.009057870, 0.009057870],
        [1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 1, 0, 0]),
    "saffron": (None, P_VALUES, [
        0.005468627, 0.010937254, 0.010937254, 0.010937254, 0.010937254, 0.021874508, 0.032811762, 0.010823845,
        0.010823845, 0.010823845, 0.021761099, 0.009265591, 0.009265591, 0.020202846, 0.009064367],
        [1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 1, 0, 0]),
    "saffron-alpha-0.1": ((0.1, 0.025), [P_VALUES[k] for k in SEED1_ORDER], [
        0.005468627, 0.021874508, 0.021874508, 0.043749017, 0.043749017, 0.065623525, 0.065623525, 0.087498033,
        0.028863587, 0.050738095, 0.050738095, 0.022302945, 0.013293195, 0.013293195, 0.009042997],
        [1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 0, 0, 0, 0, 1]),
    "lord++": (None, P_VALUES, [
        0.0002675839, 0.0024664457, 0.0005732818, 0.0004872805, 0.0004059066, 0.0003447286, 0.0029745013,
        0.0008450114, 0.0007305648, 0.0006243143, 0.0032185913, 0.0010617227, 0.0009256825, 0.0008019657,
        0.0007059610],
        [1, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0]),
    "lord++-alpha-0.1": ((0.1, 0.05), [P_VALUES[k] for k in SEED1_ORDER], [
        0.0026758385, 0.0032577488, 0.0010775352, 0.0009078052, 0.0007616238, 0.0006517385, 0.0005682672,
        0.0058549106, 0.0016151293, 0.0067518870, 0.0023619734, 0.0020342733, 0.0017477495, 0.0015277362,
        0.0013569121],
        [1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0]),
    "alpha-spending": (None, SPENDING_P_VALUES, [
        0.0026758385, 0.0005819103, 0.0004956249, 0.0004121803, 0.0003494435, 0.0003022950, 0.0002659722,
        0.0002372613, 0.0002140474, 0.0001949126, 0.0001788796, 0.0001652568, 0.0001535420, 0.0001433627,
        0.0001344368],
        [1, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0]),
    "alpha-spending-alpha-0.1": ((0.1, None), [SPENDING_P_VALUES[k] for k in SEED1_ORDER], [
        0.0053516771, 0.0011638206, 0.0009912499, 0.0008243606, 0.0006988870, 0.0006045900, 0.0005319444,
        0.0004745225, 0.0004280949, 0.0003898252, 0.0003577593, 0.0003305137, 0.0003070841, 0.0002867254,
        0.0002688736],
        [1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0]),
}


def _gamma(j: int) -> float:
    """Javanmard & Montanari's (2018) equation 31, written out."""
    return 0.07720838 * math.log(max(j, 2)) / (j * math.exp(math.sqrt(math.log(j))))


def _procedure(case: str) -> OnlineProcedure:
    name = case.split("-alpha-")[0]
    settings = REFERENCE[case][0]
    if settings is None:
        return online_procedure(name)
    alpha, w0 = settings
    chosen = online_procedure(name, alpha)
    return chosen if w0 is None else replace(chosen, w0=w0)


@pytest.mark.parametrize("case", sorted(REFERENCE))
def test_levels_and_decisions_are_r_onlinefdrs(case):
    _, p_values, levels, rejections = REFERENCE[case]
    decisions = online_decisions(p_values, _procedure(case))
    for step, (decision, level, rejected) in enumerate(zip(decisions, levels, rejections), start=1):
        assert math.isclose(decision.level, level, rel_tol=2e-6), (case, step, decision.level, level)
        assert decision.keep == bool(rejected), (case, step)


def test_the_defaults_are_r_onlinefdrs():
    assert online_procedure("addis").to_dict() == {"procedure": "addis", "alpha": 0.05, "w0": 0.025, "lambda_": 0.25,
                                                   "tau": 0.5, "gamma": "γ_j = 0.4374901658 / j^1.6"}
    assert (online_procedure("saffron").w0, online_procedure("saffron").lambda_) == (0.025, 0.5)
    assert online_procedure("lord++").w0 == pytest.approx(0.005)
    assert online_procedure("alpha-spending").error_rate == "FWER" and online_procedure().procedure == "lond"
    chosen = online_procedure("saffron", 0.1)
    assert OnlineProcedure.from_dict(chosen.to_dict()) == chosen


@pytest.mark.parametrize("name", PROCEDURES)
def test_the_wealth_never_runs_out_and_follows_the_keeps(name):
    rng = np.random.default_rng(5)
    chosen = online_procedure(name)
    for _ in range(40):
        effects = rng.choice([3.0, 0.0, -3.0], size=150, p=[0.2, 0.4, 0.4])
        p_values = stats.norm.sf(effects + rng.normal(size=150))
        values = 1.0 / p_values if chosen.e_values else p_values
        decisions = online_decisions(values, chosen)
        wealth = np.array([decision.wealth for decision in decisions])
        assert wealth.min() >= -1e-12
        assert all(decision.keep == chosen.keeps(value, decision.level) for decision, value in zip(decisions, values))
        if name in ("lond", "e-lond", "alpha-spending"):  # what the γ sequence has not spent yet
            assert wealth[-1] == pytest.approx(chosen.alpha * (1.0 - sum(_gamma(j) for j in range(1, 151))))
            continue
        spent = sum(chosen.cost(d.level, p) for d, p in zip(decisions, p_values))
        kept = sum(d.keep for d in decisions)
        assert wealth[-1] == pytest.approx(chosen.w0 + chosen.alpha * kept - chosen.w0 * (kept > 0) - spent)


def test_alpha_spending_keeps_going_past_any_horizon():
    decisions = online_decisions([0.5] * 3000, online_procedure("alpha-spending"))
    assert decisions[-1].wealth > 0 and decisions[-1].level < decisions[0].level


def test_bad_procedures_levels_and_p_values_are_refused_by_name():
    with pytest.raises(ParameterError, match="procedure: 'bonferroni': expected one of lond, e-lond, addis"):
        online_procedure("bonferroni")
    with pytest.raises(ParameterError, match="alpha: must lie strictly between 0 and 1"):
        online_procedure("addis", 1.5)
    with pytest.raises(ParameterError, match="p_values"):
        online_decisions([0.1, math.nan], online_procedure())


@pytest.mark.parametrize(("estimate", "se", "df", "higher"), [
    (-0.01, 0.004, 2.0, False), (0.01, 0.004, 2.0, False), (0.02, 0.01, 7.3, True), (-0.02, 0.01, 7.3, True),
    (-0.3, 0.01, 1.0, False), (0.0, 0.5, 40.0, True), (0.002, 0.001, math.inf, True)])
def test_the_one_sided_p_is_the_t_tail_that_favours_the_variant(estimate, se, df, higher):
    t = estimate / se
    expected = stats.t.sf(t, df) if higher else stats.t.cdf(t, df)
    assert one_sided_p(estimate, se, df, higher) == pytest.approx(expected, rel=1e-12, abs=1e-300)
    two_sided = 2.0 * stats.t.sf(abs(t), df)
    favoured = (estimate > 0) == higher and estimate != 0
    assert one_sided_p(estimate, se, df, higher) == pytest.approx(two_sided / 2 if favoured else 1 - two_sided / 2)


def test_lond_is_r_onlinefdrs_published_example_in_its_prds_form():
    # LOND(sample.df, random=FALSE) uses the sample's p-values in id order, as the ADDIS example does
    discoveries = np.concatenate(([0], np.cumsum(LOND_REJECTIONS)[:-1]))
    expected = [level * max(d, 1) / (d + 1) for level, d in zip(LOND_LEVELS, discoveries)]
    decisions = online_decisions(P_VALUES, online_procedure("lond"))
    assert [decision.level for decision in decisions] == pytest.approx(expected, rel=2e-6)
    assert [int(decision.keep) for decision in decisions] == LOND_REJECTIONS
    # the package's original form is R's exactly: the γ sequence and the discoveries are R's
    original = online_procedure("lond").method()
    original.original = True
    levels = []
    for p_value in P_VALUES:
        original.test_one(p_value)
        levels.append(original.last_test_level)
    assert levels == pytest.approx(LOND_LEVELS, rel=2e-6)


def test_e_lond_follows_its_definition():
    """Xu & Ramdas (2024): α_t = α·γ_t·(|R_{t−1}| + 1), e_t rejected when e_t ≥ 1/α_t."""
    rng = np.random.default_rng(11)
    e_values = np.exp(rng.normal(0.0, 1.0, size=300) + rng.choice([0.0, 9.0], size=300, p=[0.7, 0.3]))
    decisions = online_decisions(e_values, online_procedure("e-lond", 0.1))
    rejections = 0
    for t, (decision, e_value) in enumerate(zip(decisions, e_values), start=1):
        level = 0.1 * _gamma(t) * (rejections + 1)
        assert decision.level == pytest.approx(level, rel=1e-12)
        assert decision.keep == (e_value >= 1.0 / level)
        rejections += decision.keep
    assert 0 < rejections < 300
    with pytest.raises(ParameterError, match="e-value must be non-negative"):
        online_decisions([2.0, -1.0], online_procedure("e-lond"))


def _schedule(rng: np.random.Generator, n: int) -> list[set[int]]:
    """Random overlapping tests: for each, the earlier tests still running when it started."""
    running: set[int] = set()
    out: list[set[int]] = []
    for t in range(n):
        for u in sorted(running):
            if rng.random() < 0.5:
                running.discard(u)
        out.append(set(running))
        running.add(t)
    return out


@pytest.mark.parametrize("name", PROCEDURES)
def test_tests_that_never_overlap_get_the_synchronous_levels(name):
    rng = np.random.default_rng(2)
    chosen = online_procedure(name)
    values = stats.norm.sf(rng.choice([3.5, 0.0], size=60) + rng.normal(size=60))
    values = 1.0 / values if chosen.e_values else values
    assert online_decisions(values, chosen, [set() for _ in values]) == online_decisions(values, chosen)


@pytest.mark.parametrize("name", PROCEDURES)
def test_asynchronous_levels_use_only_what_each_start_knew_and_keep_the_fdp_estimate_under_alpha(name):
    rng = np.random.default_rng(7)
    chosen = online_procedure(name)
    for _ in range(3):
        p_values = stats.norm.sf(rng.choice([4.0, 0.0, -2.0], size=30, p=[0.3, 0.4, 0.3]) + rng.normal(size=30))
        values = 1.0 / p_values if chosen.e_values else p_values
        running = _schedule(rng, 30)
        decisions = online_decisions(values, chosen, running)
        for t, earlier in enumerate(running):
            # the same level whatever the tests running at its start turn out to be, and whatever comes after it
            hidden = [None if u in earlier else value for u, value in enumerate(values[:t])]
            assert next_level(hidden, chosen, running[:t]) == pytest.approx(decisions[t].level, rel=1e-12, abs=0)
            assert decisions[t].keep == chosen.keeps(values[t], decisions[t].level)
            known = [u for u in range(t) if u not in earlier]
            kept = sum(bool(decisions[u].keep) for u in known)
            if name in ("lond", "e-lond", "alpha-spending"):
                factor = {"lond": max(kept, 1), "e-lond": kept + 1, "alpha-spending": 1}[name]
                assert decisions[t].level == pytest.approx(chosen.alpha * _gamma(t + 1) * factor, rel=1e-12)
            else:  # the procedure's estimate of the false discovery proportion, running tests at their costliest
                costs = [chosen.cost(decisions[u].level, p_values[u] if u in known else chosen.running_value)
                         for u in range(t + 1)]
                if name == "lord++":
                    bound = chosen.w0 + (chosen.alpha - chosen.w0) * (kept > 0) + chosen.alpha * max(kept - 1, 0)
                else:
                    bound = chosen.alpha * max(kept, 1)
                assert sum(costs) <= bound + 1e-12


def test_a_test_still_running_counts_as_its_costliest_non_keep():
    chosen = online_procedure("saffron")
    finished = online_decisions([0.9, 0.001, None], chosen)
    assert finished[2].keep is None
    assert next_level([None, 0.001], chosen, [set(), {0}]) <= next_level([0.9, 0.001], chosen)
    lond = online_procedure("lond")
    assert next_level([1e-9, None], lond) == next_level([1e-9, 0.9], lond) < next_level([1e-9, 1e-9], lond)
