"""Seed-level uncertainty: t interval vs statsmodels, sign test vs a binomial sum, two-level bootstrap vs a loop."""

from __future__ import annotations

import math

import numpy as np
import pytest
from statsmodels.stats.weightstats import DescrStatsW

from gatedv_stats.core.errors import InputError
from gatedv_stats.pairing.losses import pair_runs
from gatedv_stats.stats.resampling import resampled_sums
from gatedv_stats.stats.seed_level import few_seed_limits, seed_uncertainty
from gatedv_stats.stats.seed_tests import paired_t_interval, sign_test
from gatedv_stats.stats.two_level_bootstrap import percentile_seed_coverage, two_level_bootstrap
from gatedv_stats.testing import synthetic_runs


def test_paired_t_interval_matches_statsmodels():
    r = np.array([-0.021, -0.018, -0.026, -0.015, -0.020])
    result = paired_t_interval(r, confidence_level=0.9)
    described = DescrStatsW(r)
    low, high = described.tconfint_mean(alpha=0.1)
    t_statistic, p_value, df = described.ttest_mean(0.0)
    assert result.confidence_interval == pytest.approx((low, high), rel=1e-12)
    assert result.t_statistic == pytest.approx(t_statistic, rel=1e-12)
    assert result.p_value == pytest.approx(p_value, rel=1e-10)
    assert result.df == df == 4
    assert result.nll_diff_mean == pytest.approx(r.mean())
    assert result.ratio_interval == pytest.approx((math.exp(low) - 1, math.exp(high) - 1))
    assert result.critical_t == pytest.approx(2.1318468, rel=1e-6)  # t_0.95 with 4 df


def test_paired_t_interval_rejects_too_few_or_constant_ratios():
    with pytest.raises(InputError, match="at least 2"):
        paired_t_interval(np.array([-0.02]))
    with pytest.raises(InputError, match="spread is zero"):
        paired_t_interval(np.array([-0.02, -0.02, -0.02]))


@pytest.mark.parametrize("variant, improved, ties", [
    ([1.0, 1.0, 1.0, 1.0, 1.0], 5, 0),
    ([1.0, 3.0, 1.0, 1.0, 1.0], 4, 0),
    ([1.0, 2.0, 1.0, 3.0, 1.0], 3, 1),
])
def test_sign_test_matches_the_binomial_tail(variant, improved, ties):
    baseline = np.full(5, 2.0)
    result = sign_test(np.array(variant) - baseline, alternative="greater")
    n = 5 - ties
    tail = sum(math.comb(n, k) for k in range(improved, n + 1)) / 2 ** n
    assert (result.improved, result.ties, result.n_pairs) == (improved, ties, n)
    assert result.p_value == pytest.approx(tail, rel=1e-12)
    assert result.min_attainable_p == 0.5 ** n


def test_sign_test_with_every_pair_tied_is_an_input_error():
    with pytest.raises(InputError, match="tied"):
        sign_test(np.ones(3) - np.ones(3), alternative="greater")


def loop_two_level_bootstrap(baseline, variant, n, samples, seed, confidence):
    """The two-level bootstrap written out resample by resample, from the same random draws: seed pairs from
    default_rng(seed), documents as the document bootstrap draws them (the sums of identity rows are the counts)."""
    n_seeds, n_docs = baseline.shape
    rng = np.random.default_rng(seed)
    seed_counts = rng.multinomial(n_seeds, np.full(n_seeds, 1 / n_seeds), size=samples)
    doc_counts = np.rint(resampled_sums(np.eye(n_docs), n_resamples=samples, rng_seed=seed)).astype(np.int64)
    assert np.all(doc_counts.sum(axis=1) == n_docs)
    estimates = []
    for b in range(samples):
        seeds = np.repeat(np.arange(n_seeds), seed_counts[b])
        docs = np.repeat(np.arange(n_docs), doc_counts[b])
        ppl = {}
        for name, losses in (("baseline", baseline), ("variant", variant)):
            ppl[name] = [math.exp(losses[s, docs].sum() / n[docs].sum()) for s in seeds]
        estimates.append(np.mean(ppl["variant"]) / np.mean(ppl["baseline"]) - 1)
    alpha = 1 - confidence
    return np.quantile(estimates, [alpha / 2, 1 - alpha / 2])


