"""A grid on a cluster: one submitit job per unfinished run, and the state of every run.

`submit_experiment` sends each run that is not finished (nor diverged, pending or running) as one job:
a Slurm job array (`slurm`), or one local subprocess per run (`local`, the same code path without a
scheduler). The job calls `grid_run.run_one`, which resumes from RUN_DIR/checkpoint.pt when it exists, so a
re-submitted or requeued run continues where its last checkpoint stopped, bit-for-bit on the same device
and thread count (docs/method.md §4): a Slurm job trains with the threads of its CPU allocation, recorded in
run.json. A job asks for GPUs only where they are wanted and there (`--gpus-per-run 0`, `--device cpu`, or a
partition without GPUs under `--device auto`: CPU jobs).
RUN_DIR/job.json records the job; `experiment_status` reads run.json, job.json and the scheduler.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import submitit
import torch
from submitit.core.utils import DelayedSubmission, FailedJobError, FailedSubmissionError
from submitit.helpers import Checkpointable, TorchDistributedEnvironment

from gatedv_stats.core.errors import InputError, RunFailure
from gatedv_stats.core.locks import LockBusy
from gatedv_stats.io.curvefiles import CURVE_FILE_NAME, read_curve_file
from gatedv_stats.io.runrecords import read_job_record, read_run_record, write_job_record
from trainer.grid import launch, slurm
from trainer.grid.experiment import Experiment
from trainer.grid.grid_run import HELD_EXIT_CODE, GridRun, grid_columns, left_to_holder, run_one, stale_loss_files
from trainer.run.recipe import Runtime

STATES = ("not started", "pending", "running", "interrupted", "failed", "unknown", "finished", "diverged")
SUBMITTABLE = ("not started", "interrupted", "failed")
WAITING = ("pending", "running", "unknown")  # a job that may still finish its run
POLL_SECONDS = {"local": 2.0, "slurm": 30.0}  # between two looks at the jobs of a round (sacct is asked each time)
# A run longer than --time goes on from its last checkpoint in a requeued job, as often as it takes while it makes
# progress. submitit counts every requeue signal (USR2) of a job under 50 minutes as a timeout and ends the job after
# `max_num_timeout` of them, however far each start got: its count is set out of reach, and `RunJob.checkpoint`
# decides instead, ending a job only after STALLED_REQUEUES requeues in a row whose starts wrote no new checkpoint.
TIMEOUT_REQUEUES = 1_000_000
STALLED_REQUEUES = 3


@dataclass(frozen=True)
class ClusterOptions:
    """Where and how the jobs run; `time` is a Slurm time limit (M, H:M:S, D-H:M:S ...); `gpus_per_run` 0: CPU
    jobs of one task, no GPU asked for."""

    executor: str = "slurm"
    partition: str | None = None
    time: str = "24:00:00"
    gpus_per_run: int = 1
    array_parallelism: int | None = None
    slurm_options: tuple[str, ...] = ()

    def check(self) -> None:
        if self.executor not in ("local", "slurm"):
            raise InputError(f"--executor: unknown executor {self.executor!r} (choose pool, local or slurm)")
        if self.gpus_per_run < 0:
            raise InputError(f"--gpus-per-run: must be at least 0 (0: CPU jobs), got {self.gpus_per_run}")
        if self.array_parallelism is not None and self.array_parallelism < 1:
            raise InputError(f"--array-parallelism: must be at least 1, got {self.array_parallelism}")
        if self.executor == "local":
            given = [name for name, value in (("--partition", self.partition), ("--slurm-option", self.slurm_options),
                                              ("--array-parallelism", self.array_parallelism)) if value]
            if given:
                raise InputError(f"{given[0]}: only with --executor slurm")
        slurm.slurm_minutes(self.time)
        slurm.sbatch_options(self.slurm_options)

    @property
    def tasks(self) -> int:
        """Processes of each run's job: one per GPU, one for a CPU job."""
        return max(1, self.gpus_per_run)

    def job_device(self, device: str) -> tuple[str, int]:
        """The `--device` of the jobs and the GPUs each job asks for: none for `--gpus-per-run 0`, a device other
        than auto or cuda, or (auto) a Slurm partition whose nodes have none; those jobs train on the CPU."""
        if self.gpus_per_run == 0 and device.startswith("cuda"):
            raise InputError(f"--gpus-per-run 0: CPU jobs, but --device {device} asks for a GPU")
        wanted = self.gpus_per_run > 0 and launch.uses_gpus(device)
        if wanted and device == "auto" and self.executor == "slurm":
            wanted = slurm.partition_has_gpus(self.partition) is not False  # unknown: ask, and sbatch says
        if not wanted and device == "auto":
            return "cpu", 0
        return device, self.gpus_per_run if wanted else 0


