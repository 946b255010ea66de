"""The seed-and-document interval, clusters and the verdict, each against an independent computation: a brute-force
loop, the two-way ANOVA, statsmodels MixedLM (REML), dense eigenvalues, scipy."""

from __future__ import annotations

import dataclasses
import json
import math
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.stats import metrics
from gatedv_stats.stats.crossed import cluster_sums, clustered_moments, crossed_moments, weighted_df
from gatedv_stats.stats.planning import variance_components
from gatedv_stats.stats.resampling import document_bootstrap
from gatedv_stats.stats.seed_document import seed_document_interval
from gatedv_stats.stats.verdict import VERDICTS, tost_p, verdict
from gatedv_stats.testing import CrossedModel, loss_sums, simulate_differences


def study(model, n_seeds, n_targets, seed):
    rng = np.random.default_rng(seed)
    y = simulate_differences(model, n_seeds, n_targets, rng)[0]
    baseline, variant = loss_sums(y, n_targets, rng)
    return baseline, variant


def brute_force_mean_squares(y, w):
    """V_seed, Q_doc, Q_int by explicit loops over seeds and documents."""
    n_seeds, n_docs = y.shape
    per_seed = [sum(w[i] * y[s, i] for i in range(n_docs)) for s in range(n_seeds)]
    d = sum(per_seed) / n_seeds
    doc_means = [sum(y[s, i] for s in range(n_seeds)) / n_seeds for i in range(n_docs)]
    v_seed = sum((per_seed[s] - d) ** 2 for s in range(n_seeds)) / (n_seeds - 1)
    q_doc = sum(w[i] ** 2 * (doc_means[i] - d) ** 2 for i in range(n_docs))
    q_int = sum(w[i] ** 2 * (y[s, i] - doc_means[i] - per_seed[s] + d) ** 2
                for s in range(n_seeds) for i in range(n_docs)) / (n_seeds - 1)
    return d, v_seed, q_doc, q_int


def test_weighted_mean_squares_match_a_brute_force_loop_also_in_a_batch():
    rng = np.random.default_rng(1)
    y = rng.normal(size=(4, 3, 7))
    n = rng.integers(5, 50, 7)
    w = n / n.sum()
    fit = crossed_moments(y, w)
    for b in range(4):
        expected = brute_force_mean_squares(y[b], w)
        got = (fit.estimate[b], fit.v_seed[b], fit.q_doc[b], fit.q_int[b])
        np.testing.assert_allclose(got, expected, rtol=1e-12)
        assert fit.estimate[b] == pytest.approx(np.sum(y[b] * w) / 3, rel=1e-12)


def test_equal_weights_give_the_two_way_anova_and_the_planning_components():
    """Var̂(D) = (MS_seed + MS_doc − MS_int) / (S·N); components as gatedv_stats.stats.planning estimates them."""
    n_seeds, n_docs = 5, 40
    baseline, variant = study(CrossedModel(-0.02, 0.01, 0.03, 0.02), n_seeds, np.full(n_docs, 128), 2)
    y = (variant - baseline) / 128
    grand = y.mean()
    ms_seed = n_docs * np.sum((y.mean(axis=1) - grand) ** 2) / (n_seeds - 1)
    ms_doc = n_seeds * np.sum((y.mean(axis=0) - grand) ** 2) / (n_docs - 1)
    interaction = y - y.mean(axis=1, keepdims=True) - y.mean(axis=0, keepdims=True) + grand
    ms_int = np.sum(interaction ** 2) / ((n_seeds - 1) * (n_docs - 1))
    fit = crossed_moments(y, np.full(n_docs, 1 / n_docs))
    assert not fit.doc_truncated and not fit.seed_truncated
    assert fit.var_d == pytest.approx((ms_seed + ms_doc - ms_int) / (n_seeds * n_docs), rel=1e-10)
    planning = variance_components(baseline, variant, np.full(n_docs, 128))
    assert fit.seed_var == pytest.approx(planning.seed_var, rel=1e-9)
    assert fit.doc_var == pytest.approx(planning.doc_var, rel=1e-9)
    assert fit.interaction_var == pytest.approx(planning.residual_var, rel=1e-9)
    assert weighted_df(np.full(n_docs, 1 / n_docs)) == pytest.approx(n_docs - 1)


