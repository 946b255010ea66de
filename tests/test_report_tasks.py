"""The report's "Downstream tasks" section: present only when the inputs hold item-score files."""

from __future__ import annotations

from pathlib import Path

from gatedv_stats.analysis.experiment import analyze_experiment
from gatedv_stats.io.discovery import discover_inputs
from gatedv_stats.report.build import build_report
from gatedv_stats.report.render import write_report
from gatedv_stats.testing import ppls_with_moments
from item_runs import write_tasks
from test_report import write_runs


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
    assert table.groups[0].rows[0][8].text == analysis.tasks.results[0].verdict_text
    assert section.figures[0].key == "tasks-forest" and section.figures[0].spec["facet"]
    text = write_report([tmp_path], tmp_path / "report.md", "md").read_text()
    assert "Downstream tasks" in text and "macro-average" in text


def test_without_item_scores_there_is_no_such_section(tmp_path):
    analysis = analyze_experiment(discover_inputs([experiment(tmp_path, False)]))
    assert analysis.tasks is None
    assert "tasks" not in [section.key for section in build_report(analysis).sections]
