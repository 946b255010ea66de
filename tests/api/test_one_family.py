"""One result family for every metric: a perplexity, an accuracy and a judge-score comparison give the same result
types with the same leading columns and a plot; arms on tasks are Holm and Benjamini–Hochberg adjusted; `gv.load`
reads every kind; the task results' old names are deprecated aliases."""

from __future__ import annotations

import warnings
from pathlib import Path

import altair as alt
import pandas as pd
import pytest
from statsmodels.stats.multitest import multipletests

import gatedv_stats as gv
from gatedv_stats.io.lossfiles import write_loss_file
from gatedv_stats.testing import synthetic_runs
from item_runs import write_tasks

LEADING = ["estimate", "low", "high", "p_value", "verdict"]


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> dict[str, Path]:
    """Loss files, item scores of two tasks, and a judge's score table, each of a baseline and a variant arm."""
    root = tmp_path_factory.mktemp("kinds")
    (root / "loss").mkdir()
    for run in synthetic_runs({"baseline": [30.0, 30.5, 29.8], "gatedv": [29.4, 29.9, 29.3]}, n_docs=40):
        write_loss_file(root / "loss" / f"{run.arm}-{run.seed}.parquet", run.docs, {**run.meta, "eval_set": "heldout"})
    tasks = write_tasks(root / "tasks", arms=("baseline", "gatedv", "v2"))
    table = synthetic_runs({"baseline": [3.0, 3.1, 2.9], "gatedv": [3.6, 3.8, 3.5]}, n_docs=30, rng_seed=3)
    scores = root / "scores.csv"
    frame = [run.docs.assign(arm=run.arm, seed=run.seed, judge_score=run.docs["loss_sum"] / run.docs["n_targets"])
             for run in table]
    pd.concat(frame)[["arm", "seed", "doc_id", "judge_score"]].to_csv(scores, index=False)
    return {"loss": root / "loss", "tasks": tasks, "scores": scores}


def comparisons(study: dict[str, Path]) -> dict[str, gv.ComparisonResult]:
    arms = {"baseline_arm": "baseline", "variant_arm": "gatedv"}
    return {"perplexity": gv.compare(study["loss"], **arms, n_resamples=200),
            "accuracy": gv.compare(sorted(study["tasks"].glob("arc_easy_*.parquet")), **arms, metric="acc"),
            "judge score": gv.compare(study["scores"], **arms, metric="judge_score", higher_is_better=True)}


def test_every_metric_gives_one_comparison_type_with_the_same_leading_columns_and_a_plot(study):
    for kind, result in comparisons(study).items():
        assert type(result) is gv.ComparisonResult, kind
        frame = result.to_frame()
        assert list(frame.columns[:5]) == LEADING, (kind, list(frame.columns))
        assert frame["estimate"].iloc[0] == pytest.approx(result.comparison.estimate)
        assert frame["low"].iloc[0] < frame["estimate"].iloc[0] < frame["high"].iloc[0]
        assert isinstance(result.plot(), alt.TopLevelMixin) and result.plot().to_dict()
        assert result.summary() and result.to_dict() and "<table" in result._repr_html_()


def test_arms_on_tasks_report_holm_and_benjamini_hochberg(study):
    result = gv.arms(study["tasks"], reference="baseline", metric="acc")
    assert type(result) is gv.ArmsResult
    frame = result.to_frame()
    assert list(frame.columns[:5]) == LEADING and {"p_holm", "p_bh"} <= set(frame.columns)
    raw = list(frame["p_value"])
    assert list(frame["p_holm"]) == pytest.approx(list(multipletests(raw, method="holm")[1]))
    assert list(frame["p_bh"]) == pytest.approx(list(multipletests(raw, method="fdr_bh")[1]))
    assert "BH" in result.summary() and "Holm" in result.summary()


def test_load_reads_every_kind(study):
    runs = gv.load([study["loss"], study["tasks"]])
    assert {run.schema for run in runs} == {"loss", "items"}
    scores = gv.load(study["scores"], metric="judge_score", higher_is_better=True)
    assert {run.schema for run in scores} == {"scores"} and scores.arms == ["baseline", "gatedv"]


def test_the_task_results_old_names_are_deprecated_aliases():
    import gatedv_stats.results as results

    for old, new in (("TaskComparisonResult", "ComparisonResult"), ("TaskSuiteResult", "ArmsResult"),
                     ("TaskPlanResult", "PlanResult")):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert getattr(results, old) is getattr(results, new)
        assert [warning.category for warning in caught] == [DeprecationWarning], old
