"""Statistics over seed pairs: t interval vs statsmodels, sign and permutation tests vs binomtest, scipy and loops,
two-level bootstrap vs a loop, and the seed-level summary from arrays."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.weightstats import DescrStatsW

from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.stats.resampling import resampled_sums
from gatedv_stats.stats.seed_level import (
    few_seed_limits,
    paired_t_interval,
    percentile_seed_coverage,
    seed_permutation_test,
    seed_uncertainty,
    sign_test,
    two_level_bootstrap,
)
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


def loss_arrays(runs, arm):
    """(S, N) loss sums of an arm's runs (seed order) and the documents' targets (every run lists them alike)."""
    ordered = sorted((run for run in runs if run.arm == arm), key=lambda run: run.seed)
    return (np.stack([run.docs["loss_sum"].to_numpy(dtype=np.float64) for run in ordered]),
            ordered[0].docs["n_targets"].to_numpy())


def test_seed_uncertainty_assembles_the_parts_from_arrays():
    runs = synthetic_runs({"baseline": [30.0, 30.4, 29.9], "gatedv": [29.5, 29.7, 30.0]}, n_docs=30, rng_seed=1)
    (baseline, n), (variant, _) = loss_arrays(runs, "baseline"), loss_arrays(runs, "gatedv")
    result = seed_uncertainty(baseline, variant, n, baseline_arm="baseline", variant_arm="gatedv", n_resamples=200,
                              rng_seed=5)
    assert (result.baseline_arm, result.variant_arm) == ("baseline", "gatedv")
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

    with pytest.raises(InputError, match="^baseline vs gatedv: seed-level uncertainty needs at least 2 paired seeds"):
        seed_uncertainty(baseline[:1], variant[:1], n, variant_arm="gatedv")
    with pytest.raises(InputError, match=r"must be \(S, N\), \(S, N\), \(N,\)"):
        seed_uncertainty(baseline, variant[:, 1:], n)


@pytest.mark.parametrize("n_seeds", [2, 3, 5, 8])
def test_seed_permutation_test_matches_scipy_and_a_loop(n_seeds):
    rng = np.random.default_rng(n_seeds)
    baseline_nll, variant_nll = rng.normal(3.0, 0.01, n_seeds), rng.normal(2.99, 0.01, n_seeds)
    d = variant_nll - baseline_nll
    result = seed_permutation_test(d)
    scipy_p = stats.permutation_test((variant_nll, baseline_nll), lambda x, y, axis: np.mean(x - y, axis=axis),
                                     permutation_type="samples", vectorized=True, n_resamples=10_000).pvalue
    loop = np.mean([abs(np.mean(np.array(signs) * d)) >= abs(d.mean()) - 1e-15
                    for signs in itertools.product((1, -1), repeat=n_seeds)])
    assert result.p_value == pytest.approx(loop) and result.p_value == pytest.approx(scipy_p)
    assert result.min_attainable_p == pytest.approx(2.0 ** (1 - n_seeds))


def test_three_seeds_say_they_cannot_reach_five_percent():
    result = seed_permutation_test(np.array([-0.02, -0.03, -0.01]))
    assert result.p_value == 0.25 == result.min_attainable_p and not result.can_reach_alpha
    assert "cannot reach p ≤ 0.05" in result.notes[0]
    assert seed_permutation_test(np.array([-0.02, -0.03, -0.01, -0.02, -0.01, -0.04])).can_reach_alpha
    with pytest.raises(InputError, match="up to 20"):
        seed_permutation_test(np.full(21, -0.01))


def test_seed_sign_test_matches_binomtest_and_drops_ties():
    d = np.array([-0.02, -0.01, 0.0, -0.03, 0.01, -0.02])
    result = sign_test(d)
    assert (result.improved, result.worse, result.ties) == (4, 1, 1)
    assert result.p_value == pytest.approx(stats.binomtest(4, 5, 0.5).pvalue)
    assert result.min_attainable_p == pytest.approx(2 ** -4) and not result.can_reach_alpha
    assert sign_test(np.full(6, -0.01)).p_value == pytest.approx(2 ** -5)
    with pytest.raises(InputError, match="tied"):
        sign_test(np.zeros(3))


@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
@pytest.mark.parametrize("d", [[-0.02, -0.01, 0.0, -0.03, 0.01, -0.02], [-0.01] * 7, [0.01, 0.02, -0.01], [0.01]])
def test_sign_test_alternatives_match_binomtest(alternative, d):
    result = sign_test(np.array(d), alternative=alternative)
    improved = sum(value < 0 for value in d)
    untied = sum(value != 0 for value in d)
    assert (result.improved, result.n_pairs, result.alternative) == (improved, untied, alternative)
    assert result.p_value == pytest.approx(stats.binomtest(improved, untied, 0.5, alternative=alternative).pvalue,
                                           rel=1e-12)
    floor = min(1.0, 2.0 ** (1 - untied)) if alternative == "two-sided" else 2.0 ** -untied
    assert result.min_attainable_p == floor
    assert "alternative" not in result.to_dict()
    with pytest.raises(ParameterError, match="^alternative: must be one of two-sided, greater, less"):
        sign_test(np.array(d), alternative="lower")
