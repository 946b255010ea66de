"""The item-score verdict against independent computations: a two-way ANOVA, scipy, statsmodels, brute force."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests

from gatedv_stats.analysis.arms import compare_arms
from gatedv_stats.analysis.compare import compare
from gatedv_stats.analysis.plan import plan as plan_study
from gatedv_stats.core.errors import ParameterError
from gatedv_stats.pairing.pair import pair_with_reference
from gatedv_stats.stats.planning import Design
from gatedv_stats.stats.scale import MetricScale
from gatedv_stats.stats.tasks import macro_average, mcnemar_test
from item_runs import pair_items, paired_runs


def study(n_seeds=4, n_items=60, shift=0.0, seed=0, **kwargs):
    """Binary scores of two arms; the variant's success probability is `shift` higher."""
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.2, 0.8, n_items)
    base = (rng.random((n_seeds, n_items)) < p).astype(float)
    var = (rng.random((n_seeds, n_items)) < np.clip(p + shift + rng.normal(0, 0.03, (n_seeds, 1)), 0, 1)).astype(float)
    return pair_items(paired_runs(base, var, **kwargs), baseline_arm="baseline", variant_arm="gatedv", metric="acc")


def test_balanced_case_matches_a_brute_force_two_way_anova():
    paired = study(n_seeds=5, n_items=40, shift=0.1)
    result = compare(paired)
    y = paired.variant - paired.baseline
    s, n = y.shape
    grand = y.mean()
    ms_seed = n * np.sum((y.mean(axis=1) - grand) ** 2) / (s - 1)
    ms_item = s * np.sum((y.mean(axis=0) - grand) ** 2) / (n - 1)
    residual = y - y.mean(axis=1, keepdims=True) - y.mean(axis=0, keepdims=True) + grand
    ms_int = np.sum(residual ** 2) / ((s - 1) * (n - 1))
    fit = result.seed_document
    assert result.estimate == pytest.approx(grand)
    assert fit.interaction_var == pytest.approx(ms_int)
    assert fit.doc_var == pytest.approx(max((ms_item - ms_int) / s, 0.0))
    assert fit.seed_var == pytest.approx(max((ms_seed - ms_int) / n, 0.0))
    assert fit.doc_pretest_p == pytest.approx(stats.f.sf(ms_item / ms_int, n - 1, (s - 1) * (n - 1)))
    doc_term = 0.0 if fit.doc_pooled else (ms_item - ms_int) / s / n
    assert fit.se ** 2 == pytest.approx(ms_seed / n / s + doc_term)
    half = stats.t.ppf(0.975, fit.df) * fit.se
    assert tuple(fit.confidence_interval) == pytest.approx((grand - half, grand + half))


@pytest.mark.parametrize(("higher_is_better", "expected"), [(True, "better"), (False, "worse")])
def test_the_verdict_follows_the_metric_direction(higher_is_better, expected):
    rng = np.random.default_rng(1)
    base = rng.uniform(0.0, 1.0, (4, 200))
    var = base + 0.05 + rng.normal(0, 0.02, (4, 200))
    runs = paired_runs(base, var, metric="score", higher_is_better=higher_is_better)
    result = compare(pair_items(runs, baseline_arm="baseline", variant_arm="gatedv", metric="score"))
    assert result.verdict.verdict == expected
    assert f"The variant is {expected}: its score is higher by" in result.verdict.explanation
    assert "accounting for training seeds and items" in result.summary()


def test_accuracy_differences_read_in_points():
    result = compare(study(shift=0.2, n_items=400))
    assert result.verdict.verdict == "better"
    assert "points" in result.verdict.explanation and result.to_dict()["verdict"] == "better"


def test_sesoi_is_an_absolute_difference_in_the_metric_units():
    paired = study(n_seeds=5, n_items=2000, shift=0.0, seed=3)
    result = compare(paired, sesoi=0.05)
    fit = result.seed_document
    below = stats.t.sf((fit.estimate + 0.05) / fit.se, fit.df)
    above = stats.t.cdf((fit.estimate - 0.05) / fit.se, fit.df)
    assert result.verdict.tost_p_value == pytest.approx(max(below, above))
    assert result.verdict.equivalence_bounds == (-0.05, 0.05)
    assert result.verdict.verdict == "equivalent" and "within ±5.00 points" in result.verdict.explanation
    with pytest.raises(ParameterError, match="sesoi"):
        compare(paired, sesoi=-0.01)


def test_seed_permutation_test_matches_a_brute_force_loop():
    paired = study(n_seeds=5, shift=0.05)
    per_seed = (paired.variant - paired.baseline).mean(axis=1)
    observed = abs(per_seed.mean())
    flips = [abs(np.mean(np.array(signs) * per_seed)) >= observed - 1e-12
             for signs in itertools.product((1, -1), repeat=per_seed.size)]
    assert compare(paired).permutation.p_value == pytest.approx(np.mean(flips))


def test_win_loss_tie_counts_are_of_seed_averaged_item_scores():
    paired = study(n_seeds=3, shift=0.1)
    result = compare(paired)
    mean = (paired.variant - paired.baseline).mean(axis=0)
    assert (result.wins, result.losses, result.ties) == (np.sum(mean > 0), np.sum(mean < 0), np.sum(mean == 0))