class RunJob(Checkpointable):
    """The job of one grid run: `run_one` in each of its tasks (data parallel over them when there are
    several); requeued after a timeout or preemption, it resumes from the run's checkpoint.

    `stalled`: the requeues in a row before this start whose starts wrote no new checkpoint (`checkpoint`)."""

    def __init__(self, runtime: Runtime, stalled: int = 0) -> None:
        self.runtime = runtime
        self.stalled = stalled
        self.started_at: int | None = None  # the update of the run's last checkpoint when this start began

    def __call__(self, run: GridRun, environment: dict):
        os.environ.update(environment)  # this run's GPUs, before anything initialises CUDA
        threads = slurm.job_threads(os.environ)
        if threads is not None:  # the allocation's, not the node's cores: the same on any node it is requeued to
            torch.set_num_threads(threads)
        if submitit.JobEnvironment().num_tasks > 1:
            TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
        self.started_at = checkpoint_update(run.run_dir)
        try:
            return run_one(run, self.runtime)
        except LockBusy as busy:  # one line in the job's log instead of submitit's traceback
            print(f"error: {left_to_holder(run.run_dir, busy)}", file=sys.stderr, flush=True)
            raise SystemExit(HELD_EXIT_CODE) from None

    def checkpoint(self, run: GridRun, environment: dict) -> DelayedSubmission | None:  # type: ignore[override]
        """submitit's hook when the job is asked to requeue (USR2: its time limit near, or preemption), called on
        the first task after the trainer's checkpoint of the update in progress: the job to requeue, or None to end
        it (after STALLED_REQUEUES requeues in a row without a new checkpoint)."""
        stalled = stalled_requeues(getattr(self, "started_at", None), checkpoint_update(run.run_dir),
                                   getattr(self, "stalled", 0))  # a job pickled before they were kept
        if stalled > STALLED_REQUEUES:
            print(f"{run.run_dir}: not requeued: no new checkpoint in {stalled} starts of its job in a row (an update "
                  "may take longer than a start leaves it); give a longer --time and submit it again",
                  file=sys.stderr, flush=True)
            return None
        return DelayedSubmission(RunJob(self.runtime, stalled), run, environment)


def stalled_requeues(started_at: int | None, reached: int | None, stalled: int) -> int:
    """The requeues in a row without progress, counting the one a start that began at the checkpoint of update
    `started_at` and reached `reached` (None: no checkpoint) asks for: 0 when it wrote a newer checkpoint, else
    one more than the `stalled` before it."""
    progressed = reached is not None and (started_at is None or reached > started_at)
    return 0 if progressed else stalled + 1


def checkpoint_update(run_dir: Path) -> int | None:
    """The update of the run's last checkpoint, None before the first (see `_last_step`)."""
    return _last_step(run_dir, read_run_record(run_dir) or {})


# --- submitting -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Submission:
    variant: str
    lr: float
    seed: int
    run_dir: str
    state: str  # the run's state before this submission
    job_id: str | None  # None: left alone

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class SubmitResult:
    experiment: str
    executor: str
    submissions: tuple[Submission, ...]

    def to_dict(self) -> dict:
        return {"experiment": self.experiment, "executor": self.executor,
                "runs": [submission.to_dict() for submission in self.submissions]}

    def summary(self) -> str:
        sent = [s for s in self.submissions if s.job_id is not None]
        header, cells = grid_columns(s.seed for s in self.submissions)
        lines = [f"{self.experiment}: {len(sent)} of {len(self.submissions)} runs submitted ({self.executor})",
                 f"{header}  {'job':<14}{'state before':<14}run directory"]
        lines += [f"{cells(s.variant, s.lr, s.seed)}  {s.job_id or '-':<14}{s.state:<14}{s.run_dir}"
                  for s in self.submissions]
        return "\n".join(lines)


def submit_experiment(experiment: Experiment, options: ClusterOptions, runtime: Runtime = Runtime()) -> SubmitResult:
    """Submit one job per run that is not finished, diverged, pending or running; write RUN_DIR/job.json."""
    options.check()
    experiment.check_data()
    runs = [replace(run, run_dir=run.run_dir.resolve()) for run in experiment.runs()]
    states = [status.state for status in experiment_status(experiment).runs]
    todo = [run for run, state in zip(runs, states) if state in SUBMITTABLE]
    job_ids = dict(zip((run.run_dir for run in todo), _submit(experiment, options, runtime, todo)))
    return SubmitResult(experiment.name, options.executor, tuple(
        Submission(run.variant, run.lr, run.seed, str(run.run_dir), state, job_ids.get(run.run_dir))
        for run, state in zip(runs, states)))


