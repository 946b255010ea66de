"""`gatedv sweep --executor local|slurm` and `--status`: one submitit job per unfinished run, job.json beside
each run, a run killed mid-training and resumed by re-submission ending bit-identical to an uninterrupted one,
and the Slurm path (sbatch file, job array, GPUs only where the partition has them, sbatch's refusal in one line,
the signal margin, sacct states and squeue when sacct fails, the threads of a job) against stand-in Slurm commands
on PATH (tests/trainer/test_slurm.py runs it against a real Slurm)."""

import json
import os
import signal
import time
from pathlib import Path

import pandas as pd
import pytest
import submitit
import torch
from typer.testing import CliRunner

import cli
from gatedv_stats.core.errors import InputError
from gatedv_stats.io.runrecords import update_run_record
from helpers import assert_input_error, sweep_json
from trainer.grid import cluster
from trainer.grid.cluster import RunJob, run_state
from trainer.grid.experiment import load_experiment
from trainer.grid.slurm import (
    SLURM_TIMER_S,
    job_threads,
    sbatch_options,
    signal_margin_s,
    slurm_minutes,
    slurm_parameters,
)
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


class FakeSlurm:
    """Stand-ins for Slurm's commands, first on PATH: each answers what `answer` set (sbatch numbers its jobs
    from 12 and prints Slurm's line); `calls` are the argument lines each received."""

    def __init__(self, folder):
        self.folder = folder
        folder.mkdir()
        (folder / "next_job").write_text("12")
        for program in ("sacct", "squeue", "sinfo", "srun"):
            self._script(program, f'cat "{folder}/{program}.out" 2>/dev/null; cat "{folder}/{program}.err" >&2 '
                                  f'2>/dev/null; exit "$(cat "{folder}/{program}.rc" 2>/dev/null || echo 0)"')
        self._script("sbatch", f'if [ -s "{folder}/sbatch.err" ]; then cat "{folder}/sbatch.err" >&2; exit 1; fi\n'
                               f'n=$(cat "{folder}/next_job"); echo $((n + 1)) > "{folder}/next_job"\n'
                               'echo "Submitted batch job $n"')
        self.answer("sinfo", "debug*|(null)\ngpu|gpu:a100:4\n")
        self.answer("sacct", "JobID|State\n")

    def _script(self, program, body):
        path = self.folder / program
        path.write_text(f'#!/bin/sh\necho "$*" >> "{self.folder}/{program}.calls"\n{body}\n')
        path.chmod(0o755)

    def answer(self, program, out="", err="", rc=0):
        for suffix, text in (("out", out), ("err", err), ("rc", str(rc))):
            (self.folder / f"{program}.{suffix}").write_text(text)

    def states(self, program, states):
        """sacct's or squeue's listing of jobs in the given states."""
        if program == "sacct":
            self.answer("sacct", "JobID|State\n" + "".join(f"{job}|{state}\n{job}.0|{state}\n"
                                                             for job, state in states.items()))
        else:
            self.answer("squeue", "".join(f"{job} {state}\n" for job, state in states.items()))

    def calls(self, program):
        path = self.folder / f"{program}.calls"
        return path.read_text().splitlines() if path.is_file() else []


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """FakeSlurm's commands first on PATH (a real Slurm's, if any, never answer); signal handlers restored after."""
    fake = FakeSlurm(tmp_path / "slurm-bin")
    monkeypatch.setenv("PATH", f"{fake.folder}{os.pathsep}{os.environ['PATH']}")
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR2)}
    yield fake
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def _sbatch_lines(tmp_path, job_id):
    (script,) = (tmp_path / "runs" / "jobs").glob(f"*-slurm/{job_id}/{job_id}_submission.sh")
    return set(script.read_text().splitlines())


