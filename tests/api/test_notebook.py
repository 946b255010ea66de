"""examples/reanalysis.ipynb runs in a real Jupyter kernel from a clean state, and shows what it promises: the runs
and the comparison as the report's tables, the command line's summary, a DataFrame, the plan and an Altair chart."""

from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "reanalysis.ipynb"


def _outputs(cell: dict) -> dict[str, str]:
    """Every output of a code cell by MIME type (stdout under "stream"), as text."""
    found: dict[str, str] = {}
    for output in cell.get("outputs", []):
        assert output["output_type"] != "error", "".join(output.get("traceback", []))
        if output["output_type"] == "stream":
            found["stream"] = found.get("stream", "") + output["text"]
        for mime, data in output.get("data", {}).items():
            found[mime] = data if isinstance(data, str) else "".join(data) if isinstance(data, list) else str(data)
    return found


@pytest.mark.slow
def test_the_reanalysis_notebook_runs_and_shows_its_results(tmp_path):
    import nbclient  # here, not at the top: only this slow test needs Jupyter's client and its kernel machinery
    import nbformat

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    code = [_outputs(cell) for cell in notebook.cells if cell.cell_type == "code"]
    load, compare, printed, frame, plan, plot, report = code
    assert load["text/plain"].startswith("Runs(6 runs of 2 arms (baseline, gatedv) on dev)")
    assert '<table id="table-runs">' in load["text/html"]
    assert compare["text/plain"].startswith("Comparison(gatedv vs baseline: ")
    assert "; 3 seed pairs, 48 documents)" in compare["text/plain"]
    assert all(f'<table id="table-{key}">' in compare["text/html"] for key in ("verdicts", "comparison"))
    assert printed["stream"].startswith("gatedv vs baseline: 3 paired seeds, 48 documents\n\nverdict: ")
    assert "<table" in frame["text/html"] and "delta_p" in frame["text/html"]
    assert plan["text/plain"].startswith("Plan(gatedv vs baseline: ") and '<table id="table-plan">' in plan["text/html"]
    assert "vegaEmbed" in plot["text/html"] and "VConcatChart" in plot["text/plain"]  # Altair's inline chart
    assert report["text/plain"] == "'report.html'"
