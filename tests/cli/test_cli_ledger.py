"""`gatedv ledger LEDGER add | show` and `gatedv report --ledger`: the entries as text and JSON, bad input as one
`error:` line and exit 2 (a changed procedure, a tampered history naming its first bad entry), and two real processes
adding to one ledger at once."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from gatedv_stats.io.ledgerfile import read_ledger
from gatedv_stats.io.lossfiles import write_loss_file
from gatedv_stats.testing import synthetic_runs
from helpers import assert_input_error, full_disk_line, invoke, invoke_json, tree

ROOT = Path(__file__).resolve().parents[2]
ARMS = {"baseline": [30.0, 30.5, 29.8], "good": [29.1, 29.6, 28.9], "bad": [31.0, 31.4, 30.9]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The runs' loss files, written once for the module: its tests only read them."""
    folder = tmp_path_factory.mktemp("runs")
    for run in synthetic_runs(ARMS, n_docs=40, rng_seed=2, noise=0.01):
        write_loss_file(folder / f"{run.arm}-{run.seed}.parquet", run.docs, {**run.meta, "eval_set": "heldout"})
    return folder


def arm(runs, name):
    return sorted(str(path) for path in runs.glob(f"{name}-*.parquet"))


def add(ledger, runs, candidate, against, *options):
    return invoke("ledger", ledger, "add", "--candidate", *arm(runs, candidate), "--against", *arm(runs, against),
                  *options)


def test_add_and_show_as_text_and_json(runs, tmp_path):
    ledger = tmp_path / "study.ledger"
    result = add(ledger, runs, "good", "baseline", "--note", "wider gate")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("step 1: good vs baseline: keep (one-sided p = ")
    assert "LOND at FDR ≤ 0.05" in result.stdout and "note: wider gate" in result.stdout
    entry = invoke_json("ledger", ledger, "add", "--candidate", *arm(runs, "bad"), "--against", *arm(runs, "good"))
    assert (entry["step"], entry["decision"], entry["procedure"]) == (2, "discard", "lond")
    assert entry["candidate_files"][0]["path"] == arm(runs, "bad")[0] and len(entry["hash"]) == 64
    shown = invoke("ledger", ledger, "show")
    assert shown.exit_code == 0, shown.output
    assert "2 entries, 1 kept" in shown.stdout and "chain checked" in shown.stdout
    assert "good (1)" in shown.stdout.splitlines()[-2] and "note, step 1: wider gate" in shown.stdout
    history = invoke_json("ledger", ledger, "show")
    assert [item["decision"] for item in history["entries"]] == ["keep", "discard"]
    assert history["head"] == entry["hash"] and history["running_best"] == [1, 1]
    report = invoke("report", runs, "--ledger", ledger, "--format", "md", "--out", tmp_path / "report.md")
    assert report.exit_code == 0, report.output
    assert "## Research ledger" in (tmp_path / "report.md").read_text()


def test_a_new_ledger_takes_its_procedure_and_level_from_the_first_add(runs, tmp_path):
    ledger = tmp_path / "fwer.ledger"
    entry = invoke_json("ledger", ledger, "add", "--candidate", *arm(runs, "good"), "--against",
                        *arm(runs, "baseline"), "--procedure", "alpha-spending", "--alpha", "0.1")
    assert entry["parameters"]["procedure"] == "alpha-spending" and entry["alpha"] == 0.1
    assert entry["wealth"] == pytest.approx(0.1 - entry["level"])


def test_bad_input_is_one_line_and_exit_2(runs, tmp_path):
    ledger = tmp_path / "study.ledger"
    assert add(ledger, runs, "good", "baseline").exit_code == 0
    assert_input_error(add(ledger, runs, "bad", "good", "--procedure", "lord++"), "--procedure:",
                       "was created with lond at α = 0.05")
    assert_input_error(add(ledger, runs, "bad", "good", "--alpha", "0.1"), "--alpha:", "α is fixed")
    assert_input_error(add(tmp_path / "new.ledger", runs, "bad", "good", "--procedure", "bh"), "--procedure:",
                       "expected one of lond, e-lond, addis, lord++, saffron, alpha-spending")
    assert_input_error(add(tmp_path / "new.ledger", runs, "bad", "good", "--alpha", "2"), "--alpha:")
    assert_input_error(invoke("ledger", ledger, "add", "--candidate", tmp_path / "nope.parquet", "--against",
                              *arm(runs, "good")), "nope.parquet")
    assert_input_error(invoke("ledger", ledger, "add", "--candidate", arm(runs, "bad")[0], "--against",
                              arm(runs, "good")[0]), "no test over training seeds")
    assert_input_error(invoke("ledger", tmp_path / "absent.ledger", "show"), "no ledger there")
    assert_input_error(invoke("ledger", tmp_path, "show"), "no ledger there")
    assert len(invoke_json("ledger", ledger, "show")["entries"]) == 1  # nothing refused was entered
    assert not (tmp_path / "new.ledger").exists()