@pytest.mark.slow
def test_slurm_submits_one_job_array_and_status_follows_sacct(prepared_data, tmp_path, fake_slurm, monkeypatch):
    from submitit.core.submission import process_job

    path = tmp_path / "cluster.toml"
    path.write_text(GRID.format(data=prepared_data, updates=2, eval_every=2))
    submitted = sweep_json(path, "--executor", "slurm", "--partition", "gpu", "--time", "1-12:00:00",
                           "--gpus-per-run", "2", "--array-parallelism", "1", "--slurm-option", "account=ml",
                           "--slurm-option", "--cpus-per-task=8", "--slurm-option", "exclusive")
    job_ids = [run["job_id"] for run in submitted["runs"]]
    assert job_ids == ["12_0", "12_1"]
    job = json.loads((tmp_path / "runs" / "gatedv" / "lr0.004" / "seed1" / "job.json").read_text())
    assert {"#SBATCH --partition=gpu", "#SBATCH --time=2160", "#SBATCH --gpus-per-node=2", "#SBATCH --array=0-1%1",
            "#SBATCH --ntasks-per-node=2", "#SBATCH --account=ml", "#SBATCH --cpus-per-task=8",
            "#SBATCH --exclusive", "#SBATCH --job-name=gatedv-cluster", "#SBATCH --signal=USR2@120"
            } <= _sbatch_lines(tmp_path, 12)
    assert (job["executor"], job["job_id"], job["device"]) == ("slurm", "12_1", "auto")
    assert job["stderr"].endswith("12_1_0_log.err")

    fake_slurm.states("sacct", {"12_0": "RUNNING", "12_1": "RUNNING"})
    assert {v: r["state"] for v, r in _status(path).items()} == {"baseline": "running", "gatedv": "running"}
    fake_slurm.states("sacct", {"12_[0-1%1]": "PENDING"})  # sacct's line for the pending tasks of an array
    assert {v: r["state"] for v, r in _status(path).items()} == {"baseline": "pending", "gatedv": "pending"}
    baseline_job = json.loads((tmp_path / "runs" / "baseline" / "lr0.004" / "seed1" / "job.json").read_text())
    for record in (job, baseline_job):  # both jobs started (Slurm opened their logs), then failed
        Path(record["stderr"]).parent.mkdir(parents=True, exist_ok=True)
        Path(record["stderr"]).write_text("")
    fake_slurm.states("sacct", {"12_0": "FAILED", "12_1": "FAILED"})
    failed = _status(path)
    assert failed["gatedv"]["state"] == "failed" and failed["gatedv"]["log"] == job["stderr"]
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "slurm")
    monkeypatch.setenv("SLURM_JOB_ID", "12_0")  # what srun does on a node: the array's first task runs here
    process_job(baseline_job["folder"])
    fake_slurm.states("sacct", {"12_0": "COMPLETED", "12_1": "FAILED"})
    assert {v: r["state"] for v, r in _status(path).items()} == {"baseline": "finished", "gatedv": "failed"}
    resubmitted = sweep_json(path, "--executor", "slurm", "--device", "cpu")["runs"]
    assert [run["job_id"] for run in resubmitted] == [None, "13"]  # one run left: a plain job, not an array
    assert not any(line.startswith("#SBATCH --gpus") for line in _sbatch_lines(tmp_path, 13))


def _small_grid(folder, prepared_data):
    folder.mkdir(exist_ok=True)
    path = folder / "cluster.toml"
    path.write_text(GRID.format(data=prepared_data, updates=2, eval_every=2))
    return path


def _job_record(folder, variant="gatedv"):
    return json.loads((folder / "runs" / variant / "lr0.004" / "seed1" / "job.json").read_text())


def test_a_partition_without_gpus_gets_cpu_jobs_and_gpus_per_run_0_asks_for_none(prepared_data, tmp_path, fake_slurm):
    path = _small_grid(tmp_path, prepared_data)
    sweep_json(path, "--executor", "slurm")  # --device auto, the default partition (debug): no GPU there
    assert fake_slurm.calls("sinfo") == ["-h -o %P|%G"]
    lines = _sbatch_lines(tmp_path, 12)
    assert "#SBATCH --ntasks-per-node=1" in lines and not any(line.startswith("#SBATCH --gpus") for line in lines)
    job = _job_record(tmp_path)
    assert (job["device"], job["gpus_per_run"], job["tasks"]) == ("cpu", 0, 1)

    other = _small_grid(tmp_path / "other", prepared_data)
    sweep_json(other, "--executor", "slurm", "--partition", "gpu", "--gpus-per-run", "0")  # GPUs there, none asked
    (script,) = (other.parent / "runs" / "jobs").glob("*-slurm/13/13_submission.sh")
    assert not any(line.startswith("#SBATCH --gpus") for line in script.read_text().splitlines())
    assert (_job_record(other.parent)["device"], _job_record(other.parent)["tasks"]) == ("cpu", 1)

    third = _small_grid(tmp_path / "third", prepared_data)
    sweep_json(third, "--executor", "slurm", "--partition", "gpu")  # auto on a GPU partition: as before
    (script,) = (third.parent / "runs" / "jobs").glob("*-slurm/14/14_submission.sh")
    assert "#SBATCH --gpus-per-node=1" in script.read_text().splitlines()
    assert _job_record(third.parent)["device"] == "auto"


