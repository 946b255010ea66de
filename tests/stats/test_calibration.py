"""Calibration on simulated loss files with a known population effect (gatedv_stats.testing.PopulationModel).

Per-token losses: x_b = 3 + b_i + g_s, x_v = x_b + δ + e_s + h_i + ε_si, all normal: document difficulty
b_i ~ N(0, 0.3²), a shared seed offset g_s ~ N(0, 0.01²), and the stated SDs of the seed effect e_s, the
document effect h_i and the residual ε_si; 256 targets per document. Each check runs a few hundred
replications and accepts the observed count when it lies in the central 99.9% binomial region of the rate
it should have. `bench/calibration.py` repeats these with many more replications.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from gatedv_stats.stats import metrics
from gatedv_stats.stats.permutation import sign_flip_test
from gatedv_stats.stats.planning import required_pairs
from gatedv_stats.stats.seed_level import paired_t_interval, percentile_seed_coverage, two_level_bootstrap
from gatedv_stats.testing import PopulationModel, simulate

REPLICATIONS = 400


def accepts(count: int, replications: int, rate: float) -> bool:
    low, high = stats.binom.interval(0.999, replications, rate)
    return low <= count <= high


def log_ratios(study):
    return metrics.token_nll(study.variant, study.n_targets) - metrics.token_nll(study.baseline, study.n_targets)


def coverage_count(model, n_seeds, rng, interval_of, truth_of) -> int:
    """How many of REPLICATIONS simulated studies (n_seeds × 40 documents) have an interval covering the truth."""
    covered = 0
    for replication in range(REPLICATIONS):
        study = simulate(model, n_seeds, 40, rng)
        interval = interval_of(study, replication)
        covered += interval.confidence_interval.low <= truth_of(study) <= interval.confidence_interval.high
    return covered


def two_level_interval(study, replication):
    return two_level_bootstrap(study.baseline, study.variant, study.n_targets, n_resamples=300, rng_seed=replication)


def test_t_interval_covers_the_evaluation_set_effect_at_95_percent_with_three_seeds():
    """r_s − (δ + mean h) = e_s + mean_i ε_si is normal and independent over seeds: t is exact here."""
    model = PopulationModel(log_ratio=-0.02, seed_sd=0.01, doc_sd=0.02, residual_sd=0.05)
    covered = coverage_count(model, 3, np.random.default_rng(100),
                             lambda study, _: paired_t_interval(log_ratios(study)),
                             lambda study: study.eval_set_log_ratio)
    assert accepts(covered, REPLICATIONS, 0.95), covered


@pytest.mark.slow
def test_two_level_interval_covers_the_population_delta_p_when_documents_dominate():
    model = PopulationModel(log_ratio=-0.02, seed_sd=0.002, doc_sd=0.05, residual_sd=0.02)
    covered = coverage_count(model, 5, np.random.default_rng(200), two_level_interval, lambda _: model.delta_p)
    assert accepts(covered, REPLICATIONS, 0.95), covered


@pytest.mark.slow
def test_two_level_interval_undercovers_with_five_seeds_as_its_note_states():
    """When seed variation dominates, five seeds give about 85% coverage — the limit `few_seed_limits` states."""
    model = PopulationModel(log_ratio=-0.02, seed_sd=0.02, doc_sd=0.001, residual_sd=0.01)
    covered = coverage_count(model, 5, np.random.default_rng(300), two_level_interval, lambda _: model.delta_p)
    stated = percentile_seed_coverage(5)
    assert 0.84 < stated < 0.85
    assert accepts(covered, REPLICATIONS, stated), covered
    assert not accepts(covered, REPLICATIONS, 0.95), covered


def test_sign_flip_false_positive_rate_is_five_percent_exact_and_monte_carlo():
    """No effect on any document (δ = 0, σ_seed = 0): d_i is symmetric about zero, the test's null."""
    model = PopulationModel(log_ratio=0.0, seed_sd=0.0, doc_sd=0.03, residual_sd=0.02)
    rng = np.random.default_rng(400)
    replications = 400
    rejections = {"exact": 0, "monte-carlo": 0}
    for replication in range(replications):
        for method, n_docs in (("exact", 12), ("monte-carlo", 40)):
            study = simulate(model, 3, n_docs, rng)
            d = metrics.document_differences(study.baseline, study.variant)
            result = sign_flip_test(d, study.n_targets, n_permutations=199, rng_seed=replication)
            assert result.method == method
            rejections[method] += result.p_value <= 0.05
    for method, count in rejections.items():
        assert accepts(count, replications, 0.05), (method, count)


def test_planned_number_of_seeds_reaches_the_planned_power():
    """Simulated studies with the planned number of seeds detect the effect about 80% of the time."""
    model = PopulationModel(log_ratio=-0.02, seed_sd=0.015, doc_sd=0.0, residual_sd=0.05)
    n_docs = 30
    sd = np.sqrt(model.seed_sd ** 2 + model.residual_sd ** 2 / n_docs)
    n_seeds = required_pairs(0.02 / sd)
    critical = stats.t.ppf(0.975, n_seeds - 1)
    exact_power = (stats.nct.sf(critical, n_seeds - 1, 0.02 / sd * np.sqrt(n_seeds))
                   + stats.nct.cdf(-critical, n_seeds - 1, 0.02 / sd * np.sqrt(n_seeds)))
    assert exact_power >= 0.8
    rng = np.random.default_rng(500)
    detected = sum(paired_t_interval(log_ratios(simulate(model, n_seeds, n_docs, rng))).p_value <= 0.05
                   for _ in range(REPLICATIONS))
    assert accepts(detected, REPLICATIONS, exact_power), (n_seeds, detected, exact_power)
