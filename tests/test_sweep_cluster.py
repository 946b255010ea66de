"""`gatedv sweep --executor local|slurm` and `--status`: one submitit job per unfinished run, job.json beside
each run, a run killed mid-training and resumed by re-submission ending bit-identical to an uninterrupted one,
and the Slurm path (sbatch file, job array, sacct states) against submitit's mocked Slurm commands."""

import json
import os
import signal
import time

import pandas as pd
import pytest
import submitit
import torch
from typer.testing import CliRunner

import cli
from gatedv_stats.errors import InputError
from helpers import sweep_json
from trainer.grid.cluster import ClusterOptions, run_state, sbatch_options, slurm_minutes, slurm_parameters
from trainer.grid.experiment import load_experiment
from trainer.run.checkpoint import load_checkpoint
from trainer.run.recipe import Runtime
from trainer.run.train import train

GRID = """
name = "cluster"
data = "{data}"
config = "tiny"
variants = ["baseline", "gatedv"]
seeds = [1]
lrs = [0.004]
updates = {updates}
eval_every = {eval_every}
batch_size = 2
out = "runs"
"""


def _status(path):
    return {run["variant"]: run for run in sweep_json(path, "--status")["runs"]}


def _wait_for(path, states, timeout=180):
    """Poll --status until every run is in its expected state (at once an error when one ended otherwise)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = _status(path)
        if all(status[variant]["state"] == state for variant, state in states.items()):
            return status
        ended = {variant: run["state"] for variant, run in status.items()
                 if run["state"] in ("finished", "diverged") and states[variant] != run["state"]}
        assert not ended, f"runs ended as {ended}, expected {states}"
        time.sleep(0.5)  # each poll takes CPU from the jobs
    raise AssertionError(f"runs did not reach {states}: {status}")


def _kill_after_first_checkpoint(run_dir, job_id, timeout=120):
    """Interrupt a local job (as submitit's LocalJob.cancel does) once its run has a checkpoint past update 0."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        curve = run_dir / "curve.csv"
        if curve.is_file() and pd.read_csv(curve)["step"].iloc[-1] > 0:
            os.kill(int(job_id), signal.SIGINT)
            return
        time.sleep(0.02)
    raise AssertionError(f"{run_dir}: no checkpoint past update 0 within {timeout} s")


@pytest.fixture
def interruptible_jobs():
    """SIGINT handled as in a terminal: a process started in the background by a non-interactive shell (as CI
    may start this suite) inherits SIGINT ignored, and so would the local jobs, which LocalJob.cancel then
    cannot stop."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.slow
def test_a_killed_local_job_resumes_on_resubmission_bit_identical_to_an_uninterrupted_run(
        prepared_data, tmp_path, monkeypatch, interruptible_jobs):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # one CPU thread in every job and in the reference below
    path = tmp_path / "cluster.toml"
    path.write_text(GRID.format(data=prepared_data, updates=12, eval_every=3))
    run_dirs = {variant: tmp_path / "runs" / variant / "lr0.004" / "seed1" for variant in ("baseline", "gatedv")}
    assert {v: (r["state"], r["step"], r["job_id"]) for v, r in _status(path).items()} == {
        "baseline": ("not started", None, None), "gatedv": ("not started", None, None)}

    first = {run["variant"]: run for run in sweep_json(path, "--executor", "local", "--device", "cpu")["runs"]}
    assert {run["state"] for run in first.values()} == {"not started"}
    for variant, run in first.items():
        job = json.loads((run_dirs[variant] / "job.json").read_text())
        assert (job["executor"], job["job_id"], job["previous_job_ids"]) == ("local", run["job_id"], [])
        assert job["stderr"].endswith(f"{run['job_id']}_0_log.err")
    _kill_after_first_checkpoint(run_dirs["gatedv"], first["gatedv"]["job_id"])

    reference = tmp_path / "reference"  # the same run, uninterrupted, while the jobs go on
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train(load_experiment(path).runs()[1].spec, reference, runtime=Runtime(device="cpu", progress=False))
    finally:
        torch.set_num_threads(threads)

    middle = _wait_for(path, {"baseline": "finished", "gatedv": "failed"})
    assert 0 < middle["gatedv"]["step"] < 12 and middle["baseline"]["step"] == 12
    assert middle["gatedv"]["log"] == json.loads((run_dirs["gatedv"] / "job.json").read_text())["stderr"]
    assert os.path.isfile(middle["gatedv"]["log"]) and middle["baseline"]["log"] is None
    assert json.loads((run_dirs["gatedv"] / "run.json").read_text())["status"] == "running"

    second = {run["variant"]: run for run in sweep_json(path, "--executor", "local", "--device", "cpu")["runs"]}
    assert (second["baseline"]["job_id"], second["baseline"]["state"]) == (None, "finished")
    assert second["gatedv"]["state"] == "failed" and second["gatedv"]["job_id"] != first["gatedv"]["job_id"]
    after = _wait_for(path, {"baseline": "finished", "gatedv": "finished"})
    assert after["gatedv"]["step"] == 12 and after["gatedv"]["job_id"] == second["gatedv"]["job_id"]
    job = json.loads((run_dirs["gatedv"] / "job.json").read_text())
    assert job["previous_job_ids"] == [first["gatedv"]["job_id"]]
    assert submitit.LocalJob(job["folder"], job["job_id"]).result().action == "resumed"

    resumed, uninterrupted = pd.read_csv(run_dirs["gatedv"] / "curve.csv"), pd.read_csv(reference / "curve.csv")
    pd.testing.assert_frame_equal(resumed, uninterrupted, check_exact=True)
    a = load_checkpoint(run_dirs["gatedv"] / "checkpoint.pt").model.state_dict()
    b = load_checkpoint(reference / "checkpoint.pt").model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)
    assert {"dev.parquet", "heldout.parquet"} <= {p.name for p in run_dirs["gatedv"].iterdir()}
    assert [run["job_id"] for run in sweep_json(path, "--executor", "local", "--device", "cpu")["runs"]] == [None, None]


@pytest.mark.slow
def test_gpus_per_run_makes_each_job_a_data_parallel_process_group(prepared_data, tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    path = tmp_path / "ddp.toml"
    path.write_text(GRID.format(data=prepared_data, updates=2, eval_every=2).replace('"baseline", ', ""))
    (run,) = sweep_json(path, "--executor", "local", "--device", "cpu", "--gpus-per-run", "2")["runs"]
    assert _wait_for(path, {"gatedv": "finished"})["gatedv"]["step"] == 2
    job = json.loads((tmp_path / "runs" / "gatedv" / "lr0.004" / "seed1" / "job.json").read_text())
    ranks = submitit.LocalJob(job["folder"], job["job_id"], tasks=[0, 1]).results()  # one outcome per task
    assert [(outcome.action, outcome.status) for outcome in ranks] == [("trained", "finished")] * 2

    single = tmp_path / "single"
    train(load_experiment(path).runs()[0].spec, single, runtime=Runtime(device="cpu", progress=False))
    one, two = pd.read_csv(single / "curve.csv"), pd.read_csv(tmp_path / "runs" / "gatedv" / "lr0.004" / "seed1" /
                                                                "curve.csv")
    assert list(two["step"]) == [0, 2]
    pd.testing.assert_series_equal(one["dev_nll"], two["dev_nll"], rtol=1e-5, atol=0)


@pytest.fixture
def mocked_slurm():
    """submitit's own stand-ins for sbatch and sacct (jobs start RUNNING); signal handlers restored after."""
    from submitit.slurm.test_slurm import mocked_slurm as mocked

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR2)}
    with mocked() as mock:
        yield mock
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


