"""A grid on a cluster: one submitit job per unfinished run, and the state of every run.

`submit_experiment` sends each run that is not finished (nor diverged, pending or running) as one job:
a Slurm job array (`slurm`), or one local subprocess per run (`local`, the same code path without a
scheduler). The job calls `grid_run.run_one`, which resumes from RUN_DIR/checkpoint.pt when it exists, so a
re-submitted or requeued run continues where its last checkpoint stopped, bit-for-bit on the same device
and thread count (docs/method.md §4).
RUN_DIR/job.json records the job; `experiment_status` reads run.json, job.json and the scheduler.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

import submitit
import torch
from submitit.helpers import Checkpointable, TorchDistributedEnvironment

from gatedv_stats.errors import InputError
from gatedv_stats.io.curvefiles import CURVE_FILE_NAME, read_curve_file
from gatedv_stats.io.runrecords import read_job_record, read_run_record, write_job_record
from trainer.grid import launch
from trainer.grid.experiment import Experiment
from trainer.grid.grid_run import GridRun, grid_columns, run_one, stale_loss_files
from trainer.run.recipe import Runtime

STATES = ("not started", "pending", "running", "interrupted", "failed", "unknown", "finished", "diverged")
SUBMITTABLE = ("not started", "interrupted", "failed")
TIMEOUT_REQUEUES = 20  # a run longer than --time goes on from its last checkpoint in a requeued job
_SLURM_PENDING = {"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "CONFIGURING", "RESIZING", "SUSPENDED"}
_SLURM_RUNNING = {"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING"}


@dataclass(frozen=True)
class ClusterOptions:
    """Where and how the jobs run; `time` is a Slurm time limit (M, H:M:S, D-H:M:S ...)."""

    executor: str = "slurm"
    partition: str | None = None
    time: str = "24:00:00"
    gpus_per_run: int = 1
    array_parallelism: int | None = None
    slurm_options: tuple[str, ...] = ()

    def check(self) -> None:
        if self.executor not in ("local", "slurm"):
            raise InputError(f"--executor: unknown executor {self.executor!r} (choose pool, local or slurm)")
        launch.check_gpus_per_run(self.gpus_per_run)
        if self.array_parallelism is not None and self.array_parallelism < 1:
            raise InputError(f"--array-parallelism: must be at least 1, got {self.array_parallelism}")
        if self.executor == "local":
            given = [name for name, value in (("--partition", self.partition), ("--slurm-option", self.slurm_options),
                                              ("--array-parallelism", self.array_parallelism)) if value]
            if given:
                raise InputError(f"{given[0]}: only with --executor slurm")
        slurm_minutes(self.time)
        sbatch_options(self.slurm_options)


def slurm_minutes(text: str) -> int:
    """Minutes of a Slurm time limit: M, M:S, H:M:S, D-H, D-H:M or D-H:M:S (seconds rounded up)."""
    days, dash, clock = text.strip().partition("-")
    if not dash:
        days, clock = "0", days
    try:
        day, fields = int(days), [int(field) for field in clock.split(":")]
    except ValueError:
        day, fields = -1, []
    if day < 0 or not 1 <= len(fields) <= 3 or min(fields) < 0:
        raise InputError(f"--time: {text!r} is not a Slurm time limit (minutes, H:M:S or D-H:M:S)")
    if dash:
        hours, minutes, seconds = (fields + [0, 0])[:3]
    elif len(fields) == 3:
        hours, minutes, seconds = fields
    else:
        hours, minutes, seconds = 0, fields[0], (fields + [0])[1]
    total = day * 1440 + hours * 60 + minutes + (seconds + 59) // 60
    if total < 1:
        raise InputError(f"--time: {text!r} is under a minute")
    return total


def sbatch_options(pairs: tuple[str, ...]) -> dict:
    """`KEY=VALUE` (or a bare flag `KEY`) sbatch options as submitit's additional parameters."""
    options = {}
    for pair in pairs:
        key, has_value, value = pair.partition("=")
        key = key.strip().lstrip("-").replace("-", "_")
        if not key or (has_value and not value):
            raise InputError(f"--slurm-option: expected KEY=VALUE (an sbatch option), got {pair!r}")
        options[key] = value if has_value else True
    return options


def slurm_parameters(options: ClusterOptions, name: str, gpus: bool) -> dict:
    """The SlurmExecutor parameters of a grid's job array: one node, one task (and GPU) per process of a run."""
    parameters = {"job_name": f"gatedv-{name}", "time": slurm_minutes(options.time), "nodes": 1,
                  "ntasks_per_node": options.gpus_per_run, "signal_delay_s": 120}
    if gpus:
        parameters["gpus_per_node"] = options.gpus_per_run
    if options.partition:
        parameters["partition"] = options.partition
    if options.array_parallelism:
        parameters["array_parallelism"] = options.array_parallelism
    if options.slurm_options:
        parameters["additional_parameters"] = sbatch_options(options.slurm_options)
    return parameters


