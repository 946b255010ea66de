"""A grid's cluster jobs: RUN_DIR/job.json sealed with the SHA-256 of its content and checked when read (a damaged
one is one `error:` line, an older unsealed one read as before), and a job that finds its run's lock held by another
process leaves the run to it in one line and exit 2, without a traceback or a file touched."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path

import pytest

from gatedv_stats.core.locks import RUN_LOCK_NAME
from gatedv_stats.io.runrecords import JOB_FILE_NAME, JOB_SEAL, read_job_record, write_job_record
from helpers import assert_input_error, invoke, invoke_json, tiny_grid, tree
from trainer.grid.cluster import RunJob
from trainer.grid.experiment import load_experiment
from trainer.run.recipe import Runtime

HOLDER = {"pid": 4242, "host": "node-7", "since": "2026-01-02 03:04:05"}
LEFT = ("is being trained or evaluated by pid 4242 on node-7 (since 2026-01-02 03:04:05); this job leaves the run to "
        "it and ends")


@pytest.fixture
def grid(prepared_data, tmp_path) -> Path:
    path = tmp_path / "jobs.toml"
    path.write_text(tiny_grid(prepared_data, name="jobs", lrs=[0.004], updates=2, eval_every=2, batch_size=2,
                                  eval_sets=["dev"]))
    return path


@contextlib.contextmanager
def held_by_another_process(run_dir: Path):
    """RUN_DIR's lock held as another process holds it (its own open file, locked), recording HOLDER."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / RUN_LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        os.write(fd, json.dumps(HOLDER).encode())
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def test_job_json_is_sealed_and_an_unsealed_one_is_read_as_before(tmp_path):
    record = {"executor": "local", "job_id": "123", "stderr": str(tmp_path / "123.err"), "previous_job_ids": []}
    write_job_record(tmp_path, record)
    assert JOB_SEAL in json.loads((tmp_path / JOB_FILE_NAME).read_text())
    assert read_job_record(tmp_path) == record
    (tmp_path / JOB_FILE_NAME).write_text(json.dumps(record))  # written before job records were sealed
    assert read_job_record(tmp_path) == record


@pytest.mark.parametrize(("damage", "says"), [
    (lambda text: text.replace('"job_id": "123"', '"job_id": "124"'),
     "damaged: its content does not match the sha256 it records (sha256)"),
    (lambda text: text[:len(text) // 2], "cannot read JSON"),
    (lambda text: "", "cannot read JSON"),
], ids=["edited", "truncated", "emptied"])
def test_a_damaged_job_json_is_one_line_naming_it_and_what_to_do(grid, damage, says):
    run = load_experiment(grid).runs()[0]
    write_job_record(run.run_dir, {"executor": "local", "job_id": "123", "stderr": str(run.run_dir / "123.err")})
    path = run.run_dir / JOB_FILE_NAME
    path.write_text(damage(path.read_text()))
    assert_input_error(invoke("sweep", grid, "--status"), f"error: {path}: ", says,
                       "restore an intact copy, or move it away: the run then counts as never submitted")


def test_a_job_whose_run_another_process_holds_leaves_it_in_one_line(grid, monkeypatch, capfd):
    for name, value in {"SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": "7", "SLURM_NTASKS": "1"}.items():
        monkeypatch.setenv(name, value)
    run = load_experiment(grid).runs()[0]
    with held_by_another_process(run.run_dir):
        before = tree(run.run_dir)
        with pytest.raises(SystemExit) as ended:
            RunJob(Runtime(device="cpu", progress=False))(run, {})
        assert tree(run.run_dir) == before  # nothing trained, evaluated or recorded
    assert ended.value.code == 2
    assert capfd.readouterr().err.splitlines() == [f"error: {run.run_dir}: {LEFT}: see the run's state with gatedv "
                                                   "sweep EXPERIMENT --status, and submit it again if that process "
                                                   "ends without finishing it"]


@pytest.mark.slow  # a local job is a new Python process (torch, submitit)
def test_a_local_job_whose_run_is_held_ends_with_one_line_in_its_log(grid):
    run = load_experiment(grid).runs()[0]
    with held_by_another_process(run.run_dir):
        submitted = invoke_json("sweep", grid, "--executor", "local", "--device", "cpu")["runs"][0]
        deadline = time.monotonic() + 180
        while (status := invoke_json("sweep", grid, "--status")["runs"][0])["state"] != "failed":
            assert status["state"] in ("pending", "running") and time.monotonic() < deadline, status
            time.sleep(0.5)
    log = Path(status["log"]).read_text()
    errors = [line for line in log.splitlines() if "error" in line.lower()]
    assert status["job_id"] == submitted["job_id"] and "Traceback" not in log
    assert len(errors) == 1 and errors[0].startswith(f"error: {run.run_dir}: {LEFT}"), log
    assert not (run.run_dir / "run.json").exists()