@pytest.mark.slow
def test_slurm_submits_one_job_array_and_status_follows_sacct(prepared_data, tmp_path, mocked_slurm):
    from submitit.core.submission import process_job

    path = tmp_path / "cluster.toml"
    path.write_text(GRID.format(data=prepared_data, updates=2, eval_every=2))
    submitted = sweep_json(path, "--executor", "slurm", "--partition", "gpu", "--time", "1-12:00:00",
                           "--gpus-per-run", "2", "--array-parallelism", "1", "--slurm-option", "account=ml",
                           "--slurm-option", "--cpus-per-task=8", "--slurm-option", "exclusive")
    job_ids = [run["job_id"] for run in submitted["runs"]]
    assert job_ids == ["12_0", "12_1"]
    job = json.loads((tmp_path / "runs" / "gatedv" / "lr0.004" / "seed1" / "job.json").read_text())
    sbatch = (tmp_path / "runs" / "jobs").glob("*-slurm/12/12_submission.sh")  # one sbatch file for the array
    lines = set(next(iter(sbatch)).read_text().splitlines())
    assert {"#SBATCH --partition=gpu", "#SBATCH --time=2160", "#SBATCH --gpus-per-node=2", "#SBATCH --array=0-1%1",
            "#SBATCH --ntasks-per-node=2", "#SBATCH --account=ml", "#SBATCH --cpus-per-task=8",
            "#SBATCH --exclusive", "#SBATCH --job-name=gatedv-cluster"} <= lines
    assert (job["executor"], job["job_id"]) == ("slurm", "12_1") and job["stderr"].endswith("12_1_0_log.err")

    states = {"baseline": "running", "gatedv": "running"}
    assert {v: r["state"] for v, r in _status(path).items()} == states
    mocked_slurm.set_job_state("12", "PENDING", array=2)
    assert {v: r["state"] for v, r in _status(path).items()} == {"baseline": "pending", "gatedv": "pending"}
    mocked_slurm.set_job_state("12", "FAILED", array=2)
    failed = _status(path)
    assert failed["gatedv"]["state"] == "failed" and failed["gatedv"]["log"] == job["stderr"]
    baseline_job = json.loads((tmp_path / "runs" / "baseline" / "lr0.004" / "seed1" / "job.json").read_text())
    with mocked_slurm.job_context("12_0"):  # what srun does on a node: the array's first task runs here
        process_job(baseline_job["folder"])
    mocked_slurm.set_job_state("12", "COMPLETED", array=2)
    assert {v: r["state"] for v, r in _status(path).items()} == {"baseline": "finished", "gatedv": "failed"}
    resubmitted = sweep_json(path, "--executor", "slurm", "--device", "cpu")["runs"]
    assert [run["job_id"] for run in resubmitted] == [None, "13"]  # one run left: a plain job, not an array


