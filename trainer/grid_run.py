"""One run of a grid: where it lives, and bringing it to `finished` with its loss files (train, resume, or only
evaluate as needed). The same function runs in a sweep worker, under torchrun and as a cluster job."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from gatedv_stats.errors import InputError, RunFailure
from gatedv_stats.io.curvefiles import CURVE_FILE_NAME, read_curve_file
from gatedv_stats.io.runrecords import read_run_record
from trainer.checkpoint import CHECKPOINT_FILE_NAME
from trainer.evaluate import evaluate_checkpoint
from trainer.train import DivergenceError, Runtime, RunSpec, recorded_spec, train


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
    action: str  # trained | resumed | evaluated | skipped | diverged
    status: str  # finished | diverged
    dev_nll: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def run_directory(out: Path, variant: str, lr: float, seed: int) -> Path:
    return Path(out) / variant / f"lr{lr:g}" / f"seed{seed}"


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
    """Bring one grid run to `finished` with its loss files: train, resume, or only evaluate as needed.

    Under torchrun every process calls this: all train (the decision to resume is taken before the process
    group forms, so before rank 0 writes anything), rank 0 alone writes the loss files."""
    record = read_run_record(run.run_dir)
    status = record.get("status") if record else None
    if record is not None and status in ("finished", "diverged") and recorded_spec(record) != run.spec.to_dict():
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
    for eval_set in run.eval_sets:
        out = loss_file_path(run.run_dir, eval_set)
        if action != "skipped" or not out.is_file():  # a file older than the final checkpoint is evaluated again
            evaluate_checkpoint(run.run_dir / CHECKPOINT_FILE_NAME, eval_set, out, device=runtime.device,
                                precision=runtime.precision, batch_size=runtime.eval_batch_size, progress=False)
            action = "evaluated" if action == "skipped" else action
    return _outcome(run, action, "finished")


def _outcome(run: GridRun, action: str, status: str) -> RunOutcome:
    return RunOutcome(run.variant, run.lr, run.seed, str(run.run_dir), action, status,
                      final_dev_nll(run.run_dir) if status == "finished" else math.inf)


def divergence_warning(run_dir: str | Path) -> str:
    """"RUN_DIR diverged at update N (last good checkpoint: update M)", from the run's record."""
    record = read_run_record(run_dir) or {}
    if "diverged_update" not in record:  # recorded before run records held the update
        return f"{run_dir} diverged"
    saved = record["checkpoint_update"]
    kept = "no checkpoint written" if saved is None else f"last good checkpoint: update {saved}"
    return f"{run_dir} diverged at update {record['diverged_update']} ({kept})"


def final_dev_nll(run_dir: Path) -> float:
    """The development NLL at the final update (the last row of the run's checked curve file)."""
    curve = read_curve_file(Path(run_dir) / CURVE_FILE_NAME)
    return float(curve["dev_nll"].iloc[-1])
