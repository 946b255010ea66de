"""The document bootstrap against `scipy.stats.bootstrap(paired=True)` (the loop over its own draws and its
equivalence to scipy's within Monte Carlo error: tests/stats/test_bootstrap_speed_equivalence.py)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from scipy import stats

from gatedv_stats.core.errors import ParameterError
from gatedv_stats.stats.resampling import (
    document_bootstrap,
    interval_from_distribution,
    ratio_statistic,
)
from helpers import ratio


@pytest.mark.parametrize(("method", "scipy_method"), [("percentile", "percentile"), ("bca", "BCa")])
def test_interval_rule_equals_scipy_on_scipys_own_distribution(sample, method, scipy_method):
    d, n_targets = sample
    reference = stats.bootstrap((d, n_targets), ratio, paired=True, vectorized=True, n_resamples=999,
                                confidence_level=0.9, method=scipy_method, rng=np.random.default_rng(2))
    ours = interval_from_distribution(d, n_targets, reference.bootstrap_distribution, confidence_level=0.9,
                                      method=method)
    assert ours == pytest.approx(tuple(reference.confidence_interval), rel=1e-10)


@pytest.mark.parametrize(("method", "scipy_method"), [("percentile", "percentile"), ("bca", "BCa")])
def test_endpoints_agree_with_scipy_within_monte_carlo_error(sample, method, scipy_method):
    d, n_targets = sample
    ours = document_bootstrap(d, n_targets, n_resamples=4000, rng_seed=1, method=method)
    reference = stats.bootstrap((d, n_targets), ratio, paired=True, vectorized=True, n_resamples=4000,
                                method=scipy_method, rng=np.random.default_rng(99))
    se = reference.standard_error
    assert ours.statistic == pytest.approx(ratio_statistic(d, n_targets), rel=1e-12)
    assert ours.standard_error == pytest.approx(se, rel=0.1)
    # a 2.5% quantile of 4,000 draws has a Monte-Carlo SD of about 0.06 SE; allow 0.25 SE
    for ours_end, scipy_end in zip(ours.confidence_interval, reference.confidence_interval):
        assert abs(ours_end - scipy_end) < 0.25 * se


def test_seed_fixes_the_result_and_the_result_records_its_settings(sample):
    d, n_targets = sample
    first = document_bootstrap(d, n_targets, n_resamples=300, confidence_level=0.8, rng_seed=4)
    again = document_bootstrap(d, n_targets, n_resamples=300, confidence_level=0.8, rng_seed=4)
    other = document_bootstrap(d, n_targets, n_resamples=300, confidence_level=0.8, rng_seed=5)
    np.testing.assert_array_equal(first.bootstrap_distribution, again.bootstrap_distribution)
    assert first.confidence_interval != other.confidence_interval
    assert (first.n_resamples, first.confidence_level, first.rng_seed, first.method) == (300, 0.8, 4, "percentile")
    assert first.to_dict()["confidence_interval"] == list(first.confidence_interval)
    wide = document_bootstrap(d, n_targets, n_resamples=300, confidence_level=0.99, rng_seed=4)
    assert wide.confidence_interval[0] < first.confidence_interval[0] < first.confidence_interval[1] \
        < wide.confidence_interval[1]


def test_degenerate_sample_gives_a_point_interval():
    zeros = np.zeros(30)
    for method in ("percentile", "bca"):
        result = document_bootstrap(zeros, np.full(30, 10.0), n_resamples=50, method=method)
        assert result.confidence_interval == (0.0, 0.0) and result.statistic == 0.0


def test_memory_stays_bounded_by_the_chunk(sample):
    """200 resamples of 100,000 documents drawn at once would need 320 MB; chunking keeps it near 2 MiB."""
    rng = np.random.default_rng(0)
    d, n_targets = rng.normal(size=100_000), rng.integers(1, 300, size=100_000).astype(np.float64)
    tracemalloc.start()
    try:
        document_bootstrap(d, n_targets, n_resamples=200, rng_seed=0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"method": "basic"}, "method: must be one of"),
    ({"confidence_level": 1.0}, "confidence_level: must lie strictly between 0 and 1"),
    ({"n_resamples": 1}, "n_resamples: must be at least 2"),
    ({"rng_seed": -1}, "rng_seed: must be an integer from 0 to 9223372036854775807"),
    ({"rng_seed": 2**63}, "rng_seed: must be an integer from 0 to 9223372036854775807"),
])
def test_bad_arguments(sample, kwargs, message):
    d, n_targets = sample
    with pytest.raises(ValueError, match=message):
        document_bootstrap(d, n_targets, **kwargs)


def test_bca_from_too_few_resamples_blames_the_number_of_resamples(sample):
    """Every resampled value on one side of the estimate leaves the bias correction infinite."""
    d, n_targets = sample
    statistic = ratio_statistic(d, n_targets)
    one_side = "^n_resamples: the BCa interval needs resampled values on both sides"
    with pytest.raises(ParameterError, match=one_side) as raised:
        interval_from_distribution(d, n_targets, np.array([statistic + 1.0, statistic + 2.0]), confidence_level=0.95,
                                   method="bca")
    assert raised.value.parameter == "n_resamples"
