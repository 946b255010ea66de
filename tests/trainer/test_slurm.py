"""`gatedv sweep --executor slurm` against a real Slurm (one node, this machine: `bash bench/slurm/setup.sh`): a tiny
grid of 2 variants x 2 seeds pending and running in `--status`, a job cancelled mid-run whose resubmission resumes
from its checkpoint and ends bit-identical to an uninterrupted run, a resubmission of the finished grid that submits
nothing, its report, and a job cut by a 1-minute time limit that requeues and finishes. Skipped where Slurm is
absent or does not answer, failed there under GATEDV_REQUIRE_SYSTEM_TOOLS=1. About 2 minutes each on 2 busy
cores."""

import json
import math
import os
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from conftest import REQUIRE_SYSTEM_TOOLS, require_program
from helpers import invoke, sweep_json
from trainer.grid.experiment import load_experiment
from trainer.run.checkpoint import load_checkpoint
from trainer.run.recipe import Runtime
from trainer.run.train import train

pytestmark = pytest.mark.slow

INSTALL = "bash bench/slurm/setup.sh"
GRID = """
name = "rehearsal"
data = "{data}"
config = "tiny"
variants = {variants}
seeds = {seeds}
lrs = [0.004]
updates = {updates}
eval_every = {eval_every}
batch_size = 2
out = "{out}"
"""
UPDATES = 300
EVAL_EVERY = 30


@pytest.fixture(scope="module")
def slurm_cluster():
    """Slurm's commands, and a cluster whose node answers."""
    for program in ("sbatch", "sinfo", "squeue", "sacct", "scancel"):
        require_program(program, INSTALL)
    answer = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=60, check=False)
    if answer.returncode != 0 or not {"idle", "mix", "alloc"} & set(answer.stdout.split()):
        reason = f"the Slurm cluster does not answer: {answer.stderr.strip() or answer.stdout.strip()} " \
                 f"(start it with: {INSTALL})"
        if os.environ.get(REQUIRE_SYSTEM_TOOLS) == "1":
            pytest.fail(f"{reason}; {REQUIRE_SYSTEM_TOOLS}=1 requires it", pytrace=False)
        pytest.skip(reason)


def _grid(tmp_path, data, name, variants, seeds, updates, eval_every):
    path = tmp_path / f"{name}.toml"
    path.write_text(GRID.format(data=data, variants=json.dumps(variants), seeds=json.dumps(seeds), updates=updates,
                                eval_every=eval_every, out=tmp_path / name))
    return path


def _states(path):
    return {(run["variant"], run["seed"]): run for run in sweep_json(path, "--status")["runs"]}


def _wait(path, done, what, timeout):
    """Poll --status until `done(states)`; the queue and the states in the failure otherwise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = _states(path)
        if done(states):
            return states
        time.sleep(0.5)
    queue = subprocess.run(["squeue"], capture_output=True, text=True, check=False).stdout
    raise AssertionError(f"{what} not within {timeout} s: {[(k, r['state'], r['step']) for k, r in states.items()]}"
                         f"\n{queue}")


def _train_on_one_thread(path, out, stop_after=None):
    """The grid's first run trained here as its job trains it: on the CPU, on one thread (its allocation)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train(load_experiment(path).runs()[0].spec, out, runtime=Runtime(device="cpu", progress=False),
                     stop_after=stop_after)
    finally:
        torch.set_num_threads(threads)


def _submit(path, *args):
    return {(run["variant"], run["seed"]): run["job_id"]
            for run in sweep_json(path, "--executor", "slurm", *args)["runs"]}


