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
  `set.seed(1); Alpha_spending(sample.df, alpha=0.1)`.

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
from gatedv_stats.stats.online_fdr import PROCEDURES, OnlineProcedure, online_decisions, online_procedure
from gatedv_stats.stats.verdict import one_sided_p

# sample.df's p-values, in the order of the id column (A15432 … B66033), as the ADDIS, SAFFRON and LORD examples give
P_VALUES = [2.90e-08, 0.06743, 0.01514, 0.08174, 0.00171, 3.60e-05, 0.79149, 0.27201, 0.28295, 7.59e-08, 0.69274,
            0.30443, 0.00136, 0.72342, 0.54757]
# the order `set.seed(1)` gave within dates (rows of the printed outputs)
SEED1_ORDER = [0, 1, 2, 3, 4, 7, 5, 6, 9, 8, 10, 13, 11, 14, 12]
SPENDING_P_VALUES = [2.90e-17, *P_VALUES[1:]]  # the Alpha_spending example's first p-value

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
    assert online_procedure("alpha-spending").error_rate == "FWER" and online_procedure().procedure == "addis"
    chosen = online_procedure("saffron", 0.1)
    assert OnlineProcedure.from_dict(chosen.to_dict()) == chosen


@pytest.mark.parametrize("name", PROCEDURES)
def test_the_wealth_never_runs_out_and_follows_the_keeps(name):
    rng = np.random.default_rng(5)
    chosen = online_procedure(name)
    for _ in range(40):
        effects = rng.choice([3.0, 0.0, -3.0], size=150, p=[0.2, 0.4, 0.4])
        p_values = stats.norm.sf(effects + rng.normal(size=150))
        decisions = online_decisions(p_values, chosen)
        wealth = np.array([decision.wealth for decision in decisions])
        assert wealth.min() >= -1e-12
        spent = sum(chosen.cost(d.level, p) for d, p in zip(decisions, p_values))
        kept = sum(d.keep for d in decisions)
        earned = 0.0 if name == "alpha-spending" else (chosen.alpha * kept - chosen.w0 * (kept > 0))
        assert wealth[-1] == pytest.approx(chosen.w0 + earned - spent)
        assert all(decision.keep == (p <= decision.level) for decision, p in zip(decisions, p_values))


def test_alpha_spending_keeps_going_past_any_horizon():
    decisions = online_decisions([0.5] * 3000, online_procedure("alpha-spending"))
    assert decisions[-1].wealth > 0 and decisions[-1].level < decisions[0].level


def test_bad_procedures_levels_and_p_values_are_refused_by_name():
    with pytest.raises(ParameterError, match="procedure: 'bonferroni': expected one of addis, lord\\+\\+"):
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
