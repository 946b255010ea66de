"""Planning the verdict's test: the planned power against simulated studies, minimal seed counts, the pilot's
upper bound; and `gatedv plan` with 3 seeds at α = 0.01 (where statsmodels' solver stopped short)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from gatedv_stats.stats.planning import Design, seed_document_plan
from gatedv_stats.stats.seed_document import seed_document_interval

SEED_SD, DOC_SD, INTERACTION_SD = 0.008, 0.03, 0.05


def simulated_rejections(delta: float, n_seeds: int, n_docs: int, studies: int, rng) -> float:
    n = np.full(n_docs, 256.0)
    rejected = 0
    for _ in range(studies):
        y = (delta + rng.normal(0, SEED_SD, (n_seeds, 1)) + rng.normal(0, DOC_SD, n_docs)
             + rng.normal(0, INTERACTION_SD, (n_seeds, n_docs)))
        baseline = np.full((n_seeds, n_docs), 3.0) * n
        rejected += seed_document_interval(baseline, baseline + y * n, n).p_value <= 0.05
    return rejected / studies


@pytest.mark.parametrize(("n_seeds", "delta"), [(3, 0.02), (5, 0.012)])
def test_planned_power_matches_simulated_studies(n_seeds, delta):
    n_docs, studies = 200, 600
    design = Design(SEED_SD ** 2, DOC_SD ** 2, INTERACTION_SD ** 2, 1.0 / n_docs, n_docs)
    planned = design.power(delta, n_seeds, 0.05)
    observed = simulated_rejections(delta, n_seeds, n_docs, studies, np.random.default_rng(n_seeds))
    assert 0.2 < planned < 0.95
    assert observed == pytest.approx(planned, abs=4 * math.sqrt(planned * (1 - planned) / studies) + 0.03)


def test_seeds_required_is_the_smallest_count_with_the_power():
    design = Design(SEED_SD ** 2, DOC_SD ** 2, INTERACTION_SD ** 2, 1.0 / 500, 500)
    needed = design.seeds_required(0.01, 0.05, 0.8)
    assert design.power(0.01, needed, 0.05) >= 0.8 > design.power(0.01, needed - 1, 0.05)
    assert design.seeds_required(0.01, 0.05, 0.8, n_docs=5000) <= needed
    variance, df = design.variance(needed)
    expected = SEED_SD ** 2 / needed + DOC_SD ** 2 / 500 + INTERACTION_SD ** 2 / (500 * needed)
    assert variance == pytest.approx(expected) and 1 <= df


def test_the_pilot_plan_states_an_upper_bound_on_the_seed_mean_square():
    rng = np.random.default_rng(5)
    n, n_seeds = np.full(300, 256.0), 3
    y = -0.02 + rng.normal(0, 0.01, (n_seeds, 1)) + rng.normal(0, 0.03, 300) + rng.normal(0, 0.05, (n_seeds, 300))
    baseline = np.full((n_seeds, 300), 3.0) * n
    fit = seed_document_interval(baseline, baseline + y * n, n)
    plan = seed_document_plan(fit, 1 / 300, abs(math.log(0.98)), alpha=0.01, power=0.9)
    assert plan.seed_mean_square_upper == pytest.approx(2 * fit.v_seed / stats.chi2.ppf(0.1, 2))
    assert plan.seeds_required_upper >= plan.seeds_required
    design = Design(fit.seed_var, fit.doc_var, fit.interaction_var, 1 / 300, 300)
    assert design.power(math.log1p(plan.mde), n_seeds, 0.01) == pytest.approx(0.9, abs=1e-6)
