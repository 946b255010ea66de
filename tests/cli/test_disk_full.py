"""A full disk (ENOSPC, injected where every file is written: `gatedv_stats.core.atomic`) ends every command that
writes as one `error:` line and exit 4, naming what could not be written and what is kept; no part of a file is left
under its final name and every earlier output is intact. A real small file system: tests/core/test_full_filesystem.py.
"""

from __future__ import annotations

import shutil

import pytest

from experiments import write_runs
from gatedv_stats.io.runrecords import read_run_record
from gatedv_stats.testing import ppls_with_moments
from harness_logs import MC_LINES, many_tasks_run, write_log
from helpers import full_disk_line, invoke, tiny_grid, tree
from trainer.run.checkpoint import load_checkpoint

TRAIN = ("--config", "tiny", "--seed", "1", "--batch-size", "2", "--updates", "4", "--eval-every", "2",
         "--device", "cpu")


@pytest.fixture(scope="module")
def trained(prepared_data, tmp_path_factory):
    """A tiny run stopped at update 2 of 4 (checkpoint, curve, run.json) and its dev loss file."""
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    assert invoke("train", "--data", prepared_data, *TRAIN, "--out", run_dir, "--stop-after", "2").exit_code == 0
    assert invoke("evaluate", run_dir / "checkpoint.pt", "--out", run_dir / "dev.parquet",
                  "--device", "cpu").exit_code == 0
    return run_dir