def test_pretest_is_the_two_way_anova_f_test_of_documents():
    """With equal weights Q_doc / (Q_int / S) = MS_doc / MS_int, whose p-value statsmodels' two-way ANOVA
    (seeds and documents as factors, the interaction as residual) reports."""
    sm = pytest.importorskip("statsmodels.api")
    smf = pytest.importorskip("statsmodels.formula.api")
    n_seeds, n_docs = 4, 30
    rng = np.random.default_rng(12)
    y = rng.normal(0, 0.01, (n_seeds, 1)) + rng.normal(0, 0.02, (1, n_docs)) + rng.normal(0, 0.1, (n_seeds, n_docs))
    fit = crossed_moments(y, np.full(n_docs, 1 / n_docs))
    frame = pd.DataFrame({"y": y.ravel(), "seed": np.repeat(np.arange(n_seeds), n_docs),
                          "doc": np.tile(np.arange(n_docs), n_seeds)})
    table = sm.stats.anova_lm(smf.ols("y ~ C(seed) + C(doc)", frame).fit())
    assert fit.doc_pretest_p == pytest.approx(table.loc["C(doc)", "PR(>F)"], rel=1e-9)


def test_document_term_is_pooled_exactly_when_its_pretest_is_not_significant():
    """Interaction-dominant studies: p ≥ 0.25 leaves the paired t over seeds (SE² = V_seed / S, df S − 1, and a
    note), p < 0.25 adds the document term; a pooling level of 1 keeps every positive document estimate."""
    n = np.random.default_rng(13).integers(32, 1024, 200)
    model = CrossedModel(0.0, seed_sd=0.002, doc_sd=0.02, interaction_sd=0.3)
    seen = set()
    for seed in range(60):
        baseline, variant = study(model, 3, n, 300 + seed)
        result = seed_document_interval(baseline, variant, n)
        y = (variant - baseline) / n
        pooled = result.doc_pretest_p >= 0.25 or "document" in result.truncated
        assert result.doc_pooled == pooled
        seed_only = math.sqrt(result.v_seed / 3)
        if pooled:
            assert result.se == pytest.approx(seed_only, rel=1e-12) and result.df == pytest.approx(2.0)
            assert any("pre-test" in note or "set to 0" in note for note in result.notes)
        else:
            assert result.se > seed_only
        kept = crossed_moments(y, n / n.sum(), pooling_level=1.0)
        assert bool(kept.doc_pooled) == ("document" in result.truncated)
        seen.add(pooled)
    assert seen == {True, False}


