"""Calibration of the seed-and-document interval on simulated studies with a known truth.

Per-token differences y_si = δ + a_s + b_i + u_c(i) + e_si (gatedv_stats.testing), unequal document
lengths (32–1,023 targets), domains of geometric size (mean 5) when clustered. 1,500 studies per cell, so
±0.02 around 0.95 is 3.6 Monte Carlo standard errors. bench/seed_document_calibration.py prints the full table
with more studies, the bootstraps beside it and the power at ΔP = −2%.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from gatedv_stats.stats import metrics
from gatedv_stats.stats.resampling import document_bootstrap
from gatedv_stats.stats.seed_document import seed_document_interval
from gatedv_stats.stats.seed_level import two_level_bootstrap
from gatedv_stats.stats.verdict import verdict
from gatedv_stats.testing import CrossedModel, domain_labels, loss_sums, simulate_differences, simulated_fits

STUDIES = 1500
SCENARIOS = {  # per-token SDs: seed, document, interaction, domain
    "seed-dominant": CrossedModel(-0.02, seed_sd=0.01, doc_sd=0.005, interaction_sd=0.03, cluster_sd=0.005),
    "document-dominant": CrossedModel(-0.02, seed_sd=0.0005, doc_sd=0.05, interaction_sd=0.02, cluster_sd=0.03),
    "interaction-dominant": CrossedModel(-0.02, seed_sd=0.002, doc_sd=0.02, interaction_sd=0.3, cluster_sd=0.01),
    # seeds hold most but not all of Var(D): where plain Satterthwaite df over-states the df with 3 seeds
    "mixed": CrossedModel(-0.02, seed_sd=0.005, doc_sd=0.03, interaction_sd=0.05, cluster_sd=0.02),
}
SEED_ONLY = CrossedModel(0.0, seed_sd=0.01, doc_sd=0.0, interaction_sd=0.03)  # both arms: one population of models


def design(n_docs: int, clustered: bool, rng: np.random.Generator):
    n_targets = rng.integers(32, 1024, n_docs)
    return n_targets, domain_labels(n_docs, rng) if clustered else None


def interval_covers(fit, truth: float, confidence_level: float = 0.95) -> np.ndarray:
    half_width = stats.t.ppf(0.5 + confidence_level / 2, fit.df) * np.sqrt(fit.var_d)
    return np.abs(fit.estimate - truth) <= half_width


@pytest.mark.parametrize("clustered", [False, True], ids=["documents", "domains"])
@pytest.mark.parametrize("name", list(SCENARIOS))
@pytest.mark.slow
def test_coverage_of_the_95_percent_interval(name, clustered):
    """Within [0.93, 0.97] in every cell (docs/verdicts.md has the longer table)."""
    model = SCENARIOS[name]
    coverages = {}
    for n_seeds in (3, 5, 10):
        for n_docs in (200, 2048):
            rng = np.random.default_rng([list(SCENARIOS).index(name), n_seeds, n_docs, clustered])
            n_targets, labels = design(n_docs, clustered, rng)
            fit = simulated_fits(model, n_seeds, n_targets, rng, n_studies=STUDIES, clusters=labels)
            coverages[n_seeds, n_docs] = float(interval_covers(fit, model.delta).mean())
    print(name, "clustered" if clustered else "", coverages)
    for (n_seeds, n_docs), coverage in coverages.items():
        assert 0.93 <= coverage <= 0.97, (n_seeds, n_docs, coverage)


@pytest.mark.slow
def test_false_positive_rate_under_seed_only_differences():
    """δ = 0 and b_i = 0: the arms differ only by training seed. The verdict claims a difference at most 6%
    of the time (α = 0.05; 5,000 studies per cell, so 0.06 is 3.2 Monte Carlo SEs above 0.05); the verdict
    function agrees with the interval on every study it is run on."""
    rates = {}
    for n_seeds in (3, 5, 10):
        for n_docs in (200, 2048):
            rng = np.random.default_rng([7, n_seeds, n_docs])
            n_targets, _ = design(n_docs, False, rng)
            fit = simulated_fits(SEED_ONLY, n_seeds, n_targets, rng, n_studies=5000)
            rates[n_seeds, n_docs] = 1.0 - float(interval_covers(fit, 0.0).mean())
    print("false-positive rate of the verdict:", rates)
    assert max(rates.values()) <= 0.06, rates
    rng = np.random.default_rng(8)
    n_targets, _ = design(200, False, rng)
    y = simulate_differences(SEED_ONLY, 3, n_targets, rng, n_studies=100)
    baseline, variant = loss_sums(y, n_targets, rng)
    for b in range(100):
        result = seed_document_interval(baseline[b], variant[b], n_targets)
        low, high = result.confidence_interval
        claims = verdict(result).verdict != "no detectable difference"
        assert claims == (high < 0 or low > 0)


@pytest.mark.slow
def test_the_bootstraps_reject_far_too_often_under_seed_only_differences():
    """Same population of models for both arms, 3 seeds, 200 documents, 200 studies: the document bootstrap
    (models fixed) and the two-level bootstrap exclude 0 far more often than 5%; ours does not."""
    rng = np.random.default_rng(9)
    n_targets, _ = design(200, False, rng)
    y = simulate_differences(SEED_ONLY, 3, n_targets, rng, n_studies=200)
    baseline, variant = loss_sums(y, n_targets, rng)
    rejected = {"document bootstrap": 0, "two-level bootstrap": 0, "seed-and-document": 0}
    for b in range(200):
        d = metrics.document_differences(baseline[b], variant[b])
        low, high = document_bootstrap(d, n_targets, n_resamples=200, rng_seed=b).confidence_interval
        rejected["document bootstrap"] += high < 0 or low > 0
        low, high = two_level_bootstrap(baseline[b], variant[b], n_targets, n_resamples=200,
                                        rng_seed=b).confidence_interval
        rejected["two-level bootstrap"] += high < 0 or low > 0
        low, high = seed_document_interval(baseline[b], variant[b], n_targets).confidence_interval
        rejected["seed-and-document"] += high < 0 or low > 0
    rates = {name: count / 200 for name, count in rejected.items()}
    print("false-positive rates under seed-only differences (S = 3, N = 200):", rates)
    assert rates["document bootstrap"] > 0.5
    assert rates["two-level bootstrap"] > 0.15
    assert rates["seed-and-document"] < 0.1