def test_sbatch_refusing_the_jobs_is_one_error_line(prepared_data, tmp_path, fake_slurm):
    path = _small_grid(tmp_path, prepared_data)
    fake_slurm.answer("sbatch", err="sbatch: error: Invalid generic resource (gres) specification\n")
    result = CliRunner().invoke(cli.app, ["sweep", str(path), "--executor", "slurm", "--device", "cuda"])
    assert_input_error(result, "error: --executor slurm: sbatch refused the jobs: sbatch: error: Invalid generic "
                       "resource (gres) specification; the partition has no GPUs? submit CPU jobs with "
                       "--gpus-per-run 0")
    assert not list((tmp_path / "runs").rglob("job.json"))
    result = CliRunner().invoke(cli.app, ["sweep", str(path), "--executor", "slurm", "--gpus-per-run", "0",
                                          "--device", "cuda"])
    assert_input_error(result, "--gpus-per-run 0: CPU jobs, but --device cuda asks for a GPU")


def test_status_asks_squeue_when_sacct_fails_and_never_resubmits_a_live_job(prepared_data, tmp_path, fake_slurm):
    path = _small_grid(tmp_path, prepared_data)
    sweep_json(path, "--executor", "slurm")
    fake_slurm.answer("sacct", err="sacct: error: Problem talking to the database: Connection refused\n", rc=1)
    fake_slurm.states("squeue", {"12_0": "RUNNING", "12_1": "PENDING"})
    assert {v: r["state"] for v, r in _status(path).items()} == {"baseline": "running", "gatedv": "pending"}
    assert fake_slurm.calls("squeue")[-1] == "-h -r -o %i %T --jobs=12_0,12_1"
    assert [run["job_id"] for run in sweep_json(path, "--executor", "slurm")["runs"]] == [None, None]

    Path(_job_record(tmp_path, "baseline")["stderr"]).write_text("")  # 12_0 ran; 12_1 never started
    fake_slurm.states("squeue", {})
    status = _status(path)
    assert (status["baseline"]["state"], status["gatedv"]["state"]) == ("failed", "not started")
    fake_slurm.answer("squeue", err="slurm_load_jobs error: Invalid job id specified\n", rc=1)  # all purged
    assert {v: r["state"] for v, r in _status(path).items()} == {"baseline": "failed", "gatedv": "not started"}

    fake_slurm.answer("squeue", err="squeue: error: Unable to contact slurm controller\n", rc=1)
    assert {r["state"] for r in _status(path).values()} == {"unknown"}  # nobody can tell: left alone
    assert [run["job_id"] for run in sweep_json(path, "--executor", "slurm")["runs"]] == [None, None]


def test_a_job_cancelled_while_pending_leaves_its_run_as_it_was(prepared_data, tmp_path, fake_slurm, monkeypatch):
    _small_grid(tmp_path, prepared_data)
    monkeypatch.chdir(tmp_path)  # a relative experiment path: every directory printed absolute all the same
    submitted = sweep_json(Path("cluster.toml"), "--executor", "slurm")["runs"]
    fake_slurm.states("sacct", {"12_0": "CANCELLED by 0", "12_1": "CANCELLED by 0"})
    status = sweep_json(Path("cluster.toml"), "--status")["runs"]
    assert [(run["state"], run["log"], run["job_id"]) for run in status] == [("not started", None, "12_0"),
                                                                             ("not started", None, "12_1")]
    assert [run["run_dir"] for run in status] == [run["run_dir"] for run in submitted]
    assert all(os.path.isabs(run["run_dir"]) for run in status)
    again = sweep_json(Path("cluster.toml"), "--executor", "slurm")["runs"]
    assert [run["job_id"] for run in again] == ["13_0", "13_1"]


