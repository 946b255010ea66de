"""One run of a grid: where it lives, and bringing it to `finished` with its loss files (train, resume, or only
evaluate as needed). The same function runs in a sweep worker, under torchrun and as a cluster job."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from gatedv_stats.core.errors import InputError, RunFailure
from gatedv_stats.core.locks import LockBusy, describe, run_lock
from gatedv_stats.io.curvefiles import CURVE_FILE_NAME, read_curve_file
from gatedv_stats.io.lossfiles import read_loss_file
from gatedv_stats.io.runrecords import read_run_record
from trainer.run.checkpoint import CHECKPOINT_FILE_NAME
from trainer.run.evaluate import evaluate_checkpoint
from trainer.run.ranks import rank_zero_checks
from trainer.run.recipe import RunSpec, Runtime, spec_differences
from trainer.run.train import DivergenceError, train

HELD_EXIT_CODE = 2  # a job whose run another process holds: as `gatedv train` of a run being trained exits


@dataclass(frozen=True)
class GridRun:
    variant: str
    lr: float
    seed: int
    run_dir: Path
    spec: RunSpec
    eval_sets: tuple[str, ...]


@dataclass(frozen=True)
class RunOutcome:
    variant: str
    lr: float
    seed: int
    run_dir: str
    action: str  # trained | resumed | evaluated | skipped | diverged | held (by another process: left to it)
    status: str  # finished | diverged | running (held)
    dev_nll: float
    note: str | None = None  # a stale lock of a process that ended without releasing it, taken over

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def run_directory(out: Path, variant: str, lr: float, seed: int) -> Path:
    return Path(out) / variant / lr_directory_name(lr) / f"seed{seed}"


def lr_directory_name(lr: float) -> str:
    """The directory of a learning rate: `lr` and the rate to six significant digits, so rates that agree there
    share it (an experiment refuses such a grid)."""
    return f"lr{lr:g}"


def grid_columns(seeds: Iterable[int]) -> tuple[str, Callable[[str, float, int], str]]:
    """The variant, lr and seed columns that open each table of a grid's runs: the header, and a run's cells;
    the seed column is as wide as the widest seed."""
    width = max([10, *(len(str(seed)) + 2 for seed in seeds)])
    return (f"{'variant':<14}{'lr':>10}{'seed':>{width}}",
            lambda variant, lr, seed: f"{variant:<14}{lr:>10g}{seed:>{width}}")


def loss_file_path(run_dir: Path, eval_set: str) -> Path:
    """RUN_DIR/<set>.parquet (a set given by path is named after its file)."""
    return Path(run_dir) / f"{Path(eval_set).stem}.parquet"


def run_one(run: GridRun, runtime: Runtime = Runtime()) -> RunOutcome:
    """Bring one grid run to `finished` with its loss files: train, resume, or only evaluate as needed, holding the
    run directory's lock (`gatedv_stats.core.locks.run_lock`: `LockBusy` when another process holds it).

    Under torchrun every process calls this: rank 0 alone holds the lock, and every rank knows whether it could
    before any starts (`rank_zero_checks`); all train (the decision to resume is taken before every rank has entered
    training, so before rank 0 writes anything); rank 0 alone writes the loss files."""
    with rank_zero_checks(lambda: run_lock(run.run_dir), runtime.device) as lock:
        outcome = _bring_to_finished(run, runtime)
    if lock is None or lock.stale is None:
        return outcome
    return replace(outcome, note=f"{run.run_dir}: took over the lock of {describe(lock.stale)}, which ended "
                                 "without releasing it")


def left_to_holder(run_dir: Path, busy: LockBusy) -> str:
    """The one line of a cluster job that finds its run held by another process (a job still running it, a sweep, a
    `gatedv train`): the job leaves the run to that process and ends (`HELD_EXIT_CODE`) without touching it."""
    return (f"{run_dir}: is being trained or evaluated by {describe(busy.holder)}; this job leaves the run to it and "
            "ends: see the run's state with gatedv sweep EXPERIMENT --status, and submit it again if that process "
            "ends without finishing it")


def _bring_to_finished(run: GridRun, runtime: Runtime) -> RunOutcome:
    record = read_run_record(run.run_dir)
    status = record.get("status") if record else None
    if record is not None and status in ("finished", "diverged") and spec_differences(record, run.spec):
        raise InputError(f"{run.run_dir}: holds a different run than the experiment asks for; move it away")
    action = "skipped"
    if status == "diverged":
        return _outcome(run, "skipped", "diverged")
    if status != "finished":
        resume = (run.run_dir / CHECKPOINT_FILE_NAME).is_file()
        try:
            result = train(run.spec, run.run_dir, runtime=runtime, resume=resume)
        except DivergenceError:
            return _outcome(run, "diverged", "diverged")
        if result.status != "finished":  # a stop signal whose handler returned (a cluster job's own handler)
            raise RunFailure(f"{run.run_dir}: training stopped by {result.stopped_by} after update {result.update} "
                             "(its checkpoint is kept); run the same command again to resume it")
        action = "resumed" if resume else "trained"
    if int(os.environ.get("RANK", 0)) != 0:
        return _outcome(run, action, "finished")
    # after training every loss file is of an older checkpoint; a skipped run keeps those still of its final one
    stale = stale_loss_files(run) if action == "skipped" else run.eval_sets
    for eval_set in run.eval_sets:
        out = loss_file_path(run.run_dir, eval_set)
        if eval_set in stale:
            evaluate_checkpoint(run.run_dir / CHECKPOINT_FILE_NAME, eval_set, out, device=runtime.device,
                                precision=runtime.precision, batch_size=runtime.eval_batch_size, progress=False)
            action = "evaluated" if action == "skipped" else action
    return _outcome(run, action, "finished")


def stale_loss_files(run: GridRun) -> tuple[str, ...]:
    """The evaluation sets of a finished run whose loss file must be written again: missing, unreadable (truncated,
    corrupt), or not this run's evaluation of its final update on that set (another arm, seed, rate, set or update,
    or a swapped value activation). The checkpoint is not hashed, so that `--status` stays cheap on a large grid:
    a run trained again in a sweep has its loss files written again anyway."""
    stale = []
    for eval_set in run.eval_sets:
        try:
            meta = read_loss_file(loss_file_path(run.run_dir, eval_set)).meta
        except InputError:
            stale.append(eval_set)
            continue
        expected = {"arm": run.variant, "seed": run.seed, "lr": run.lr, "step": run.spec.updates,
                    "eval_set": Path(eval_set).stem, "value_act": None}
        if any(meta.get(key, value) != value for key, value in expected.items()):
            stale.append(eval_set)
    return tuple(stale)


def _outcome(run: GridRun, action: str, status: str) -> RunOutcome:
    return RunOutcome(run.variant, run.lr, run.seed, str(run.run_dir), action, status,
                      final_dev_nll(run.run_dir, run) if status == "finished" else math.inf)


def divergence_warning(run_dir: str | Path) -> str:
    """"RUN_DIR diverged at update N (last good checkpoint: update M)", from the run's record."""
    record = read_run_record(run_dir) or {}
    if "diverged_update" not in record:  # recorded before run records held the update
        return f"{run_dir} diverged"
    saved = record["checkpoint_update"]
    kept = "no checkpoint written" if saved is None else f"last good checkpoint: update {saved}"
    return f"{run_dir} diverged at update {record['diverged_update']} ({kept})"


def final_dev_nll(run_dir: Path, run: GridRun | None = None) -> float:
    """The development NLL at the final update (the last row of the run's checked curve file). With `run`, the
    curve must be that run's (its arm, lr and seed on every row) and reach its last update; otherwise it is an
    InputError naming the file, never the NLL of another run or of an earlier update."""
    path = Path(run_dir) / CURVE_FILE_NAME
    curve = read_curve_file(path)
    if run is not None:
        other = curve[(curve["arm"] != run.variant) | (curve["lr"] != run.lr) | (curve["seed"] != run.seed)]
        if len(other):
            row = other.iloc[0]
            raise InputError(f"{path}: holds arm {row['arm']} lr {row['lr']} seed {row['seed']}, not the run of "
                             f"its directory (arm {run.variant} lr {run.lr} seed {run.seed})")
        last = int(curve["step"].iloc[-1])
        if last != run.spec.updates:
            raise InputError(f"{path}: ends at step {last}, not at the run's final update {run.spec.updates}; "
                             "the curve is incomplete")
    return float(curve["dev_nll"].iloc[-1])