def test_time_limits_and_sbatch_options_read_as_slurm_does():
    assert [slurm_minutes(text) for text in ("90", "90:30", "12:00:00", "2-0", "1-2:30", "1-00:00:01")] == [
        90, 91, 720, 2880, 1590, 1441]
    for bad in ("", "abc", "1:2:3:4", "-5", "0", "1--2"):
        with pytest.raises(InputError, match="--time"):
            slurm_minutes(bad)
    assert sbatch_options(("mem=64G", "--cpus-per-task=8", "exclusive")) == {
        "mem": "64G", "cpus_per_task": "8", "exclusive": True}
    with pytest.raises(InputError, match="--slurm-option: expected KEY=VALUE"):
        sbatch_options(("mem=",))
    parameters = slurm_parameters(ClusterOptions(time="30", gpus_per_run=1), "grid", gpus=False)
    assert parameters == {"job_name": "gatedv-grid", "time": 30, "nodes": 1, "ntasks_per_node": 1,
                          "signal_delay_s": 120}


@pytest.mark.parametrize(("record", "files", "job", "state"), [
    (None, False, None, "not started"), ("running", False, None, "interrupted"), (None, False, "pending", "pending"),
    ("running", False, "running", "running"), ("running", False, "ended", "failed"), (None, False, "ended", "failed"),
    ("finished", True, "ended", "finished"), ("finished", False, None, "interrupted"),
    ("finished", False, "running", "running"), ("diverged", False, "ended", "diverged"),
    ("stopped", False, "unknown", "unknown"),
])
def test_the_state_of_a_run_combines_run_json_loss_files_and_the_job(record, files, job, state):
    assert run_state(record, files, job) == state


@pytest.mark.parametrize(("args", "message"), [
    (["--executor", "local", "--partition", "gpu"], "error: --partition: only with --executor slurm"),
    (["--executor", "local", "--jobs", "2"], "error: --jobs: only with --executor pool"),
    (["--executor", "pbs"], "error: --executor: unknown executor 'pbs' (choose pool, local or slurm)"),
    (["--executor", "local", "--time", "soon"], "error: --time: 'soon' is not a Slurm time limit"),
    (["--executor", "local", "--gpus-per-run", "0"], "error: --gpus-per-run: must be at least 1, got 0"),
    (["--slurm-option", "mem=4G"], "error: --partition, --array-parallelism, --slurm-option: only with --executor"),
    (["--executor", "slurm"], "error: --executor slurm: no `srun` here; submit from a Slurm login node"),
])
def test_bad_cluster_options_are_one_line(prepared_data, tmp_path, monkeypatch, args, message):
    monkeypatch.setenv("PATH", str(tmp_path))  # no `srun`, even on a machine with Slurm's commands: nothing submits
    path = tmp_path / "cluster.toml"
    path.write_text(GRID.format(data=prepared_data, updates=2, eval_every=2))
    result = CliRunner().invoke(cli.app, ["sweep", str(path), *args])
    assert result.exit_code == 2 and result.stderr.startswith(message), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_status_counts_a_finished_run_with_a_corrupt_loss_file_as_not_finished(prepared_data, tmp_path):
    path = tmp_path / "cluster.toml"
    path.write_text(GRID.format(data=prepared_data, updates=2, eval_every=2) + 'eval_sets = ["dev"]\n')
    run = load_experiment(path).runs()[0]
    train(run.spec, run.run_dir, runtime=Runtime(device="cpu", progress=False))
    assert _status(path)["baseline"]["state"] == "interrupted"  # no loss file yet
    from trainer.grid.grid_run import run_one

    run_one(run, Runtime(device="cpu", progress=False))
    assert _status(path)["baseline"]["state"] == "finished"
    loss_file = run.run_dir / "dev.parquet"
    loss_file.write_bytes(loss_file.read_bytes()[:100])
    assert _status(path)["baseline"]["state"] == "interrupted"  # submittable again: its job evaluates it