def finish_on_cluster(experiment: Experiment, options: ClusterOptions, runtime: Runtime = Runtime(), *,
                      poll_seconds: float | None = None,
                      sleep: Callable[[float], None] = time.sleep) -> ExperimentStatus:
    """Submit the runs of the grid that are not finished and wait until none is pending or running (one round of a
    sequential sweep), asking every `poll_seconds` (default `POLL_SECONDS` of the executor); a run that did not
    finish then is a `RunFailure` naming it and its log."""
    poll_seconds = POLL_SECONDS[options.executor] if poll_seconds is None else poll_seconds
    submit_experiment(experiment, options, runtime)
    status = experiment_status(experiment)
    while any(run.state in WAITING for run in status.runs):
        sleep(poll_seconds)
        status = experiment_status(experiment)
    unfinished = [run for run in status.runs if run.state not in ("finished", "diverged")]
    if unfinished:
        first = unfinished[0]
        raise RunFailure(f"{first.run_dir}: {first.state}" + (f" (log: {first.log})" if first.log else "")
                         + f"; {len(unfinished)} run(s) of the round did not finish: run the same command again to "
                         "submit them again")
    return status


def _submit(experiment: Experiment, options: ClusterOptions, runtime: Runtime, runs: list[GridRun]) -> list[str]:
    if not runs:
        return []
    if options.executor == "slurm":
        slurm.check_submission_host()
    device, gpus = options.job_device(runtime.device)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    folder = Path(experiment.out).resolve() / "jobs" / f"{stamp}-{options.executor}" / "%j"
    job = RunJob(replace(runtime, device=device, progress=False))
    if options.executor == "slurm":
        executor = submitit.SlurmExecutor(folder, max_num_timeout=TIMEOUT_REQUEUES)
        executor.update_parameters(**slurm.slurm_parameters(
            experiment.name, options.time, options.tasks, gpus, options.partition, options.array_parallelism,
            options.slurm_options))
        jobs = _refused_as_input_error(lambda: executor.map_array(job, runs, [{}] * len(runs)))  # Slurm's GPUs
    else:
        local = submitit.LocalExecutor(folder, max_num_timeout=TIMEOUT_REQUEUES)
        local.update_parameters(timeout_min=slurm.slurm_minutes(options.time), tasks_per_node=options.tasks)
        visible = launch.visible_gpus(os.environ, torch.cuda.device_count()) if gpus else []
        environments = launch.gpu_assignment(visible, len(runs), options.tasks)
        jobs = [local.submit(job, run, environment) for run, environment in zip(runs, environments)]
    for run, submitted in zip(runs, jobs):
        _write_job_record(run.run_dir, options, submitted, device, gpus)
    return [submitted.job_id for submitted in jobs]