def test_one_seed_pair_gives_mcnemar_and_no_detectable_difference():
    paired = study(n_seeds=1, n_items=80, shift=0.15)
    result = compare(paired)
    assert result.seed_document is None and result.verdict is None and result.permutation is None
    assert result.verdict_text == "no detectable difference" and "One seed pair" in result.verdict_explanation
    b = int(np.sum((paired.baseline[0] == 1) & (paired.variant[0] == 0)))
    c = int(np.sum((paired.baseline[0] == 0) & (paired.variant[0] == 1)))
    reference = mcnemar([[0, b], [c, 0]], exact=True)
    assert result.mcnemar.statistic == reference.statistic
    assert result.mcnemar.p_value == pytest.approx(reference.pvalue)
    assert result.mcnemar.p_value == pytest.approx(stats.binomtest(min(b, c), b + c, 0.5).pvalue)
    assert "McNemar" in result.summary()


def test_mcnemar_without_discordant_items_is_one():
    assert mcnemar_test(np.ones(5), np.ones(5)).p_value == 1.0


def test_clusters_are_the_sampled_units():
    subtasks = np.repeat([f"sub{k}" for k in range(10)], 6)
    result = compare(study(n_items=60, subtasks=subtasks), cluster="subtask")
    assert result.seed_document.n_clusters == 10 and result.to_dict()["n_clusters"] == 10
    assert "items grouped into 10 clusters" in result.verdict.explanation
    assert math.isfinite(result.to_dict()["difference_se"])


def suite_pairs(shifts=(0.1, 0.0, 0.05), n_seeds=4, n_items=150):
    rng = np.random.default_rng(7)
    runs = []
    for k, shift in enumerate(shifts):
        p = rng.uniform(0.2, 0.7, n_items)
        base = (rng.random((n_seeds, n_items)) < p).astype(float)
        var = (rng.random((n_seeds, n_items)) < p + shift).astype(float)
        runs += paired_runs(base, var, task=f"task{k}")
    return pair_with_reference(runs, "baseline", MetricScale(metric="acc"))


def test_suite_verdicts_use_holm_across_tasks_beside_benjamini_hochberg():
    pairs = suite_pairs()
    suite = compare_arms(pairs)
    raw = [compare(pair).seed_document.p_value for pair in pairs]
    assert [arm.comparison.seed_document.p_value for arm in suite.arms] == pytest.approx(raw)
    assert [arm.p_holm for arm in suite.arms] == pytest.approx(multipletests(raw, method="holm")[1])
    assert [arm.p_bh for arm in suite.arms] == pytest.approx(multipletests(raw, method="fdr_bh")[1])
    for arm in suite.arms:
        result = arm.comparison
        assert result.verdict.p_value == arm.p_holm
        assert (result.verdict.verdict == "better") == (arm.p_holm < 0.05 and result.estimate > 0)
    assert "macro-average over 3 tasks" in suite.summary() and "Benjamini–Hochberg" in suite.summary()


def test_macro_average_of_one_task_is_that_task_interval():
    fit = compare(suite_pairs()[0]).seed_document
    macro = macro_average([fit])
    assert macro.se == pytest.approx(fit.se) and macro.df == pytest.approx(fit.df)
    assert tuple(macro.confidence_interval) == pytest.approx(tuple(fit.confidence_interval))


def test_macro_average_variance_is_the_seed_spread_of_macro_means_plus_the_item_terms():
    pairs = suite_pairs()
    fits = [compare(pair).seed_document for pair in pairs]
    macro = macro_average(fits)
    per_seed = np.mean([(pair.variant - pair.baseline).mean(axis=1) for pair in pairs], axis=0)
    s = per_seed.size
    item_terms = []
    for pair, fit in zip(pairs, fits):  # the item term of each task from its own two-way ANOVA
        y = pair.variant - pair.baseline
        n = y.shape[1]
        ms_item = s * np.var(y.mean(axis=0), ddof=1)
        residual = y - y.mean(axis=1, keepdims=True) - y.mean(axis=0, keepdims=True) + y.mean()
        ms_int = np.sum(residual ** 2) / ((s - 1) * (n - 1))
        item_terms.append(0.0 if fit.doc_pooled else (ms_item - ms_int) / s / n)
    assert macro.difference == pytest.approx(per_seed.mean())
    assert macro.se ** 2 == pytest.approx(np.var(per_seed, ddof=1) / s + sum(item_terms) / len(pairs) ** 2)


def test_plan_in_points_recomputes_its_own_power():
    paired = suite_pairs(shifts=(0.03,))[0]
    plan = plan_study(paired, 0.05)
    fit = compare(paired).seed_document
    design = Design(fit.seed_var, fit.doc_var or 0.0, fit.interaction_var or 0.0, 1.0 / paired.n_docs,
                    paired.n_docs)
    for seeds, items in plan.units_required.items():
        if items is not None:
            assert design.power(0.05, seeds, 0.05, items) >= 0.8 > design.power(0.05, seeds, 0.05, items - 1)
    assert plan.seeds_required is None or design.power(0.05, plan.seeds_required, 0.05) >= 0.8
    assert "items needed at" in plan.summary()