def test_a_grid_through_slurm_cancelled_resumed_bit_identical_and_reported(slurm_cluster, prepared_data, tmp_path):
    path = _grid(tmp_path, prepared_data, "grid", ["baseline", "gatedv"], [1, 2], UPDATES, EVAL_EVERY)
    jobs = _submit(path, "--time", "10", "--array-parallelism", "2")  # two at a time: two wait
    array = jobs["baseline", 1].split("_")[0]
    assert sorted(jobs.values()) == [f"{array}_{task}" for task in range(4)]
    seen = _wait(path, lambda states: {"pending", "running"} <= {run["state"] for run in states.values()},
                 "one run running while another is pending", 60)
    assert {run["state"] for run in seen.values()} <= {"pending", "running"}

    cancelled = ("baseline", 1)  # once it has a checkpoint past update 0
    _wait(path, lambda states: (states[cancelled]["step"] or 0) > 0, "a first checkpoint", 120)
    subprocess.run(["scancel", jobs[cancelled]], check=True)
    reference = tmp_path / "reference"  # the same run, uninterrupted, while the jobs go on
    _train_on_one_thread(path, reference)
    middle = _wait(path, lambda states: all(run["state"] in ("finished", "failed") for run in states.values()),
                   "every run finished or failed", 240)
    assert middle[cancelled]["state"] == "failed" and os.path.isfile(middle[cancelled]["log"])
    assert 0 < middle[cancelled]["step"] < UPDATES
    assert [key for key, run in middle.items() if run["state"] == "finished"] == [
        ("baseline", 2), ("gatedv", 1), ("gatedv", 2)]

    again = _submit(path)
    assert [key for key, job_id in again.items() if job_id] == [cancelled] and "_" not in again[cancelled]
    after = _wait(path, lambda states: all(run["state"] == "finished" for run in states.values()),
                  "the resumed run finished", 180)
    assert after[cancelled]["job_id"] == again[cancelled] and after[cancelled]["step"] == UPDATES
    assert set(_submit(path).values()) == {None}  # a finished grid: nothing to submit

    run_dir = tmp_path / "grid" / "baseline" / "lr0.004" / "seed1"
    assert json.loads((run_dir / "job.json").read_text())["previous_job_ids"] == [jobs[cancelled]]
    assert json.loads((run_dir / "run.json").read_text())["threads"] == 1
    pd.testing.assert_frame_equal(pd.read_csv(run_dir / "curve.csv"), pd.read_csv(reference / "curve.csv"),
                                  check_exact=True)
    a = load_checkpoint(run_dir / "checkpoint.pt").model.state_dict()
    b = load_checkpoint(reference / "checkpoint.pt").model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)
    for key in after:
        assert {"dev.parquet", "heldout.parquet"} <= {p.name for p in (tmp_path / "grid" / key[0] / "lr0.004" /
                                                                        f"seed{key[1]}").iterdir()}
    report = tmp_path / "report.md"
    result = invoke("report", tmp_path / "grid", "--format", "md", "--samples", "100", "--out", report)
    assert result.exit_code == 0, result.stderr
    assert "gatedv" in report.read_text()



def test_a_job_cut_by_its_time_limit_requeues_and_finishes(slurm_cluster, prepared_data, tmp_path):
    # Slurm's signal comes 15-45 s into each start of a 1-minute job, so a run that trains for a minute on one
    # thread here (measured on 100 updates of the same recipe) is cut at least once
    calibration = _grid(tmp_path, prepared_data, "speed", ["gatedv"], [3], UPDATES, EVAL_EVERY)
    speed = _train_on_one_thread(calibration, tmp_path / "speed-run", stop_after=100)
    updates = EVAL_EVERY * math.ceil(60 * 100 / speed.train_seconds / EVAL_EVERY)
    path = _grid(tmp_path, prepared_data, "long", ["gatedv"], [3], updates, EVAL_EVERY)
    (job_id,) = _submit(path, "--time", "1").values()
    (finished,) = _wait(path, lambda states: all(run["state"] == "finished" for run in states.values()),
                        f"a run of {updates} updates with a 1-minute limit finished", 600).values()
    assert finished["step"] == updates and finished["job_id"] == job_id
    job = json.loads((tmp_path / "long" / "gatedv" / "lr0.004" / "seed3" / "job.json").read_text())
    assert "#SBATCH --signal=USR2@15" in (Path(job["folder"]) / f"{job_id}_submission.sh").read_text()
    log = Path(job["stdout"]).read_text()
    assert "Requeued job" in log and "Job completed successfully" in log
    assert {"dev.parquet", "heldout.parquet"} <= {p.name for p in (tmp_path / "long" / "gatedv" / "lr0.004" /
                                                                    "seed3").iterdir()}