@pytest.fixture
def run_copy(trained, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    return copy


@pytest.mark.slow  # trains, evaluates or prepares data
def test_train_keeps_its_checkpoint_and_says_how_to_go_on(run_copy, prepared_data, full_disk):
    before = tree(run_copy)
    full_disk(after=0)
    result = invoke("train", "--data", prepared_data, *TRAIN, "--out", run_copy, "--resume")
    full_disk_line(result, f"{run_copy}: no space left on the device writing {run_copy / 'run.json'} after update 2",
                   "its checkpoint of update 2 is kept", "gatedv train --resume")
    assert tree(run_copy) == before


@pytest.mark.slow  # trains, evaluates or prepares data
def test_train_stopped_at_a_later_checkpoint_keeps_the_earlier_one_verifiable(run_copy, prepared_data, full_disk):
    """The disk fills while the checkpoint of update 4 is written: the one of update 2 stays, verified against
    run.json, and the run resumes from it once there is room."""
    state = full_disk(after=200_000)  # room for the records and the curve, not for another checkpoint
    result = invoke("train", "--data", prepared_data, *TRAIN, "--out", run_copy, "--resume")
    full_disk_line(result, f"writing {run_copy / 'checkpoint.pt'} after update 4", "its checkpoint of update 2 is kept")
    assert state.writes >= 1
    assert load_checkpoint(run_copy / "checkpoint.pt").extra["update"] == 2  # verified against run.json
    assert read_run_record(run_copy)["status"] == "failed"
    assert not [path for path in run_copy.iterdir() if path.name.endswith(".tmp")]
    state.budget = None  # space freed
    assert invoke("train", "--data", prepared_data, *TRAIN, "--out", run_copy, "--resume").exit_code == 0
    assert read_run_record(run_copy)["status"] == "finished"


@pytest.mark.slow  # trains, evaluates or prepares data
def test_a_new_run_writes_nothing(prepared_data, tmp_path, full_disk):
    full_disk(after=0)
    result = invoke("train", "--data", prepared_data, *TRAIN, "--out", tmp_path / "new")
    full_disk_line(result, "no checkpoint was written yet")
    assert tree(tmp_path) == {}


@pytest.mark.slow  # trains, evaluates or prepares data
def test_evaluate_keeps_the_loss_file_written_before(run_copy, full_disk):
    before = tree(run_copy)
    full_disk(after=0)
    result = invoke("evaluate", run_copy / "checkpoint.pt", "--out", run_copy / "dev.parquet", "--device", "cpu")
    full_disk_line(result, f"{run_copy / 'dev.parquet'}: could not be written", "the previous dev.parquet is kept")
    assert tree(run_copy) == before


@pytest.mark.slow  # trains, evaluates or prepares data
def test_sweep_names_the_run_and_what_is_kept(prepared_data, tmp_path, full_disk):
    grid = tmp_path / "grid.toml"
    grid.write_text(tiny_grid(prepared_data, updates=2, eval_every=2, batch_size=2))
    before = tree(tmp_path)
    full_disk(after=0)
    result = invoke("sweep", grid, "--device", "cpu", "--jobs", "1")
    full_disk_line(result, "sweep grid: 1 of 1 runs did not finish", "no checkpoint was written yet")
    assert tree(tmp_path) == before


@pytest.mark.slow  # trains, evaluates or prepares data
def test_prepare_leaves_the_data_directory_as_it_was(prepared_data, tmp_path, full_disk):
    data = tmp_path / "data"
    shutil.copytree(prepared_data, data)
    before = tree(data)
    full_disk(after=0)
    result = invoke("prepare", "builtin:python-stdlib", "--out", data, "--eval-docs", "8", "--max-docs", "100",
                    "--force")
    full_disk_line(result, "could not be written")
    assert tree(data) == before


@pytest.mark.slow
def test_export_tasks_writes_nothing(prepared_data, tmp_path, full_disk):
    full_disk(after=0)
    full_disk_line(invoke("export-tasks", prepared_data, "--eval-set", "heldout", "--out", tmp_path / "tasks"),
                   "could not be written")
    assert tree(tmp_path) == {}


def test_report_keeps_the_report_written_before(tmp_path, full_disk):
    runs = tmp_path / "runs"
    write_runs(runs, {"baseline": ppls_with_moments(59.1, 0.5, 3), "gatedv": ppls_with_moments(57.9, 0.8, 3)},
               eval_set="heldout", lr=0.001)
    out = tmp_path / "report.md"
    assert invoke("report", runs, "--out", out, "--samples", "100").exit_code == 0
    before = tree(tmp_path)
    full_disk(after=0)
    full_disk_line(invoke("report", runs, "--out", out, "--samples", "100"), "could not be written", "is kept")
    assert tree(tmp_path) == before


def test_import_lm_eval_keeps_the_files_imported_before(tmp_path, full_disk):
    harness = many_tasks_run(tmp_path / "harness", n_tasks=3, n_items=20)
    out = tmp_path / "imported"
    assert invoke("import", "lm-eval", harness, "--arm", "a", "--out", out).exit_code == 0
    before = tree(tmp_path)
    full_disk(after=0)
    full_disk_line(invoke("import", "lm-eval", harness, "--arm", "a", "--out", out),
                   f"{out / 'task00.parquet'}: could not be written", "the previous task00.parquet is kept")
    assert tree(tmp_path) == before


def test_import_lm_eval_filling_the_disk_half_way_removes_what_it_added(tmp_path, full_disk):
    """The disk fills after the first task's file: the import removes the file it added, the earlier one stays."""
    harness = many_tasks_run(tmp_path / "harness", n_tasks=3, n_items=20)
    assert invoke("import", "lm-eval", harness, "--arm", "a", "--out", tmp_path / "whole").exit_code == 0
    out = tmp_path / "imported"
    earlier = write_log(tmp_path / "mc.jsonl", MC_LINES)
    assert invoke("import", "lm-eval", earlier, "--arm", "a", "--out", out / "earlier.parquet").exit_code == 0
    before = tree(out)
    state = full_disk(after=(tmp_path / "whole" / "task00.parquet").stat().st_size)  # room for one file
    full_disk_line(invoke("import", "lm-eval", harness, "--arm", "a", "--out", out),
                   f"{out / 'task01.parquet'}: could not be written", "nothing is left under its name")
    assert state.writes == 1 and tree(out) == before


def test_a_full_disk_past_the_atomic_writes_is_exit_4_too(tmp_path, monkeypatch):
    """A library's own write (outside gatedv_stats.core.atomic) that hits ENOSPC or EDQUOT: the CLI maps the raw
    OSError to the same one line and exit 4."""
    import errno
    import os

    import gatedv_stats as gv

    for number in (errno.ENOSPC, errno.EDQUOT):
        def report(*args, number=number, **kwargs):
            raise OSError(number, os.strerror(number), str(tmp_path / "cache.bin"))

        monkeypatch.setattr(gv, "report", report)
        result = invoke("report", tmp_path, "--out", tmp_path / "r.md")
        assert result.exit_code == 4, result.output
        assert result.stderr == (f"error: {tmp_path / 'cache.bin'}: could not be written: {os.strerror(number)}; the "
                                 "outputs written before are kept whole (none is left half written): free space on "
                                 "its file system, then run the same command again\n")


def test_noise_floor_and_decide_write_nothing_and_keep_the_files_before(tmp_path, full_disk):
    aa, study = tmp_path / "aa", tmp_path / "study"
    write_runs(aa, {"baseline": [30.0, 30.3, 29.8, 30.1]}, eval_set="heldout", lr=0.001)
    write_runs(study, {"baseline": [30.0], "gatedv": [29.0]}, eval_set="heldout", lr=0.001)
    assert invoke("noise-floor", aa, "--out", tmp_path / "floor.json").exit_code == 0
    before = tree(tmp_path)
    full_disk(after=0)
    full_disk_line(invoke("noise-floor", aa, "--out", tmp_path / "floor.json"), "could not be written", "is kept")
    decided = invoke("decide", study, "--baseline-arm", "baseline", "--variant-arm", "gatedv", "--design",
                     tmp_path / "design.json", "--max-seeds", "4", "--noise-floor", tmp_path / "floor.json")
    full_disk_line(decided, "could not be written")
    assert tree(tmp_path) == before


@pytest.mark.slow
def test_demo_writes_nothing(tmp_path, full_disk):
    full_disk(after=0)
    full_disk_line(invoke("demo", "--out", tmp_path / "demo", "--updates", "2", "--seeds", "2", "--device", "cpu"),
                   "could not be written")
    assert tree(tmp_path) == {}  # not one file, whole or partial