@pytest.mark.slow
def test_a_slurm_job_sets_the_threads_of_its_allocation_and_run_json_records_them(prepared_data, tmp_path,
                                                                                  monkeypatch):
    run = load_experiment(_small_grid(tmp_path, prepared_data)).runs()[0]
    for name, value in {"SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": "7", "SLURM_NTASKS": "1",
                        "SLURM_CPUS_ON_NODE": "1"}.items():  # one CPU, however many the node has
        monkeypatch.setenv(name, value)
    threads = torch.get_num_threads()
    try:
        outcome = RunJob(Runtime(device="cpu", progress=False))(run, {})
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    assert outcome.status == "finished" and json.loads((run.run_dir / "run.json").read_text())["threads"] == 1


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
    parameters = slurm_parameters("grid", "30", tasks=1, gpus=0)
    assert parameters == {"job_name": "gatedv-grid", "time": 30, "nodes": 1, "ntasks_per_node": 1,
                          "signal_delay_s": 120}


def test_the_requeue_signal_leaves_a_short_job_time_to_train(prepared_data, tmp_path, fake_slurm):
    # two minutes before the limit, a quarter of a limit under eight minutes: Slurm's timer (about 30 s) may send
    # it up to 30 s earlier, and a 1-2 minute job signalled 120-150 s before its end would requeue having done nothing
    assert [signal_margin_s(minutes) for minutes in (1, 2, 3, 7, 8, 1440)] == [15, 30, 45, 105, 120, 120]
    for minutes in (1, 2, 3, 10):
        assert minutes * 60 - signal_margin_s(minutes) - SLURM_TIMER_S >= minutes * 60 / 4  # the least a start runs
    sweep_json(_small_grid(tmp_path, prepared_data), "--executor", "slurm", "--time", "1")
    assert "#SBATCH --signal=USR2@15" in _sbatch_lines(tmp_path, 12)


def _signalled_starts(run, tmp_path, monkeypatch, starts: int, progress: bool) -> list:
    """`starts` starts of a run's job under a 1-minute limit, as submitit runs them: each loads the job it was
    requeued as, runs it, and its handler of the requeue signal (USR2) is called after the run's checkpoint of the
    update in progress (a new update each start with `progress`, none without); Slurm's `scontrol requeue` left
    out. The outcome of each start: "requeued" or the reason submitit ended the job."""
    from submitit.core.job_environment import SignalHandler
    from submitit.core.utils import DelayedSubmission, JobPaths, UncompletedJobError

    for name, value in {"SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": "7", "SLURM_NTASKS": "1"}.items():
        monkeypatch.setenv(name, value)
    environment = submitit.JobEnvironment()
    monkeypatch.setattr(environment, "_requeue", lambda countdown: None)
    paths = JobPaths(tmp_path / "job", job_id="7")
    paths.folder.mkdir(parents=True)
    submitted = DelayedSubmission(RunJob(Runtime(device="cpu", progress=False)), run, {})
    submitted.set_timeout(1, cluster.TIMEOUT_REQUEUES)  # as the executors of _submit submit it: --time 1
    submitted.dump(paths.submitted_pickle)
    handlers, updates = [], iter(range(10**6))

    def start(run, runtime):  # the run trains, then Slurm's signal comes
        if progress:
            update_run_record(run.run_dir, {"checkpoint_update": next(updates)})
        handlers[-1].checkpoint_and_try_requeue(signal.SIGUSR2)

    monkeypatch.setattr(cluster, "run_one", start)
    outcomes: list = []
    for _ in range(starts):
        delayed = DelayedSubmission.load(paths.submitted_pickle)
        handlers.append(SignalHandler(environment, paths, delayed))
        try:
            delayed.result()
        except SystemExit:  # the handler requeued the job and exited
            outcomes.append("requeued")
        except UncompletedJobError as error:
            outcomes.append(str(error))
            break
    return outcomes


def test_a_job_that_makes_progress_is_requeued_however_often_its_time_limit_comes(prepared_data, tmp_path,
                                                                                 monkeypatch):
    """submitit counts every USR2 of a job under 50 minutes as a timeout (it ran past min(80 %, limit - 10 min)):
    a run needing more than 21 starts of a 1-minute job must not be dropped while each start checkpoints updates."""
    run = load_experiment(_small_grid(tmp_path, prepared_data)).runs()[0]
    assert _signalled_starts(run, tmp_path, monkeypatch, 60, progress=True) == ["requeued"] * 60


