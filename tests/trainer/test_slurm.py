"""`gatedv sweep --executor slurm` against a real Slurm (one node, this machine: `bash bench/slurm/setup.sh`): a tiny
grid of 2 variants x 2 seeds pending and running in `--status`, a job cancelled mid-run whose resubmission resumes
from its checkpoint and ends bit-identical to an uninterrupted run, a resubmission of the finished grid that submits
nothing, its report, and a job cut by a 1-minute time limit that requeues and finishes; the sequential sweep
(`--until-decided`) in rounds of job arrays, and one of its rounds' jobs cancelled and resumed by the same command
to the designs of an uninterrupted sweep. Skipped where Slurm is absent or does not answer, failed there under
GATEDV_REQUIRE_SYSTEM_TOOLS=1. About 2 minutes each on 2 busy cores."""

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from conftest import REQUIRE_SYSTEM_TOOLS, require_program
from helpers import designs, invoke, invoke_json, sweep_json, tiny_grid
from trainer.grid.experiment import load_experiment
from trainer.run.checkpoint import load_checkpoint
from trainer.run.recipe import Runtime
from trainer.run.train import train

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
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


# `gatedv ARGS` as a new process, looking at a round's jobs every second instead of every 30 s
POLLED_EVERY_SECOND = """
import sys
from trainer.grid import cluster
cluster.POLL_SECONDS["slurm"] = 1.0
sys.argv = ["gatedv", *sys.argv[1:]]
import cli
cli.app()
"""
# 4 updates of the tiny model; with the floor of 4 A/A runs and a SESOI of 0.2 nats, one feed-forward unit stops for
# futility at its first seed pair (T -1.3 below the boundary's -0.6), the SiLU value activation continues (T 1.7,
# then 3.6 below 4.4) and is better at its third (T 5.2 above 2.6, its interval outside the equivalence region)
SEQUENTIAL_RECIPE = {"lrs": [0.003], "updates": 4, "eval_every": 4, "batch_size": 2}
SEQUENTIAL_VARIANTS = {"baseline": {}, "gatedv": {"value_act": "silu"}, "narrow": {"d_ff": 1}}


def _until_decided(grid, floor) -> subprocess.Popen:
    """`gatedv sweep GRID --until-decided --executor slurm` on the floor, started."""
    return subprocess.Popen([sys.executable, "-c", POLLED_EVERY_SECOND, "sweep", str(grid), "--until-decided",
                             "--noise-floor", str(floor), "--sesoi", "0.2", "--executor", "slurm", "--time", "10",
                             "--device", "cpu", "--json"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _decided(result: dict) -> list[dict]:
    """The variants' sequential states, without where their design files are."""
    return [{key: value for key, value in state.items() if key != "design"} for state in result["variants"]]


def _job_ids(grid) -> dict:
    """Each trained run's Slurm job, by (variant, seed)."""
    return {(path.parts[-4], int(path.parts[-2].removeprefix("seed"))): json.loads(path.read_text())["job_id"]
            for path in (grid.parent / "runs").glob("*/lr*/seed*/job.json")}


def test_a_sequential_sweep_in_rounds_of_job_arrays_and_a_cancelled_round_resumed_to_the_same_designs(
        slurm_cluster, prepared_data, tmp_path):
    aa = tmp_path / "aa.toml"  # the floor: 4 A/A runs of the setup, trained here
    aa.write_text(tiny_grid(prepared_data, name="aa", seeds=[101, 102, 103, 104], out="aa", **SEQUENTIAL_RECIPE))
    sweep_json(aa, "--device", "cpu", "--jobs", "2")
    floor = tmp_path / "floor.json"
    invoke_json("noise-floor", *sorted((tmp_path / "aa").rglob("heldout.parquet")), "--out", floor)
    grids = {}
    for name in ("straight", "cancelled"):
        (tmp_path / name).mkdir()
        grids[name] = tmp_path / name / "loop.toml"
        grids[name].write_text(tiny_grid(prepared_data, name="loop", variants=SEQUENTIAL_VARIANTS, seeds=[1, 2, 3],
                                         **SEQUENTIAL_RECIPE))

    straight = _until_decided(grids["straight"], floor)
    stdout, stderr = straight.communicate(timeout=600)
    assert straight.returncode == 0, stderr
    swept = json.loads(stdout)
    assert {state["variant"]: (state["n_pairs"], state["decision"]) for state in swept["variants"]} == {
        "gatedv": (3, "better"), "narrow": (1, "no useful gain")}, stderr
    assert [line.split(" (")[0] for line in stderr.splitlines() if line.startswith("round")] == [
        "round 1: gatedv: continue: train seed pair 2", "round 1: narrow: stop: no useful gain",
        "round 2: gatedv: continue: train seed pair 3", "round 3: gatedv: stop: better"]
    jobs = _job_ids(grids["straight"])
    assert sorted(jobs) == [("baseline", 1), ("baseline", 2), ("baseline", 3), ("gatedv", 1), ("gatedv", 2),
                            ("gatedv", 3), ("narrow", 1)]  # the decided variant's seeds 2 and 3 never trained
    arrays = {seed: {jobs[key].split("_")[0] for key in jobs if key[1] == seed} for seed in (1, 2, 3)}
    assert all(len(array) == 1 for array in arrays.values()) and len(set.union(*arrays.values())) == 3  # one a round
    status = invoke_json("sweep", grids["straight"], "--until-decided", "--status")
    assert status["variants"] == swept["variants"]

    grid = grids["cancelled"]
    interrupted = _until_decided(grid, floor)
    job = grid.parent / "runs" / "gatedv" / "lr0.003" / "seed2" / "job.json"  # of the second round's array
    deadline = time.monotonic() + 300
    while not (job.is_file() and subprocess.run(["squeue", "-h", "-j", json.loads(job.read_text())["job_id"], "-o",
                                                 "%T"], capture_output=True, text=True).stdout.strip() == "RUNNING"):
        assert interrupted.poll() is None and time.monotonic() < deadline, interrupted.communicate()
        time.sleep(0.05)
    cancelled = json.loads(job.read_text())["job_id"]
    subprocess.run(["scancel", cancelled], check=True)
    _, stderr = interrupted.communicate(timeout=300)
    assert interrupted.returncode == 4, stderr
    assert stderr.splitlines()[-1].startswith(f"error: {job.parent}: failed (log: ")
    assert "run the same command again" in stderr.splitlines()[-1]
    assert [len(content["looks"]) for content in designs(grid).values()] == [1, 1]  # the first round's looks

    resumed = _until_decided(grid, floor)
    stdout, stderr = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, stderr
    assert _decided(json.loads(stdout)) == _decided(swept)
    assert designs(grid) == designs(grids["straight"])
    assert json.loads(job.read_text())["previous_job_ids"] == [cancelled]
