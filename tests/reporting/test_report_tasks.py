"""The report's "Downstream tasks" section: present only when the inputs hold item-score files."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments import write_runs
from gatedv_stats.analysis.experiment import analyze_experiment
from gatedv_stats.io.discovery import discover_inputs
from gatedv_stats.reporting.build import build_report
from gatedv_stats.reporting.render import write_report
from gatedv_stats.testing import ppls_with_moments
from item_runs import write_tasks


def experiment(root: Path, with_tasks: bool) -> Path:
    write_runs(root, {"baseline": ppls_with_moments(59.1, 0.5, 3), "gatedv": ppls_with_moments(57.9, 0.7, 3)},
               eval_set="heldout", lr=0.0048)
    if with_tasks:
        write_tasks(root / "tasks", n_items=60)
    return root


def test_the_section_lists_each_task_with_its_interval_verdict_and_the_macro_average(tmp_path):
    analysis = analyze_experiment(discover_inputs([experiment(tmp_path, True)]))
    report = build_report(analysis)
    keys = [section.key for section in report.sections]
    assert keys.index("tasks") == keys.index("comparison") + 1
    section = report.sections[keys.index("tasks")]
    table = section.tables[0]
    tasks = [cells[0].text for cells in table.groups[0].rows]
    assert tasks == ["arc_easy", "hellaswag"] and table.groups[1].label == "Macro-average over tasks"
    assert "%" in table.groups[0].rows[0][4].text and "points" in table.caption
    assert table.groups[0].rows[0][8].text == analysis.tasks.arms[0].comparison.verdict_text
    assert section.figures[0].key == "tasks-forest" and section.figures[0].spec["facet"]
    text = write_report([tmp_path], tmp_path / "report.md", "md").read_text()
    assert "Downstream tasks" in text and "macro-average" in text


def test_without_item_scores_there_is_no_such_section(tmp_path):
    analysis = analyze_experiment(discover_inputs([experiment(tmp_path, False)]))
    assert analysis.tasks is None
    assert "tasks" not in [section.key for section in build_report(analysis).sections]


@pytest.mark.slow
def test_metric_chooses_the_tasks_metric_and_a_metric_not_every_file_has_is_one_line(tmp_path):
    from gatedv_stats.analysis.experiment import AnalysisSettings
    from gatedv_stats.io.itemfiles import read_item_file, write_item_file
    from helpers import assert_input_error, invoke

    root = experiment(tmp_path / "exp", True)
    for path in sorted((root / "tasks").glob("*.parquet")):  # a second metric beside acc
        (run,) = read_item_file(path)
        items = run.units.assign(gold_loglik=-1.0 - run.units["acc"])
        write_item_file(path, items, {**run.meta, "arm": run.arm, "seed": run.seed, "task": run.task, "n_shot": 0,
                                      "metrics": ["acc", "gold_loglik"]})
    inputs = discover_inputs([root])
    assert analyze_experiment(inputs).tasks.metric == "acc"
    chosen = analyze_experiment(inputs, AnalysisSettings(metric="gold_loglik")).tasks
    assert chosen.metric == "gold_loglik" and all(row.comparison.metric == "gold_loglik" for row in chosen.arms)
    assert_input_error(invoke("report", root, "--out", tmp_path / "r.md", "--metric", "acc_norm"),
                       "--metric", "'acc_norm' is not a metric of every item-score file", "acc, gold_loglik")
    no_items = experiment(tmp_path / "losses-only", False)
    assert_input_error(invoke("report", no_items, "--out", tmp_path / "r2.md", "--metric", "acc"),
                       "--metric", "no item-score files")