class RunJob(Checkpointable):
    """The job of one grid run: `run_one` in each of its tasks (data parallel over them when there are
    several); requeued after a timeout or preemption, it resumes from the run's checkpoint."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def __call__(self, run: GridRun, environment: dict):
        os.environ.update(environment)  # this run's GPUs, before anything initialises CUDA
        if submitit.JobEnvironment().num_tasks > 1:
            TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
        return run_one(run, self.runtime)


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


def _submit(experiment: Experiment, options: ClusterOptions, runtime: Runtime, runs: list[GridRun]) -> list[str]:
    if not runs:
        return []
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    folder = Path(experiment.out).resolve() / "jobs" / f"{stamp}-{options.executor}" / "%j"
    job = RunJob(replace(runtime, progress=False))
    if options.executor == "slurm":
        try:
            executor = submitit.SlurmExecutor(folder, max_num_timeout=TIMEOUT_REQUEUES)
        except RuntimeError:
            raise InputError("--executor slurm: no `srun` here; submit from a Slurm login node") from None
        executor.update_parameters(**slurm_parameters(options, experiment.name, launch.uses_gpus(runtime.device)))
        jobs = executor.map_array(job, runs, [{}] * len(runs))  # Slurm gives each job its GPUs
    else:
        local = submitit.LocalExecutor(folder, max_num_timeout=TIMEOUT_REQUEUES)
        local.update_parameters(timeout_min=slurm_minutes(options.time), tasks_per_node=options.gpus_per_run)
        gpus = launch.visible_gpus(os.environ, torch.cuda.device_count()) if launch.uses_gpus(runtime.device) else []
        environments = launch.gpu_assignment(gpus, len(runs), options.gpus_per_run)
        jobs = [local.submit(job, run, environment) for run, environment in zip(runs, environments)]
    for run, submitted in zip(runs, jobs):
        _write_job_record(run.run_dir, options, submitted)
    return [submitted.job_id for submitted in jobs]


def _write_job_record(run_dir: Path, options: ClusterOptions, job: submitit.Job) -> None:
    previous = read_job_record(run_dir)
    earlier = ([*previous.get("previous_job_ids", []), previous["job_id"]]) if previous else []
    record = {"executor": options.executor, "job_id": job.job_id, "folder": str(job.paths.folder),
              "stdout": str(job.paths.stdout), "stderr": str(job.paths.stderr),
              "submitted": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "gpus_per_run": options.gpus_per_run,
              "previous_job_ids": earlier}
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
    when no job was submitted)."""
    if record_status == "diverged":
        return "diverged"
    if record_status == "finished" and loss_files:
        return "finished"
    if job_state in ("pending", "running", "unknown"):
        return job_state
    if job_state == "ended":
        return "failed"
    return "not started" if record_status is None else "interrupted"


def experiment_status(experiment: Experiment) -> ExperimentStatus:
    """The state of every run of the grid, asking the scheduler once for all of their jobs."""
    runs = experiment.runs()
    jobs = [read_job_record(run.run_dir) for run in runs]
    job_states = _job_states([job for job in jobs if job])
    rows = []
    for run, job in zip(runs, jobs):
        record = read_run_record(run.run_dir) or {}
        finished = record.get("status") == "finished"  # with readable loss files of its final checkpoint
        state = run_state(record.get("status"), finished and not stale_loss_files(run),
                          job_states[job["job_id"]] if job else None)
        rows.append(RunStatus(run.variant, run.lr, run.seed, str(run.run_dir), state, _last_step(run.run_dir, record),
                              run.spec.updates, job["job_id"] if job else None,
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
    """pending / running / ended / unknown for each job id (one sacct call for all Slurm jobs)."""
    states = {job["job_id"]: ("running" if _local_job_alive(job["job_id"]) else "ended")
              for job in jobs if job["executor"] == "local"}
    slurm = [job for job in jobs if job["executor"] == "slurm"]
    if slurm:
        for job in slurm:
            submitit.SlurmJob(job["folder"], job["job_id"])  # registers the id with the shared watcher
        watcher = submitit.SlurmJob.watcher
        watcher.update()
        for job in slurm:
            state = watcher.get_state(job["job_id"], mode="cache").split()[0].upper()
            states[job["job_id"]] = ("pending" if state in _SLURM_PENDING else "running" if state in _SLURM_RUNNING
                                     else "unknown" if state == "UNKNOWN" else "ended")
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