def _refused_as_input_error(submit: Callable[[], list[submitit.Job]]) -> list[submitit.Job]:
    """`submit()`, with sbatch's refusal as one line (submitit prints sbatch's stderr and raises it with a
    traceback); GPUs refused come with what to ask for instead."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stderr(printed):
            return submit()
    except (FailedJobError, FailedSubmissionError) as error:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()] or ["no reason given"]
        reason = next((line for line in lines if "error" in line.lower()), lines[0])
        hint = ("; the partition has no GPUs? submit CPU jobs with --gpus-per-run 0 (or --device cpu)"
                if "gres" in reason.lower() or "gpu" in reason.lower() else "")
        raise InputError(f"--executor slurm: sbatch refused the jobs: {reason}{hint}") from None


def _write_job_record(run_dir: Path, options: ClusterOptions, job: submitit.Job, device: str, gpus: int) -> None:
    previous = read_job_record(run_dir)
    earlier = ([*previous.get("previous_job_ids", []), previous["job_id"]]) if previous else []
    record = {"executor": options.executor, "job_id": job.job_id, "folder": str(job.paths.folder),
              "stdout": str(job.paths.stdout), "stderr": str(job.paths.stderr),
              "submitted": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "device": device,
              "gpus_per_run": gpus, "tasks": options.tasks, "previous_job_ids": earlier}
    write_job_record(run_dir, record)


# --- status ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunStatus:
    variant: str
    lr: float
    seed: int
    run_dir: str
    state: str  # one of STATES
    step: int | None  # the update of the run's last checkpoint
    updates: int
    job_id: str | None
    log: str | None  # the job's stderr, for a failed run

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class ExperimentStatus:
    experiment: str
    runs: tuple[RunStatus, ...]

    def counts(self) -> dict:
        return {state: n for state in STATES if (n := sum(run.state == state for run in self.runs))}

    def to_dict(self) -> dict:
        return {"experiment": self.experiment, "counts": self.counts(), "runs": [run.to_dict() for run in self.runs]}

    def summary(self) -> str:
        counts = ", ".join(f"{n} {state}" for state, n in self.counts().items())
        header, cells = grid_columns(run.seed for run in self.runs)
        lines = [f"{self.experiment}: {len(self.runs)} runs ({counts})",
                 f"{header}  {'state':<13}{'update':>15}  {'job':<14}run directory"]
        for run in self.runs:
            step = f"{'-' if run.step is None else run.step}/{run.updates}"
            lines.append(f"{cells(run.variant, run.lr, run.seed)}  {run.state:<13}{step:>15}  "
                         f"{run.job_id or '-':<14}{run.run_dir}"
                         + (f"\n{'':>{len(header) + 2}}log: {run.log}" if run.log else ""))
        return "\n".join(lines)


def run_state(record_status: str | None, loss_files: bool, job_state: str | None) -> str:
    """A run's state from run.json's status, whether its loss files are there and readable as its final
    checkpoint's (grid_run.stale_loss_files), and its job's state (pending / running / ended / unknown, or None
    when no job was submitted). A run whose run.json says `failed` (out of memory) is failed until a job of it
    waits or runs again."""
    if record_status == "diverged":
        return "diverged"
    if record_status == "finished" and loss_files:
        return "finished"
    if job_state in ("pending", "running", "unknown"):
        return job_state
    if job_state == "ended" or record_status == "failed":  # its job ended, or run.json says why (out of memory)
        return "failed"
    return "not started" if record_status is None else "interrupted"


def experiment_status(experiment: Experiment) -> ExperimentStatus:
    """The state of every run of the grid, asking the scheduler once for all of their jobs. A job that ended
    without its log file never started (cancelled while pending): the run is as if it had not been submitted."""
    runs = experiment.runs()
    jobs = [read_job_record(run.run_dir) for run in runs]
    job_states = _job_states([job for job in jobs if job])
    rows = []
    for run, job in zip(runs, jobs):
        record = read_run_record(run.run_dir) or {}
        finished = record.get("status") == "finished"  # with readable loss files of its final checkpoint
        job_state = job_states[job["job_id"]] if job else None
        if job and job_state == "ended" and not Path(job["stderr"]).is_file():
            job_state = None
        state = run_state(record.get("status"), finished and not stale_loss_files(run), job_state)
        rows.append(RunStatus(run.variant, run.lr, run.seed, str(run.run_dir.resolve()), state,
                              _last_step(run.run_dir, record), run.spec.updates, job["job_id"] if job else None,
                              job["stderr"] if job and state == "failed" else None))
    return ExperimentStatus(experiment.name, tuple(rows))


def _last_step(run_dir: Path, record: dict) -> int | None:
    """The update of the run's last checkpoint: recorded in run.json, or (runs trained before it was) the last
    curve row."""
    if "checkpoint_update" in record:
        return record["checkpoint_update"]
    curve = run_dir / CURVE_FILE_NAME
    return int(read_curve_file(curve)["step"].iloc[-1]) if curve.is_file() else None


def _job_states(jobs: list[dict]) -> dict[str, str]:
    """pending / running / ended / unknown for each job id (one sacct call for all Slurm jobs, and one squeue
    call for those that sacct does not report)."""
    states = {job["job_id"]: ("running" if _local_job_alive(job["job_id"]) else "ended")
              for job in jobs if job["executor"] == "local"}
    slurm_ids = [job["job_id"] for job in jobs if job["executor"] == "slurm"]
    for job_id, state in (slurm.job_states(slurm_ids) if slurm_ids else {}).items():
        states[job_id] = ("pending" if state in slurm.PENDING else "running" if state in slurm.RUNNING
                          else "unknown" if state == slurm.UNKNOWN else "ended")
    return states


def _local_job_alive(job_id: str) -> bool:
    """Whether the controller process of a local job (its id is the pid) is still running it."""
    if Path("/proc/self").exists():  # a pid taken by another program, or a zombie, is not the job
        try:
            return b"submitit" in (Path("/proc") / job_id / "cmdline").read_bytes()
        except OSError:
            return False
    try:
        os.kill(int(job_id), 0)
    except OSError:
        return False
    return True
