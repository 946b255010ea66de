"""`bootstrap`, `analyze`, `arms` and `plan` with --metric: item-score files in, the downstream-task verdict out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gatedv_stats.io.lossfiles import write_loss_file
from gatedv_stats.testing import synthetic_runs
from helpers import assert_input_error, invoke
from item_runs import write_tasks


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> Path:
    return write_tasks(tmp_path_factory.mktemp("items") / "runs")


def one_task(folder: Path, task: str, arm: str) -> list[str]:
    return [str(path) for path in sorted(folder.glob(f"{task}_{arm}_*.parquet"))]


def test_bootstrap_on_one_task_reports_the_item_score_verdict(tasks):
    result = invoke("bootstrap", "--metric", "acc", "--baseline", *one_task(tasks, "arc_easy", "baseline"),
                    "--variant", *one_task(tasks, "arc_easy", "gatedv"))
    assert result.exit_code == 0, result.stderr
    assert "arc_easy (acc, higher is better): gatedv vs baseline, 3 seed pairs × 80 items" in result.stdout
    assert "verdict: better" in result.stdout and "points" in result.stdout


def test_analyze_json_on_a_suite_has_a_verdict_per_task_and_a_macro_average(tasks):
    result = invoke("analyze", tasks, "--metric", "acc", "--baseline-arm", "baseline", "--variant-arm", "gatedv",
                    "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert [row["task"] for row in data["arms"]] == ["arc_easy", "hellaswag"]
    assert all(row["p_holm"] >= row["p_value"] for row in data["arms"])
    truncated = [set(row["variance_components"]["truncated"]) for row in data["arms"]]  # components named for items
    assert all(names <= {"seed", "item"} for names in truncated) and any("item" in names for names in truncated)
    assert data["macro_average"][0]["n_tasks"] == 2


def test_bootstrap_over_several_tasks_prints_the_table_and_the_macro_line(tasks):
    result = invoke("bootstrap", tasks, "--metric", "acc", "--baseline-arm", "baseline", "--variant-arm", "gatedv")
    assert result.exit_code == 0, result.stderr
    assert "arc_easy" in result.stdout and "hellaswag" in result.stdout
    assert "macro-average over 2 tasks (gatedv)" in result.stdout


def test_arms_adjusts_across_arms_and_tasks(tmp_path):
    folder = write_tasks(tmp_path / "runs", arms=("baseline", "v2", "v10"), n_items=40)
    result = invoke("arms", folder, "--reference", "baseline", "--metric", "acc", "--json")
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)["arms"]
    assert [(row["variant_arm"], row["task"]) for row in rows] == [
        ("v2", "arc_easy"), ("v10", "arc_easy"), ("v2", "hellaswag"), ("v10", "hellaswag")]


def test_plan_gives_seeds_and_items_for_a_difference_in_points(tasks):
    result = invoke("plan", *one_task(tasks, "hellaswag", "baseline"), *one_task(tasks, "hellaswag", "gatedv"),
                    "--metric", "acc", "--effect", "0.02", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["effect"] == 0.02 and data["n_items"] == 80 and "3" in data["items_required"]


def test_a_loss_file_with_metric_and_an_item_file_without_it_are_refused(tasks, tmp_path):
    loss = tmp_path / "loss.parquet"
    run = synthetic_runs({"baseline": [20.0]}, n_docs=4)[0]
    write_loss_file(loss, run.docs, run.meta)
    item = one_task(tasks, "arc_easy", "baseline")[0]
    assert_input_error(invoke("bootstrap", "--metric", "acc", "--baseline", loss, "--variant", item),
                       "not an item-score file", "drop --metric")
    assert_input_error(invoke("arms", item, "--reference", "baseline"), "an item-score file", "--metric NAME")
    assert_input_error(invoke("arms", tasks, "--reference", "baseline"), "holds item-score files", "--metric NAME")


def test_files_of_one_arm_on_both_sides_pair_by_seed_as_loss_files_do(tasks):
    baseline = one_task(tasks, "arc_easy", "baseline")
    result = invoke("bootstrap", "--metric", "acc", "--baseline", baseline[0], "--variant", baseline[1])
    assert_input_error(result, "task arc_easy: no training seed is shared by baseline (0) and baseline (1)",
                       "runs pair by the seed recorded in their files")
    assert "--baseline-arm" not in result.stderr


def test_a_missing_metric_is_one_error_line(tasks):
    assert_input_error(invoke("bootstrap", tasks, "--metric", "f1", "--baseline-arm", "baseline", "--variant-arm",
                              "gatedv"), "no metric 'f1'")


@pytest.mark.parametrize(("command", "option"), [("bootstrap", ["--samples", "500"]), ("bootstrap", ["--unit", "byte"]),
                                                 ("arms", ["--seed", "3"])])
def test_a_loss_file_option_with_metric_is_refused_not_ignored(tasks, command, option):
    flag = option[0]
    pair = ["--baseline", *one_task(tasks, "arc_easy", "baseline"), "--variant", *one_task(tasks, "arc_easy", "gatedv")]
    files = pair if command != "arms" else [str(tasks), "--reference", "baseline"]
    assert_input_error(invoke(command, "--metric", "acc", *files, *option), flag, "only without --metric")
