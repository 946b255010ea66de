"""The noise floor's statistics against independent computations: the A/A and pooled estimates, the consistency F
test, the interval of one seed pair and the pooled interval of several, and the few-seed rule without a floor."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special, stats

from gatedv_stats.core.errors import InputError
from gatedv_stats.stats.crossed import FEW_SEEDS, crossed_moments
from gatedv_stats.stats.noise_floor import CONSISTENCY_LEVEL, SeedVariance, aa_floor, pooled_floor, use_floor
from gatedv_stats.stats.seed_document import seed_document_interval


def test_aa_floor_is_twice_the_run_means_variance_on_k_minus_1_df():
    means = np.array([3.10, 3.14, 3.08, 3.12, 3.11])
    floor = aa_floor(means)
    assert floor.seed.variance == pytest.approx(2 * np.var(means, ddof=1)) and floor.seed.df == 4
    with pytest.raises(InputError, match="at least 3 runs"):
        aa_floor(means[:2])
    with pytest.raises(InputError, match="reruns of one seed"):
        aa_floor(np.full(4, 3.1))


def test_pooled_floor_weights_the_studies_by_their_df_and_tests_homogeneity_with_bartlett():
    studies = [np.array([0.010, 0.030, 0.020]), np.array([0.00, 0.05]), np.array([0.02, 0.01, 0.04, 0.03])]
    floor = pooled_floor(studies)
    by_hand = sum((len(s) - 1) * np.var(s, ddof=1) for s in studies) / sum(len(s) - 1 for s in studies)
    assert floor.seed.variance == pytest.approx(by_hand) and floor.seed.df == 6
    assert floor.homogeneity_p == pytest.approx(stats.bartlett(*studies).pvalue)
    with pytest.raises(InputError, match="at least 2 seed pairs"):
        pooled_floor([np.array([0.1])])


def test_a_study_spread_no_larger_than_the_floor_allows_is_pooled_by_df_else_its_own_is_used():
    floor = SeedVariance(1e-4, 9)
    per_seed = np.array([0.010, 0.022, 0.018])
    use = use_floor(floor, per_seed)
    s2 = np.var(per_seed, ddof=1)
    assert use.f_p_value == pytest.approx(stats.f.sf(s2 / 1e-4, 2, 9))
    assert use.how == "pooled" and use.seed.df == 11
    assert use.seed.variance == pytest.approx((9 * 1e-4 + 2 * s2) / 11)
    wide = np.array([0.0, 0.2, -0.2])
    assert use_floor(floor, wide).how == "study" and use_floor(floor, wide).f_p_value < CONSISTENCY_LEVEL
    tight = np.full(3, 0.01) + np.array([0.0, 1e-6, -1e-6])  # smaller than the floor: no evidence against it
    assert use_floor(floor, tight).how == "pooled"
    assert use_floor(floor, per_seed[:1]).how == "floor"


def test_one_seed_pair_with_a_floor_is_the_floor_plus_the_documents_spread_on_satterthwaite_df():
    rng = np.random.default_rng(2)
    n_docs, floor = 300, SeedVariance(4e-4, 9)
    n = rng.integers(50, 200, n_docs)
    baseline = rng.normal(3.0, 0.3, n_docs) * n
    variant = baseline + rng.normal(-0.02, 0.1, n_docs) * n
    result = seed_document_interval(baseline[None], variant[None], n, floor=floor)
    w = n / n.sum()
    y = (variant - baseline) / n
    d = y @ w
    kappa = np.sum(w * w * (1 - 2 * w + np.sum(w * w)))  # trace of the weighted quadratic form, by hand
    document = np.sum(w * w) * np.sum(w * w * (y - d) ** 2) / kappa
    doc_df = kappa ** 2 / np.sum((w * w * (1 - 2 * w + np.sum(w * w))) ** 2)  # equal-variance working model
    variance = floor.variance + document
    df = variance ** 2 / (floor.variance ** 2 / floor.df + document ** 2 / doc_df)
    assert result.estimate == pytest.approx(d) and result.se == pytest.approx(math.sqrt(variance))
    assert result.df == pytest.approx(df, rel=1e-2)
    half = special.stdtrit(result.df, 0.975) * result.se
    assert result.confidence_interval.low == pytest.approx(d - half)
    assert any("noise floor" in note for note in result.notes)


def test_several_seed_pairs_pool_the_floor_into_the_seed_part_and_keep_the_document_part():
    rng = np.random.default_rng(5)
    n = np.full(200, 100)
    baseline = rng.normal(3.0, 0.2, (3, 200)) * n
    variant = baseline + (rng.normal(0, 0.01, (3, 1)) + rng.normal(0, 0.05, (3, 200))) * n
    plain = seed_document_interval(baseline, variant, n)
    floor = SeedVariance(plain.v_seed, 29)
    pooled = seed_document_interval(baseline, variant, n, floor=floor)
    assert pooled.floor_use.how == "pooled"
    seed_part_before, seed_part_after = plain.v_seed / 3, pooled.floor_use.seed.variance / 3
    assert pooled.se ** 2 == pytest.approx(plain.se ** 2 - seed_part_before + seed_part_after)
    assert pooled.df > plain.df  # 31 df of seed variance instead of the study's 2


def test_without_a_floor_few_seeds_get_at_most_s_minus_1_df():
    rng = np.random.default_rng(0)
    y = rng.normal(0, 1, (4000, 2, 50)) * 0.3 + rng.normal(0, 0.05, (4000, 2, 1)) + rng.normal(0, 0.3, (4000, 1, 50))
    fit = crossed_moments(y, np.full(50, 1 / 50))
    assert FEW_SEEDS >= 2 and np.all(fit.df <= 1.0 + 1e-12)
    assert np.any(fit.satterthwaite_df > 1.5)  # the rule binds: Satterthwaite alone would have said more
    y4 = rng.normal(0, 1, (200, 4, 50)) * 0.3 + rng.normal(0, 0.3, (200, 1, 50))
    assert np.any(crossed_moments(y4, np.full(50, 1 / 50)).df > 3.0)  # from FEW_SEEDS + 1 on, not capped


@pytest.mark.parametrize("n_seeds", [1, 2, 3])
def test_a_variant_with_the_baseline_s_own_losses_gets_the_floor_s_interval_not_no_spread(n_seeds):
    # a change that trains to the baseline's weights: D = 0 on every seed and unit; the floor alone gives the spread
    rng = np.random.default_rng(5)
    baseline = rng.normal(200.0, 10.0, (n_seeds, 40))
    floor = SeedVariance(0.01, 4.0)
    fit = seed_document_interval(baseline, baseline.copy(), np.full(40, 50.0), floor=floor)
    pooled_df = floor.df + n_seeds - 1.0  # the study's spread, 0 on S − 1 df, pooled with the floor's
    se = math.sqrt(floor.df * floor.variance / pooled_df / n_seeds)
    assert fit.estimate == 0.0 and fit.df == pytest.approx(pooled_df if n_seeds > 1 else floor.df)
    assert fit.se == pytest.approx(se if n_seeds > 1 else math.sqrt(floor.variance))
    assert fit.confidence_interval.high == pytest.approx(stats.t.ppf(0.975, fit.df) * fit.se)
