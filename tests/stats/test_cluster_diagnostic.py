"""The group-effect diagnostic: its F test against scipy and statsmodels, its SE ratio against the
seed-and-document interval, which columns it tests, the warnings every statistics command carries, and a fast
calibration (the full one is bench/cluster_diagnostic.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf
from scipy import stats
from statsmodels.stats.anova import anova_lm

from gatedv_stats.analysis.arms import compare_arms
from gatedv_stats.analysis.compare import compare
from gatedv_stats.analysis.figures.perplexity import paired_group_effects
from gatedv_stats.analysis.plan import plan as plan_study
from gatedv_stats.core.errors import InputError
from gatedv_stats.io.lossfiles import write_loss_file
from gatedv_stats.io.runfiles import Run
from gatedv_stats.pairing.pair import pair_runs
from gatedv_stats.stats.cluster_diagnostic import (
    DIAGNOSTIC_LEVEL,
    group_effect_test,
    group_effects,
    grouping_columns,
)
from gatedv_stats.stats.seed_document import seed_document_interval
from gatedv_stats.testing import (
    CLUSTERED_STUDY,
    cluster_calibration,
    domain_labels,
    equal_domains,
    loss_sums,
    simulate_differences,
)
from helpers import invoke

STRONG = 0.06  # a domain SD that 8 domains of 10 documents show plainly (the documents' SD is 0.05)


def study(cluster_sd: float, n_seeds: int = 5, rng_seed: int = 0, n_domains: int = 8, per_domain: int = 10):
    """Loss sums (S, N) of both arms, target counts and integer domains of a clustered study."""
    rng = np.random.default_rng(rng_seed)
    labels = equal_domains(n_domains, per_domain)
    n = rng.integers(32, 1024, labels.size)
    y = simulate_differences(replace(CLUSTERED_STUDY, cluster_sd=cluster_sd), n_seeds, n, rng, clusters=labels)[0]
    baseline, variant = loss_sums(y, n, rng)
    return baseline, variant, n, labels


def runs(baseline, variant, n, columns: dict, arm: str = "gatedv") -> tuple[list[Run], list[Run]]:
    """Loss runs of both arms, every document carrying `columns`."""
    def arm_runs(name: str, sums: np.ndarray) -> list[Run]:
        return [Run(arm=name, seed=s, meta={"arm": name, "seed": s}, source=f"{name}{s}", sha256=f"{name}{s}",
                        units=pd.DataFrame({"doc_id": [f"d{i:04d}" for i in range(n.size)], "n_targets": n,
                                           "loss_sum": row, **columns}))
                for s, row in enumerate(sums)]
    return arm_runs("baseline", baseline), arm_runs(arm, variant)


def paired_study(cluster_sd: float, **kwargs):
    baseline, variant, n, labels = study(cluster_sd, **kwargs)
    return pair_runs(*runs(baseline, variant, n, {"domain": [f"site{c}" for c in labels]}))


def test_f_test_matches_scipy_and_statsmodels():
    baseline, variant, n, labels = study(0.01, rng_seed=3)
    labels = domain_labels(n.size, np.random.default_rng(4), mean_size=6.0)  # unequal group sizes
    y = (variant - baseline) / n
    result = group_effect_test(y, labels, n)
    means = y.mean(axis=0)
    expected = stats.f_oneway(*(means[labels == g] for g in np.unique(labels)))
    assert result.f_statistic == pytest.approx(expected.statistic, rel=1e-10)
    assert result.p_value == pytest.approx(expected.pvalue, rel=1e-8)
    table = anova_lm(smf.ols("d ~ C(g)", data=pd.DataFrame({"d": means, "g": labels})).fit())
    assert (result.df_between, result.df_within) == tuple(int(v) for v in table["df"])
    assert result.f_statistic == pytest.approx(table["F"].iloc[0], rel=1e-10)
    assert result.n_groups == np.unique(labels).size and result.n_docs == n.size


def test_se_ratio_is_the_seed_and_document_intervals():
    baseline, variant, n, labels = study(STRONG, rng_seed=5)
    result = group_effect_test((variant - baseline) / n, labels, n)
    clustered = seed_document_interval(baseline, variant, n, clusters=labels).se
    assert result.se_ratio == pytest.approx(clustered / seed_document_interval(baseline, variant, n).se, rel=1e-10)
    assert result.flagged and result.p_value < DIAGNOSTIC_LEVEL and result.se_ratio > 1.5
    assert result.to_dict()["flagged"] is True and "far beyond" in result.summary()


def test_plain_arrays_one_seed_and_no_spread():
    baseline, variant, n, labels = study(STRONG)
    one_seed = group_effect_test((variant - baseline)[0] / n, labels)  # item-like: one row, equal weights
    assert one_seed.se_ratio is None and one_seed.flagged
    same = group_effect_test(np.zeros((3, n.size)), labels, n)
    assert (same.f_statistic, same.p_value, same.se_ratio, same.flagged) == (0.0, 1.0, None, False)
    with pytest.raises(InputError, match="one label per document"):
        group_effect_test(np.zeros((3, 10)), np.zeros(9))
    with pytest.raises(InputError, match="all strings or all numbers"):
        group_effect_test(np.zeros((3, 4)), np.array(["a", None, "a", None], dtype=object))
    with pytest.raises(InputError, match="at least 2 groups"):
        group_effect_test(np.zeros((3, 4)), np.arange(4))
    tests = group_effects(np.zeros((3, n.size)), {"a": labels, "b": labels % 2})
    assert [test.level for test in tests] == [DIAGNOSTIC_LEVEL / 2] * 2


def test_grouping_columns():
    frame = pd.DataFrame({"domain": [1, 1, 2, 2, 3, 3], "subtask": list("aabbcc"), "url": list("uvwxyz"),
                          "source": list("ppqqrr"), "n_bytes": [5, 5, 6, 6, 7, 7], "two": list("aaabbb")})
    assert grouping_columns(frame) == ("domain", "subtask", "source")
    assert grouping_columns(frame, exclude="domain") == ("subtask", "source")


def test_compare_warns_and_not_when_clustered():
    paired = paired_study(STRONG)
    result = compare(paired, n_resamples=50)
    [warning] = [text for text in result.warnings if "--cluster domain" in text]
    assert "8 domain groups far beyond what their 80 documents explain" in warning
    assert warning in result.notes and warning in result.to_dict()["notes"] and result.group_effects[0].flagged
    clustered = compare(paired, n_resamples=50, cluster="domain")
    assert not any("--cluster" in text for text in clustered.warnings) and clustered.group_effects == ()
    quiet = compare(paired_study(0.0, rng_seed=1), n_resamples=50)
    assert not quiet.group_effects[0].flagged and not any("--cluster" in text for text in quiet.warnings)


def test_arms_and_plan_warn():
    baseline, variant, n, labels = study(STRONG)
    columns = {"domain": [f"site{c}" for c in labels]}
    base_runs, variant_runs = runs(baseline, variant, n, columns)
    _, other_runs = runs(baseline, baseline + (variant - baseline)[::-1], n, columns, arm="other")
    pairs = [pair_runs(base_runs, variant_runs), pair_runs(base_runs, other_runs)]
    arms = compare_arms(pairs, n_permutations=50)
    assert [text.split(":")[0] for text in arms.warnings] == ["gatedv", "other"]
    assert set(arms.warnings) <= set(arms.notes) and arms.to_dict()["warnings"] == list(arms.warnings)
    assert compare_arms(pairs, n_permutations=50, cluster="domain").warnings == ()
    plan = plan_study(pairs[0], 0.01)
    [warning] = plan.warnings
    assert "understates the seeds and documents needed" in warning and f"note: {warning}" in plan.summary()
    assert paired_group_effects(pairs[0], "domain") == ()


def test_cli_bootstrap_warns(tmp_path):
    baseline, variant, n, labels = study(STRONG)
    files = {"baseline": [], "variant": []}
    for side, sums in (("baseline", baseline), ("variant", variant)):
        for seed, row in enumerate(sums):
            path = tmp_path / f"{side}{seed}.parquet"
            docs = pd.DataFrame({"doc_id": [f"d{i}" for i in range(n.size)], "n_targets": n, "loss_sum": row,
                                 "domain": [f"site{c}" for c in labels]})
            write_loss_file(path, docs, {"arm": side, "seed": seed})
            files[side].append(str(path))
    args = ["bootstrap", "--baseline", *files["baseline"], "--variant", *files["variant"], "--samples", "50"]
    result = invoke(*args)
    assert result.exit_code == 0, result.stderr
    assert "warning: the paired differences vary between the 8 domain groups" in result.stderr
    clustered = invoke(*args, "--cluster", "domain", "--json")
    assert clustered.exit_code == 0 and "--cluster domain" not in clustered.stderr
    assert not any("--cluster" in note for note in json.loads(clustered.stdout)["notes"])


def test_calibration_fast():
    """Loose bounds around docs/statistics.md's figures (note 1.00 and 0.01; winners 0.42 and 0.03)."""
    rng = np.random.default_rng(11)
    labels = equal_domains(20, 50)
    n = rng.integers(32, 1024, labels.size)
    clustered = cluster_calibration(CLUSTERED_STUDY, 5, n, labels, rng, n_studies=40)
    assert clustered.note_rate >= 0.9
    assert clustered.winner_rate >= 0.2 and clustered.clustered_winner_rate <= 0.15
    null = cluster_calibration(replace(CLUSTERED_STUDY, cluster_sd=0.0), 5, n, labels, rng, n_studies=100)
    assert null.note_rate <= 0.05 and null.winner_rate <= 0.15