def test_a_job_that_makes_no_progress_is_dropped_after_a_few_starts(prepared_data, tmp_path, monkeypatch, capfd):
    run = load_experiment(_small_grid(tmp_path, prepared_data)).runs()[0]
    outcomes = _signalled_starts(run, tmp_path, monkeypatch, 60, progress=False)
    assert outcomes == ["requeued"] * cluster.STALLED_REQUEUES + [
        "Job not requeued because: checkpoint function returned None."]
    assert (f"{run.run_dir}: not requeued: no new checkpoint in {cluster.STALLED_REQUEUES + 1} starts of its job in "
            "a row") in capfd.readouterr().err


def test_a_slurm_job_trains_on_the_threads_of_its_cpu_allocation():
    assert job_threads({"SLURM_CPUS_PER_TASK": "4", "SLURM_CPUS_ON_NODE": "8"}) == 4
    assert job_threads({"SLURM_CPUS_ON_NODE": "4", "SLURM_NTASKS_PER_NODE": "2"}) == 2
    assert job_threads({"SLURM_CPUS_ON_NODE": "1", "SLURM_NTASKS_PER_NODE": "2"}) == 1
    assert job_threads({"SLURM_CPUS_ON_NODE": "3"}) == 3
    assert job_threads({}) is None  # not a Slurm job: torch's own default


@pytest.mark.parametrize(("record", "files", "job", "state"), [
    (None, False, None, "not started"), ("running", False, None, "interrupted"), (None, False, "pending", "pending"),
    ("running", False, "running", "running"), ("running", False, "ended", "failed"), (None, False, "ended", "failed"),
    ("finished", True, "ended", "finished"), ("finished", False, None, "interrupted"),
    ("finished", False, "running", "running"), ("diverged", False, "ended", "diverged"),
    ("stopped", False, "unknown", "unknown"), ("failed", False, None, "failed"),
    ("failed", False, "pending", "pending"),
])
def test_the_state_of_a_run_combines_run_json_loss_files_and_the_job(record, files, job, state):
    assert run_state(record, files, job) == state


@pytest.mark.parametrize(("args", "message"), [
    (["--executor", "local", "--partition", "gpu"], "error: --partition: only with --executor slurm"),
    (["--executor", "local", "--jobs", "2"], "error: --jobs: only with --executor pool"),
    (["--executor", "pbs"], "error: --executor: unknown executor 'pbs' (choose pool, local or slurm)"),
    (["--executor", "local", "--time", "soon"], "error: --time: 'soon' is not a Slurm time limit"),
    (["--executor", "local", "--gpus-per-run", "-1"], "error: --gpus-per-run: must be at least 0 (0: CPU jobs)"),
    (["--gpus-per-run", "0"], "error: --gpus-per-run: must be at least 1, got 0"),  # the pool's runs: 1 or more
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


def test_a_round_on_a_cluster_waits_while_its_jobs_are_pending_or_running_and_names_a_run_that_failed(monkeypatch):
    def runs(*states):
        return cluster.ExperimentStatus("g", tuple(
            cluster.RunStatus("v", 0.1, seed, f"runs/v/seed{seed}", state, None, 4, str(seed),
                              "log.err" if state == "failed" else None) for seed, state in enumerate(states)))

    polled = iter([runs("pending", "running"), runs("finished", "unknown"), runs("finished", "finished")])
    monkeypatch.setattr(cluster, "submit_experiment", lambda *args: None)
    monkeypatch.setattr(cluster, "experiment_status", lambda experiment: next(polled))
    slept = []
    done = cluster.finish_on_cluster(None, cluster.ClusterOptions("local"), sleep=slept.append, poll_seconds=7.0)
    assert [run.state for run in done.runs] == ["finished", "finished"] and slept == [7.0, 7.0]

    polled = iter([runs("running", "finished"), runs("failed", "diverged")])
    with pytest.raises(cluster.RunFailure, match=r"runs/v/seed0: failed \(log: log.err\); 1 run"):
        cluster.finish_on_cluster(None, cluster.ClusterOptions("local"), sleep=lambda seconds: None)