def test_a_tampered_ledger_is_refused_naming_the_entry(runs, tmp_path):
    ledger = tmp_path / "study.ledger"
    for candidate, against in (("good", "baseline"), ("bad", "good"), ("bad", "baseline")):
        assert add(ledger, runs, candidate, against).exit_code == 0
    with sqlite3.connect(ledger) as connection:
        connection.execute("UPDATE entries SET decision = 'keep' WHERE step = 2")
    assert_input_error(invoke("ledger", ledger, "show"), "entry 2 is not as it was written", "cannot be trusted")
    assert_input_error(add(ledger, runs, "good", "baseline"), "entry 2 is not as it was written")
    assert_input_error(invoke("report", runs, "--ledger", ledger, "--out", tmp_path / "r.md"), "entry 2")


@pytest.mark.slow
def test_two_processes_adding_at_once_both_land_in_one_chain(runs, tmp_path):
    ledger = tmp_path / "shared.ledger"
    commands = [[sys.executable, str(ROOT / "cli.py"), "ledger", str(ledger), "add", "--candidate",
                 *arm(runs, candidate), "--against", *arm(runs, reference), "--note", f"process {k}", "--json"]
                for k, (candidate, reference) in enumerate((("good", "baseline"), ("bad", "baseline"),
                                                            ("bad", "good"), ("baseline", "good")))]
    processes = [subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for command in commands]
    outputs = [process.communicate(timeout=300) for process in processes]
    assert all(process.returncode == 0 for process in processes), [err for _, err in outputs]
    steps = sorted(json.loads(out)["step"] for out, _ in outputs)
    assert steps == [1, 2, 3, 4]
    history = invoke_json("ledger", ledger, "show")  # the chain checked, each decision replayed
    assert sorted(entry["note"] for entry in history["entries"]) == [f"process {k}" for k in range(4)]
    from gatedv_stats.stats.online_fdr import OnlineProcedure, online_decisions

    replayed = online_decisions([entry["p_value"] for entry in history["entries"]],
                                OnlineProcedure.from_dict(history["procedure"]))
    assert [(d.level, d.wealth) for d in replayed] == [(e["level"], e["wealth"]) for e in history["entries"]]


@pytest.mark.slow
def test_a_report_with_a_ledger_compiles_with_pdflatex(runs, tmp_path, pdflatex):
    ledger = tmp_path / "study.ledger"
    assert add(ledger, runs, "good", "baseline", "--note", "λ-gate & 50% wider_v2").exit_code == 0
    assert add(ledger, runs, "bad", "good").exit_code == 0
    assert invoke("report", runs, "--ledger", ledger, "--out", tmp_path / "report.tex").exit_code == 0
    done = subprocess.run([pdflatex, "-interaction=nonstopmode", "-halt-on-error", "report.tex"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "Overfull \\hbox" not in done.stdout, "a table or paragraph runs off the page"


@pytest.fixture
def full_ledger(monkeypatch):
    """A file system that fills up under the ledger: once called, every connection SQLite opens may not grow its
    database (SQLite's `max_page_count`), so a write that needs a new page fails with SQLite's own "database or disk
    is full"; `monkeypatch.undo()` frees the space. Returns the monkeypatch."""
    connect = sqlite3.connect

    def full(*args, **kwargs):
        connection = connect(*args, **kwargs)
        pages = connection.execute("PRAGMA page_count").fetchone()[0]
        connection.execute(f"PRAGMA max_page_count = {max(pages, 1)}")
        return connection

    def fill():
        monkeypatch.setattr(sqlite3, "connect", full)
        return monkeypatch

    return fill


def test_a_full_disk_during_add_keeps_the_ledger_as_it_was(runs, tmp_path, full_ledger):
    ledger = tmp_path / "study.ledger"
    assert add(ledger, runs, "good", "baseline").exit_code == 0
    before, history = tree(tmp_path), read_ledger(ledger)
    filled = full_ledger()
    line = full_disk_line(add(ledger, runs, "bad", "good", "--note", "a long note " * 2000),
                          f"{ledger}: could not be written", "database or disk is full",
                          "the entry was not added and the ledger's earlier entries are kept as they were")
    assert line.endswith("free space on its file system, then run the same command again")
    assert tree(tmp_path) == before and read_ledger(ledger) == history
    filled.undo()  # space freed
    entry = invoke_json("ledger", ledger, "add", "--candidate", *arm(runs, "bad"), "--against", *arm(runs, "good"))
    assert entry["step"] == 2 and entry["prev_hash"] == history[1][-1]["hash"]
