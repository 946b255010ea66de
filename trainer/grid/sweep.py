"""Running a grid (`gatedv sweep`): every run of an experiment that is not finished, one or `jobs` at a time.

Each (variant, lr, seed) trains into `OUT/<variant>/lr<lr>/seed<seed>/` and is evaluated on the experiment's sets;
finished runs are skipped, interrupted ones resumed, diverged ones recorded and left alone; a run that fails for a
reason outside the inputs (out of memory) does not stop the others, and the sweep ends by naming it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from functools import partial

import torch
from tqdm import tqdm

from gatedv_stats.core.errors import InputError, ParameterError, RunFailure
from gatedv_stats.core.locks import HELD_FOR_CHILDREN, LockBusy, run_lock
from trainer.grid import launch
from trainer.grid.experiment import Experiment
from trainer.grid.grid_run import GridRun, RunOutcome, divergence_warning, grid_columns, run_one
from trainer.run.recipe import Runtime

LOST_WORKER = ("lost with the worker processes: one of them ended abruptly (killed, e.g. by the out-of-memory "
               "killer, or crashed)")


@dataclass(frozen=True)
class SweepResult:
    experiment: str
    outcomes: tuple[RunOutcome, ...] = field(default_factory=tuple)
    variants: dict = field(default_factory=dict)  # variant -> {"parameters", "knobs"} (Experiment.describe_variants)
    warnings: tuple[str, ...] = ()  # one per diverged run (grid_run.divergence_warning), held run, lock taken over

    def to_dict(self) -> dict:
        return {"experiment": self.experiment, "variants": self.variants,
                "runs": [outcome.to_dict() for outcome in self.outcomes], "warnings": list(self.warnings)}

    def summary(self) -> str:
        lines = [f"{self.experiment}: {len(self.outcomes)} runs"]
        for variant, described in self.variants.items():
            knobs = ", ".join(f"{name}={value}" for name, value in described["knobs"].items())
            lines.append(f"  {variant}: {described['parameters']:,} parameters" + (f" ({knobs})" if knobs else ""))
        header, cells = grid_columns(o.seed for o in self.outcomes)
        lines.append(f"{header}  {'action':<10}{'dev NLL':>10}  run directory")
        lines += [f"{cells(o.variant, o.lr, o.seed)}  {o.action:<10}"
                  f"{(o.status if o.status in ('diverged', 'running') else f'{o.dev_nll:.6f}'):>10}  {o.run_dir}"
                  for o in self.outcomes]
        return "\n".join(lines)



def check_executor_options(executor: str, *, jobs: int | None = None, partition: str | None = None,
                           array_parallelism: int | None = None, slurm_options: Sequence[str] = ()) -> None:
    """The options that only one executor of a sweep takes: `jobs` only the pool of processes on this machine,
    `partition`, `array_parallelism` and `slurm_options` only Slurm (`trainer.grid.cluster.ClusterOptions`
    checks the rest of a cluster's options)."""
    if executor != "pool":
        if jobs is not None:
            raise ParameterError("jobs", "only with --executor pool (use --array-parallelism on a cluster)")
    elif partition or array_parallelism or slurm_options:
        raise InputError("--partition, --array-parallelism, --slurm-option: only with --executor slurm")


def run_experiment(experiment: Experiment, *, jobs: int | None = None, gpus_per_run: int = 1,
                   runtime: Runtime = Runtime()) -> SweepResult:
    """Train and evaluate every run of the grid that is not finished, `jobs` runs at a time (default: one per
    visible GPU, else 1), each worker process on its own `gpus_per_run` GPUs (see trainer.grid.launch)."""
    launch.check_gpus_per_run(gpus_per_run)
    experiment.check_data()
    gpus = launch.visible_gpus(os.environ, torch.cuda.device_count()) if launch.uses_gpus(runtime.device) else []
    jobs = launch.default_jobs(gpus, gpus_per_run) if jobs is None else jobs
    environments = launch.gpu_assignment(gpus, jobs, gpus_per_run)
    runs = experiment.runs()
    bar = tqdm(total=len(runs), desc=experiment.name, unit="run", disable=not runtime.progress)
    if jobs == 1:
        with bar:
            outcomes, failed = _finish_each(
                runs, [partial(_run_in_worker, run, runtime, gpus_per_run, environments[0]) for run in runs], bar)
    else:  # one process per run slot; the CPU threads shared out between them, no inner progress bars
        threads = launch.threads_per_worker(os.cpu_count() or 1, jobs)
        quiet = replace(runtime, progress=False)
        with launch.worker_pool(environments, threads) as pool, bar:  # interrupted: the workers stop at once
            futures = [pool.submit(_run_in_worker, run, quiet, gpus_per_run) for run in runs]
            outcomes, failed = _finish_each(runs, [future.result for future in futures], bar)
    if failed:
        raise RunFailure(f"sweep {experiment.name}: {len(failed)} of {len(runs)} runs did not finish (first "
                         f"{failed[0]}); the finished ones are kept: run the same command again to go on from the "
                         "others' checkpoints")
    warnings = tuple(divergence_warning(outcome.run_dir) if outcome.status == "diverged" else str(outcome.note)
                     for outcome in outcomes if outcome.status == "diverged" or outcome.note)
    return SweepResult(experiment.name, tuple(outcomes), experiment.describe_variants(), warnings)


def _finish_each(runs: list[GridRun], results: list[Callable[[], RunOutcome]],
                 bar: tqdm) -> tuple[list[RunOutcome], list[str]]:
    """The outcomes of the runs that finished, and why each other one did not ("RUN_DIR: reason"). A run that
    fails for a reason outside the inputs (out of memory, a launcher) does not stop the others; a worker
    process lost breaks the pool, and every run not finished by then goes with it."""
    outcomes: list[RunOutcome] = []
    failed: list[str] = []
    for run, result in zip(runs, results):
        try:
            outcomes.append(result())
        except LockBusy as busy:  # another sweep (or train) has it: left to that one
            outcomes.append(RunOutcome(run.variant, run.lr, run.seed, str(run.run_dir), "held", "running", math.nan,
                                       f"{busy}; left to it"))
            bar.update()
        except RunFailure as error:
            failed.append(str(error))
        except BrokenProcessPool:
            failed.append(f"{run.run_dir}: {LOST_WORKER}")
        else:
            bar.update()
    return outcomes, failed


def _run_in_worker(run: GridRun, runtime: Runtime, gpus_per_run: int, environment: dict | None = None) -> RunOutcome:
    """One run here, or over `gpus_per_run` torchrun processes (on the GPUs `environment` names, if given), which
    this process holds the run's lock for."""
    if gpus_per_run > 1:
        with run_lock(run.run_dir):
            held = {**(environment or {}), HELD_FOR_CHILDREN: str(run.run_dir.resolve())}
            return launch.run_distributed(run, runtime, gpus_per_run, held)
    return run_one(run, runtime)