def test_components_and_standard_error_match_statsmodels_mixedlm_reml():
    """In a balanced crossed design REML equals the ANOVA method of moments when nothing is truncated."""
    smf = pytest.importorskip("statsmodels.formula.api")
    rng = np.random.default_rng(3)
    n_seeds, n_docs = 4, 12
    y = -0.02 + rng.normal(0, 0.02, (n_seeds, 1)) + rng.normal(0, 0.03, (1, n_docs)) + rng.normal(0, 0.02,
                                                                                                   (n_seeds, n_docs))
    fit = crossed_moments(y, np.full(n_docs, 1 / n_docs))
    assert not fit.doc_truncated and not fit.seed_truncated
    frame = pd.DataFrame({"y": y.ravel(), "seed": np.repeat(np.arange(n_seeds), n_docs),
                          "doc": np.tile(np.arange(n_docs), n_seeds), "group": 1})
    model = smf.mixedlm("y ~ 1", frame, groups="group", re_formula="0",
                        vc_formula={"seed": "0 + C(seed)", "doc": "0 + C(doc)"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reml = model.fit(reml=True)
    components = dict(zip(model.exog_vc.names, reml.vcomp))
    assert fit.seed_var == pytest.approx(components["seed"], rel=1e-3)
    assert fit.doc_var == pytest.approx(components["doc"], rel=1e-3)
    assert fit.interaction_var == pytest.approx(reml.scale, rel=1e-3)
    assert math.sqrt(fit.var_d) == pytest.approx(float(reml.bse_fe.iloc[0]), rel=1e-3)
    assert fit.estimate == pytest.approx(float(reml.fe_params.iloc[0]), rel=1e-6)


def test_effective_df_of_the_document_form_matches_its_eigenvalues():
    rng = np.random.default_rng(4)
    w = rng.integers(10, 1000, 30).astype(float)
    w /= w.sum()
    centring = np.eye(w.size) - np.outer(np.ones(w.size), w)
    eigenvalues = np.linalg.eigvalsh(centring.T @ np.diag(w * w) @ centring)
    assert weighted_df(w) == pytest.approx(eigenvalues.sum() ** 2 / np.sum(eigenvalues ** 2), rel=1e-9)
    assert weighted_df(w) < w.size - 1


def test_effective_df_under_unequal_variances_matches_dense_traces_also_in_a_batch():
    rng = np.random.default_rng(16)
    w = rng.integers(10, 1000, 25).astype(float)
    w /= w.sum()
    variances = rng.uniform(0.1, 3.0, (3, 25))
    centring = np.eye(w.size) - np.outer(np.ones(w.size), w)
    form = centring.T @ np.diag(w * w) @ centring
    batch = weighted_df(w, variances)
    for b in range(3):
        product = form @ np.diag(variances[b])
        expected = np.trace(product) ** 2 / np.trace(product @ product)
        assert batch[b] == pytest.approx(expected, rel=1e-9)
        assert weighted_df(w, variances[b]) == pytest.approx(expected, rel=1e-9)
    assert weighted_df(w, np.full(25, 7.0)) == pytest.approx(weighted_df(w), rel=1e-12)


def test_clustered_working_variances_match_a_brute_force_fit():
    """τ̂² from the documents' spread around their cluster mean, σ̂²_u from Q_doc less τ̂²'s share, and the df
    of Q_doc and Q_int as dense traces under Var(ȳ_c) = σ̂²_u + τ̂² h_c and σ²_int h_c, then Satterthwaite."""
    rng = np.random.default_rng(17)
    n = rng.integers(20, 400, 40).astype(float)
    labels = rng.integers(0, 9, 40)
    n_seeds = 3
    model = CrossedModel(-0.01, seed_sd=0.005, doc_sd=0.04, interaction_sd=0.05, cluster_sd=0.02)
    y = simulate_differences(model, n_seeds, n, rng, clusters=labels)[0]
    fit = clustered_moments(y, n, labels, pooling_level=1.0)
    clusters = sorted(set(labels))
    n_c = np.array([n[labels == c].sum() for c in clusters])
    w = n_c / n_c.sum()
    means = np.array([[np.sum(y[s, labels == c] * n[labels == c]) / n_c[k] for k, c in enumerate(clusters)]
                      for s in range(n_seeds)])
    doc_means, unit_means = y.mean(axis=0), means.mean(axis=0)
    h = np.array([np.sum((n[labels == c] / n_c[k]) ** 2) for k, c in enumerate(clusters)])
    within = sum(n[i] / n_c[clusters.index(labels[i])] * (doc_means[i] - unit_means[clusters.index(labels[i])]) ** 2
                 for i in range(40))
    tau2 = within / np.sum(1 - h)
    centring = np.eye(w.size) - np.outer(np.ones(w.size), w)
    form = centring.T @ np.diag(w * w) @ centring
    d, v_seed, q_doc, q_int = brute_force_mean_squares(means, w)
    sigma2_u = max((q_doc - tau2 * np.trace(form @ np.diag(h))) / np.trace(form), 0.0)

    def df(variances):
        product = form @ np.diag(variances)
        return np.trace(product) ** 2 / np.trace(product @ product)

    nu_doc, nu_int = df(sigma2_u + tau2 * h), (n_seeds - 1) * df(h)
    w2 = np.sum(w * w)
    kappa = w2 - 2 * np.sum(w ** 3) + w2 ** 2
    doc_part = w2 * (q_doc - q_int / n_seeds) / kappa
    assert doc_part > 0  # kept, so every term enters Satterthwaite's sum
    var_d = v_seed / n_seeds + doc_part
    noise = ((v_seed / n_seeds) ** 2 / (n_seeds - 1) + (w2 / kappa * q_doc) ** 2 / nu_doc
             + (w2 / kappa / n_seeds * q_int) ** 2 / nu_int)
    assert fit.var_d == pytest.approx(var_d, rel=1e-10)
    assert fit.satterthwaite_df == pytest.approx(var_d ** 2 / noise, rel=1e-9)
    assert fit.doc_pretest_p == pytest.approx(stats.f.sf(q_doc / (q_int / n_seeds), nu_doc, nu_int), rel=1e-9)


def test_one_document_per_cluster_is_the_unclustered_fit():
    rng = np.random.default_rng(18)
    n = rng.integers(20, 400, 30).astype(float)
    y = simulate_differences(CrossedModel(0.0, 0.01, 0.03, 0.05), 4, n, rng)[0]
    clustered = clustered_moments(y, n, np.arange(30)[::-1])
    plain = crossed_moments(y, n / n.sum())
    assert float(clustered.var_d) == pytest.approx(float(plain.var_d), rel=1e-12)
    assert float(clustered.df) == pytest.approx(float(plain.df), rel=1e-12)


def test_mean_squares_have_the_stated_expectations_and_var_d_is_unbiased():
    """Over simulated studies with unequal n_i: E V_seed, E Q_doc, E Q_int as derived, E Var̂(D) = Var(D)."""
    model = CrossedModel(0.0, seed_sd=0.01, doc_sd=0.03, interaction_sd=0.05)
    rng = np.random.default_rng(5)
    n_seeds, n = 4, rng.integers(20, 600, 60).astype(float)
    w = n / n.sum()
    fit = crossed_moments(simulate_differences(model, n_seeds, n, rng, n_studies=20_000), w)
    w2 = np.sum(w * w)
    kappa = w2 - 2 * np.sum(w ** 3) + w2 ** 2
    seed, doc, inter = model.seed_sd ** 2, model.doc_sd ** 2, model.interaction_sd ** 2
    expected = {"v_seed": seed + inter * w2, "q_doc": (doc + inter / n_seeds) * kappa, "q_int": inter * kappa}
    for name, value in expected.items():
        draws = getattr(fit, name)
        assert abs(draws.mean() - value) < 4 * draws.std() / math.sqrt(draws.size), name
    true_var = seed / n_seeds + doc * w2 + inter * w2 / n_seeds
    assert abs(fit.estimate.var() / true_var - 1) < 4 * math.sqrt(2 / fit.estimate.size)
    assert abs(fit.var_d.mean() / true_var - 1) < 0.03


def test_var_d_stays_unbiased_when_short_documents_vary_more():
    """Document and interaction SDs ∝ 1/sqrt(n_i): the w_i² weighting keeps E Var̂(D) = Var(D) (to O(max w))."""
    model = CrossedModel(0.0, seed_sd=0.002, doc_sd=0.05, interaction_sd=0.05, length_scaled=True)
    rng = np.random.default_rng(15)
    n = rng.integers(20, 600, 60).astype(float)
    fit = crossed_moments(simulate_differences(model, 4, n, rng, n_studies=20_000), n / n.sum())
    assert abs(fit.var_d.mean() / fit.estimate.var() - 1) < 0.05


def test_clusters_leave_d_unchanged_and_their_sums_match_a_loop():
    rng = np.random.default_rng(6)
    n = rng.integers(16, 300, 50)
    labels = rng.choice(np.array(["a.org", "b.com", "c.net", "d.edu", "e.io", "f.de"]), 50)
    baseline, variant = study(CrossedModel(-0.01, 0.01, 0.02, 0.03, cluster_sd=0.0), 3, n, 6)
    sums = cluster_sums(variant - baseline, n, labels)
    assert list(sums.labels) == sorted(set(labels))
    for c, label in enumerate(sums.labels):
        members = labels == label
        np.testing.assert_allclose(sums.values[:, c], (variant - baseline)[:, members].sum(axis=1), rtol=1e-12)
        assert sums.n_units[c] == n[members].sum()
    plain = seed_document_interval(baseline, variant, n)
    clustered = seed_document_interval(baseline, variant, n, clusters=labels)
    assert clustered.estimate == pytest.approx(plain.estimate, rel=1e-12)
    assert clustered.n_clusters == len(sums.labels) and clustered.n_docs == 50
    direct = clustered_moments((variant - baseline) / n, n, labels)
    assert clustered.se == pytest.approx(math.sqrt(direct.var_d), rel=1e-12)
    assert clustered.df == pytest.approx(float(direct.df), rel=1e-12)
    d = metrics.document_differences(baseline, variant)
    cluster_d = cluster_sums(d, n, labels)
    bootstrap = document_bootstrap(cluster_d.values, cluster_d.n_units, n_resamples=50)
    assert bootstrap.statistic == pytest.approx(plain.estimate)


def test_interval_and_delta_p_arithmetic():
    n = np.full(300, 256)
    baseline, variant = study(CrossedModel(-0.02, 0.01, 0.03, 0.05), 5, n, 7)
    result = seed_document_interval(baseline, variant, n, confidence_level=0.9)
    critical = stats.t.ppf(0.95, result.df)
    assert result.confidence_interval.low == pytest.approx(result.estimate - critical * result.se)
    assert result.confidence_interval.high == pytest.approx(result.estimate + critical * result.se)
    mean_ppl = [metrics.perplexity(metrics.token_nll(arm, n)).mean() for arm in (baseline, variant)]
    assert result.delta_p == pytest.approx(metrics.delta_p(*mean_ppl), rel=1e-12)
    assert result.log_ratio == pytest.approx(math.log1p(result.delta_p))
    assert result.delta_p_interval.low == pytest.approx(math.expm1(result.log_ratio - critical * result.se))
    assert result.delta_p_interval.low < result.delta_p < result.delta_p_interval.high
    assert result.estimate == pytest.approx(metrics.nll_diff_mean(metrics.token_nll(baseline, n),
                                                           metrics.token_nll(variant, n)), rel=1e-12)
    assert result.df <= result.satterthwaite_df


def test_truncated_document_component_leaves_the_paired_t_over_seeds():
    """With σ_doc = 0 the document estimate is often negative: then SE² = V_seed / S and df = S − 1."""
    n = np.full(200, 256)
    model = CrossedModel(0.0, 0.01, 0.0, 0.05)
    for seed in range(40):
        baseline, variant = study(model, 3, n, 100 + seed)
        result = seed_document_interval(baseline, variant, n)
        if "document" in result.truncated:
            break
    else:
        pytest.fail("no truncated document component in 40 studies")
    log_ratios = metrics.token_nll(variant, n) - metrics.token_nll(baseline, n)
    t_interval = stats.ttest_1samp(log_ratios, 0.0).confidence_interval(0.95)
    assert result.df == pytest.approx(2.0)
    assert tuple(result.confidence_interval) == pytest.approx((t_interval.low, t_interval.high), rel=1e-9)
    assert result.doc_var == 0.0 and any("set to 0" in note for note in result.notes)


def test_one_document_and_one_seed():
    n = np.array([512])
    baseline, variant = study(CrossedModel(-0.02, 0.01, 0.0, 0.05), 4, n, 8)
    result = seed_document_interval(baseline, variant, n)
    assert result.doc_var is None and result.q_int is None and result.df == pytest.approx(3.0)
    assert any(note.startswith("one document") for note in result.notes)
    json.dumps(result.to_dict(), allow_nan=False)
    with pytest.raises(InputError, match="at least 2 paired seeds"):
        seed_document_interval(baseline[:1], variant[:1], n)


@pytest.mark.parametrize("change, message", [
    (lambda b, v, n: (b, v[:, :-1], n), "must be"),
    (lambda b, v, n: (b, np.where(v > 0, np.nan, v), n), "finite"),
    (lambda b, v, n: (b, v, n * 0), "n_units"),
    (lambda b, v, n: (b, b.copy(), n), "do not vary"),
])
def test_bad_input_is_an_input_error(change, message):
    n = np.full(20, 64)
    baseline, variant = study(CrossedModel(-0.02, 0.01, 0.02, 0.03), 3, n, 9)
    with pytest.raises(InputError, match=message):
        seed_document_interval(*change(baseline, variant, n))


def test_bad_arguments_are_parameter_errors_and_bad_labels_input_errors():
    n = np.full(20, 64)
    baseline, variant = study(CrossedModel(-0.02, 0.01, 0.02, 0.03), 3, n, 10)
    with pytest.raises(ParameterError) as error:
        seed_document_interval(baseline, variant, n, confidence_level=1.0)
    assert error.value.parameter == "confidence_level"
    with pytest.raises(InputError, match="one label per document"):
        seed_document_interval(baseline, variant, n, clusters=np.arange(19))
    with pytest.raises(InputError, match="all strings or all numbers"):
        seed_document_interval(baseline, variant, n, clusters=np.array(["a", None] * 10, dtype=object))
    result = seed_document_interval(baseline, variant, n)
    with pytest.raises(ParameterError) as error:
        verdict(result, sesoi=1.0)
    assert error.value.parameter == "sesoi"


def test_to_dict_is_strict_json():
    n = np.full(50, 128)
    result = seed_document_interval(*study(CrossedModel(-0.02, 0.01, 0.02, 0.03), 3, n, 11), n)
    data = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert data["estimate"] == result.estimate
    assert data["confidence_interval"] == list(result.confidence_interval)
    assert json.dumps(verdict(result, sesoi=0.01).to_dict(), allow_nan=False)


def with_estimate(result, d, se, df=10.0):
    """The same result with another D (taken as the log ratio too), SE and df, interval rebuilt."""
    half = stats.t.ppf(0.5 + result.confidence_level / 2, df) * se
    return dataclasses.replace(result, estimate=d, se=se, df=df, log_ratio=d, log_ratio_se=se,
                               delta_p=math.expm1(d), confidence_interval=(d - half, d + half))


def test_verdicts_follow_the_interval_and_the_two_one_sided_tests():
    n = np.full(50, 128)
    base = seed_document_interval(*study(CrossedModel(-0.02, 0.01, 0.02, 0.03), 3, n, 12), n)
    cases = {  # (D, SE, sesoi) → verdict
        (-0.02, 0.005, None): "better", (0.02, 0.005, None): "worse", (-0.004, 0.005, None): "no detectable difference",
        (-0.004, 0.005, 0.01): "no detectable difference", (0.001, 0.002, 0.01): "equivalent",
        (-0.004, 0.0015, 0.02): "equivalent",  # real (interval excludes 0) but smaller than the sesoi
        (-0.02, 0.005, 0.01): "better",
    }
    for (d, se, sesoi), expected in cases.items():
        result = with_estimate(base, d, se)
        outcome = verdict(result, sesoi=sesoi)
        assert outcome.verdict == expected and outcome.verdict in VERDICTS, (d, se, sesoi, outcome)
        assert "accounting for training seeds and documents" in outcome.explanation
        low, high = result.confidence_interval
        assert (outcome.p_value < outcome.alpha) == (high < 0 or low > 0)
        if sesoi is not None:  # TOST at α ⇔ the 1 − 2α interval lies inside the bounds
            half = stats.t.ppf(1 - outcome.alpha, result.df) * se
            inside = math.log1p(-sesoi) < d - half and d + half < math.log1p(sesoi)
            assert (outcome.tost_p_value < outcome.alpha) == inside
    real_but_small = verdict(with_estimate(base, -0.004, 0.0015), sesoi=0.02)
    assert "slightly better" in real_but_small.explanation


def test_tost_p_value_against_two_scipy_one_sided_tests():
    """The p-value of each one-sided t test written out from scipy.stats.t, on a sample with its own SE and df."""
    sample = np.random.default_rng(13).normal(0.002, 0.01, 12)
    se = sample.std(ddof=1) / math.sqrt(sample.size)
    bounds = (math.log1p(-0.01), math.log1p(0.01))
    lower = stats.ttest_1samp(sample, bounds[0], alternative="greater").pvalue
    upper = stats.ttest_1samp(sample, bounds[1], alternative="less").pvalue
    assert tost_p(sample.mean(), se, sample.size - 1, bounds) == pytest.approx(max(lower, upper), rel=1e-10)
