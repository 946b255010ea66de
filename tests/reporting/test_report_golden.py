"""The Markdown report of a fixed synthetic experiment, compared byte for byte with tests/golden/report.md.

Paths under the experiment's temporary directory and SHA-256 digests (Parquet bytes depend on the pyarrow
version) are replaced by placeholders; everything else, every number and word, must match. After a deliberate
change to the report, regenerate the file with
`GATEDV_UPDATE_GOLDEN=1 python -m pytest tests/reporting/test_report_golden.py` and review the diff.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import jsonschema
import pytest

from experiments import medium_experiment, report, write_curves, write_runs

GOLDEN = Path(__file__).parents[1] / "golden" / "report.md"


def golden_experiment(root: Path) -> Path:
    """The medium experiment (Tables 2, 3, 6, 7, 9), curves at two rates and a three-arm ablation."""
    medium_experiment(root)
    write_curves(root / "curves" / "curve.csv", {"baseline": 20.5, "gatedv": 20.0, "g2-headwise": 20.6},
                 [1, 2, 3], lr=3e-4)
    write_runs(root, {"baseline": [58.1, 58.9, 58.5], "gatedv": [57.7, 58.0, 58.2], "q-silu": [59.4, 59.8, 59.1]},
               eval_set="dev", lr=0.0048, seeds=[20270201, 12, 13], seed=7)
    return root


def normalise(text: str, root: Path) -> str:
    for path in {str(root.resolve()), str(root)}:
        text = text.replace(path.replace("_", "\\_"), "<ROOT>").replace(path, "<ROOT>")  # Markdown escapes "_"
    return re.sub(r"\b[0-9a-f]{64}\b", "<SHA256>", text)


def test_markdown_report_matches_the_golden_file(tmp_path):
    root = golden_experiment(tmp_path / "experiment")
    text = normalise(report([root], tmp_path / "report.md", "md"), tmp_path / "experiment")
    if os.environ.get("GATEDV_UPDATE_GOLDEN"):
        GOLDEN.write_text(text, encoding="utf-8")
    assert text == GOLDEN.read_text(encoding="utf-8")


@pytest.mark.slow
def test_every_figure_of_the_golden_and_the_task_reports_is_valid_vega_lite(tmp_path):
    """Reports skip altair's schema check for speed; every kind of figure they draw is checked here instead."""
    from gatedv_stats.analysis.experiment import analyze_experiment
    from gatedv_stats.io.discovery import discover_inputs
    from gatedv_stats.reporting.build import build_report
    from gatedv_stats.reporting.plots import validate_spec
    from item_runs import write_tasks

    root = golden_experiment(tmp_path / "experiment")
    write_tasks(root / "tasks", n_items=30)
    figures = build_report(analyze_experiment(discover_inputs([root]))).figures
    assert len(figures) >= 5 and any("task" in figure.key for figure in figures)
    for figure in figures:  # a few rows of each inlined data set are enough to check the shape, and much faster
        validate_spec({**figure.spec, "datasets": {name: rows[:3] for name, rows in figure.spec["datasets"].items()}})
    broken = {**figures[0].spec, "mark": "no-such-mark"}
    with pytest.raises(jsonschema.ValidationError):
        validate_spec(broken)
