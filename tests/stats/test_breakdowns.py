"""D per group: each group's D and interval against a direct computation on the group's documents, from arrays."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gatedv_stats.core.errors import InputError
from gatedv_stats.pairing.pair import pair_runs
from gatedv_stats.stats import metrics
from gatedv_stats.stats.breakdowns import OTHER, breakdown
from gatedv_stats.stats.resampling import document_bootstrap
from gatedv_stats.testing import synthetic_runs


def paired_with_domains(domains, n_docs=None, seed=0):
    n_docs = n_docs or len(domains)
    runs = synthetic_runs({"baseline": [30.0, 30.4, 29.9], "gatedv": [29.5, 29.7, 30.0]}, n_docs=n_docs, rng_seed=seed)
    for run in runs:
        run.docs["domain"] = list(domains)
    return pair_runs([r for r in runs if r.arm == "baseline"], [r for r in runs if r.arm == "gatedv"])


def by(paired, column, **options):
    """`breakdown` of a pair's arrays by one of its document columns (n_targets: its unit counts)."""
    values = paired.n_units if column == "n_targets" else paired.doc_columns[column].to_numpy()
    return breakdown(paired.baseline, paired.variant, paired.n_units, column, values, **options)


def test_each_group_matches_the_statistic_and_bootstrap_on_its_own_documents():
    domains = ["news"] * 8 + ["code"] * 7 + ["wiki"] * 9
    paired = paired_with_domains(domains)
    result = by(paired, "domain", n_resamples=300, rng_seed=4, min_docs=5)
    assert [group.group for group in result.groups] == ["code", "news", "wiki"]
    d = metrics.document_differences(paired.baseline, paired.variant)
    labels = paired.doc_columns["domain"].to_numpy()
    for index, group in enumerate(result.groups):
        members = labels == group.group
        assert group.n_docs == members.sum()
        assert group.estimate == pytest.approx(d[members].sum() / paired.n_units[members].sum(), rel=1e-12)
        expected = document_bootstrap(d[members], paired.n_units[members], n_resamples=300, rng_seed=4 + index)
        assert group.confidence_interval == pytest.approx(expected.confidence_interval, rel=1e-12)
        assert group.bootstrap_seed == 4 + index
    # the token-weighted group D's average back to the overall D
    total = sum(group.estimate * group.n_units for group in result.groups) / paired.n_units.sum()
    assert total == pytest.approx(d.sum() / paired.n_units.sum(), rel=1e-12)
    assert result.pooled_groups == 0 and result.left_out_docs == 0


def test_small_groups_are_pooled_or_left_out_and_said_so():
    domains = ["a"] * 6 + ["b", "c", "d"] + ["e"] * 6
    result = by(paired_with_domains(domains), "domain", n_resamples=100, min_docs=3)
    assert [group.group for group in result.groups] == ["a", "e", OTHER]
    assert result.groups[-1].n_docs == 3 and result.pooled_groups == 3
    assert "3 groups with fewer than 3 documents pooled" in result.summary()

    too_few = by(paired_with_domains(["a"] * 6 + ["b"] + ["e"] * 6), "domain", n_resamples=100, min_docs=3)
    assert [group.group for group in too_few.groups] == ["a", "e"] and too_few.left_out_docs == 1
    assert "1 documents left out" in too_few.summary()


def test_numeric_columns_are_cut_into_quantile_bins_that_partition_the_documents():
    paired = paired_with_domains(["x"] * 40)
    result = by(paired, "n_bytes", bins=4, n_resamples=100, min_docs=2)
    assert result.binned and len(result.groups) == 4
    assert sum(group.n_docs for group in result.groups) == 40
    n_bytes = paired.doc_columns["n_bytes"].to_numpy()
    edges = np.quantile(n_bytes, [0, 0.25, 0.5, 0.75, 1])
    assert result.groups[0].group == f"{edges[0]:g}–{edges[1]:g}"
    expected_counts = pd.Series(pd.qcut(n_bytes, 4)).value_counts(sort=False).tolist()
    assert [group.n_docs for group in result.groups] == expected_counts
    constant = by(paired, "n_targets", n_resamples=100)  # every document has 256 targets
    assert [group.group for group in constant.groups] == ["256"] and constant.groups[0].n_docs == 40
    frame = result.to_frame()
    assert list(frame.columns)[:7] == ["group", "n_docs", "n_units", "nll_diff_mean", "low", "high", "bootstrap_seed"]


def test_bad_breakdown_requests():
    paired = paired_with_domains(["x"] * 10)
    with pytest.raises(InputError, match="^min_docs: "):
        by(paired, "domain", min_docs=1)
    with pytest.raises(InputError, match="^bins: "):
        by(paired, "n_bytes", bins=0)
    with pytest.raises(InputError, match="breakdown by domain: .* for 10 documents; give one value per document"):
        breakdown(paired.baseline, paired.variant, paired.n_units, "domain", ["x"] * 9)
    with pytest.raises(InputError, match=r"must be \(S, N\), \(S, N\), \(N,\)"):
        breakdown(paired.baseline, paired.variant[:, 1:], paired.n_units, "domain", ["x"] * 10)


def test_groups_get_bonferroni_seed_and_document_intervals_and_holm_p_values():
    """Each group against the seed-and-document fit of its own documents (scipy t, statsmodels Holm)."""
    from scipy import stats
    from statsmodels.stats.multitest import multipletests

    from gatedv_stats.stats.seed_document import seed_document_interval

    domains = ["news"] * 8 + ["code"] * 7 + ["wiki"] * 9
    paired = paired_with_domains(domains)
    result = by(paired, "domain", n_resamples=100, min_docs=5)
    assert result.adjusted_level == pytest.approx(1 - 0.05 / 3)
    labels = paired.doc_columns["domain"].to_numpy()
    raw = []
    for group in result.groups:
        members = labels == group.group
        fit = seed_document_interval(paired.baseline[:, members], paired.variant[:, members], paired.n_units[members])
        half = stats.t.ppf(1 - 0.05 / 6, fit.df) * fit.se
        assert group.seed_document_interval == pytest.approx((fit.estimate - half, fit.estimate + half),
                                                             rel=1e-9)
        assert group.p_value == pytest.approx(2 * stats.t.sf(abs(fit.estimate) / fit.se, fit.df), rel=1e-9)
        raw.append(group.p_value)
    assert [group.p_holm for group in result.groups] == pytest.approx(list(multipletests(raw, method="holm")[1]))
    single = pair_runs([r for r in synthetic_runs({"baseline": [30.0], "gatedv": [29.5]}, n_docs=24)[:1]],
                       [r for r in synthetic_runs({"baseline": [30.0], "gatedv": [29.5]}, n_docs=24)[1:]])
    assert by(single, "n_bytes", n_resamples=50, min_docs=2).adjusted_level is None  # one seed pair