def test_two_level_bootstrap_matches_an_explicit_loop():
    rng = np.random.default_rng(2)
    n = rng.integers(100, 257, 25).astype(float)
    baseline = n * rng.normal(3.4, 0.2, (4, 25))
    variant = baseline + n * rng.normal(-0.02, 0.03, (4, 25))
    result = two_level_bootstrap(baseline, variant, n, n_resamples=300, rng_seed=11, confidence_level=0.9)
    expected = loop_two_level_bootstrap(baseline, variant, n, samples=300, seed=11, confidence=0.9)
    assert result.confidence_interval == pytest.approx(tuple(expected), rel=1e-10)
    ppl_base = np.exp(baseline.sum(axis=1) / n.sum())
    ppl_var = np.exp(variant.sum(axis=1) / n.sum())
    assert result.delta_p == pytest.approx(ppl_var.mean() / ppl_base.mean() - 1, rel=1e-12)
    assert result.distinct_seed_resamples == math.comb(7, 4) == 35
    assert result == two_level_bootstrap(baseline, variant, n, n_resamples=300, rng_seed=11, confidence_level=0.9)


def test_two_level_bootstrap_is_wider_than_documents_alone_when_seeds_disagree():
    """Seed-to-seed spread in the effect must widen the interval beyond what fixed models show."""
    rng = np.random.default_rng(4)
    n = np.full(40, 256.0)
    baseline = n * rng.normal(3.4, 0.2, (1, 40)).repeat(5, axis=0)
    steady = baseline + n * -0.02
    spread = baseline + n * (-0.02 + np.array([-0.03, -0.015, 0.0, 0.015, 0.03]))[:, None]
    steady_interval = two_level_bootstrap(baseline, steady, n, n_resamples=400)
    spread_interval = two_level_bootstrap(baseline, spread, n, n_resamples=400)
    # identical seeds, constant per-token effect
    assert steady_interval.confidence_interval.high - steady_interval.confidence_interval.low < 1e-9
    assert spread_interval.confidence_interval.high - spread_interval.confidence_interval.low > 0.02


def test_percentile_seed_coverage_formula():
    # |t_{n-1}| <= z * sqrt((n-1)/n): for n = 3, P(|t_2| <= c) = c / sqrt(2 + c^2)
    c = 1.959963984540054 * math.sqrt(2 / 3)
    assert percentile_seed_coverage(3) == pytest.approx(c / math.sqrt(2 + c * c), rel=1e-9)
    assert percentile_seed_coverage(5) < percentile_seed_coverage(20) < 0.95
    assert math.isnan(percentile_seed_coverage(1))


def test_few_seed_limits_state_the_numbers():
    three = few_seed_limits(3)
    assert "critical t = 4.30" in three[0]
    assert "cannot reach" in three[1] and "0.125" in three[1]
    assert "10 distinct seed resamples" in three[2] and "about 75%" in three[2]
    five = few_seed_limits(5)
    assert "at most 0 fail" in five[1] and "0.03125" in five[1]
    assert "at most 1 fail" in few_seed_limits(8)[1]  # P(X <= 1 | 8, 1/2) = 9/256 <= 0.05


def test_seed_uncertainty_assembles_the_parts_from_paired_runs():
    runs = synthetic_runs({"baseline": [30.0, 30.4, 29.9], "gatedv": [29.5, 29.7, 30.0]}, n_docs=30, rng_seed=1)
    paired = pair_runs([r for r in runs if r.arm == "baseline"], [r for r in runs if r.arm == "gatedv"])
    result = seed_uncertainty(paired, n_resamples=200, rng_seed=5)
    expected_r = np.log([29.5, 29.7, 30.0]) - np.log([30.0, 30.4, 29.9])
    assert result.t_interval.nll_diff_mean == pytest.approx(expected_r.mean(), rel=1e-9)
    assert (result.sign_test.improved, result.sign_test.n_pairs) == (2, 3)
    assert result.bootstrap.rng_seed == 5 and result.bootstrap.n_resamples == 200
    data = result.to_dict()
    assert set(data) == {"baseline_arm", "variant_arm", "two_level_bootstrap", "t_interval", "sign_test", "limits",
                         "seed_permutation_test", "seed_sign_test_two_sided"}
    assert len(data["limits"]) == 3
    assert "cannot reach p ≤ 0.05" in data["seed_permutation_test"]["notes"][0]
    # exact over the 2^3 sign vectors of the per-seed log ratios, by a loop
    flips = [abs(np.mean(np.array(signs) * expected_r)) for signs in np.ndindex(2, 2, 2)
             for signs in [tuple(1 - 2 * bit for bit in signs)]]
    expected_p = np.mean(np.array(flips) >= abs(expected_r.mean()) - 1e-15)
    assert data["seed_permutation_test"]["p_value"] == pytest.approx(expected_p)
    assert data["seed_sign_test_two_sided"]["p_value"] == pytest.approx(1.0)  # 2 of 3 improved
    text = result.summary()
    assert "2/3" in text and "df 2" in text and "note:" in text

    one_seed = pair_runs([runs[0]], [runs[3]])
    with pytest.raises(InputError, match="at least 2 paired seeds"):
        seed_uncertainty(one_seed)
