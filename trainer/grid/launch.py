"""Runs of a grid on one machine: one GPU (or K) per worker process, CPU threads shared out, and a run too big
for one GPU trained data parallel under torchrun.

Each worker of the `gatedv sweep --jobs N` pool takes one slot of `gpu_assignment` (its own
CUDA_VISIBLE_DEVICES, set before torch initialises CUDA in that process), so N runs train on N GPUs; it keeps
the memory its training steps free for the next step (`retain_freed_memory`), and it ends with the sweep,
however the sweep ends (`gatedv_stats.core.workers`). With `--gpus-per-run K > 1` a worker launches each of its runs
as `torchrun --standalone --nproc-per-node=K` processes over its K GPUs (gloo processes on a CPU); the trainer
splits the global batch between them.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from gatedv_stats.core.atomic import write_text_atomic
from gatedv_stats.core.errors import InputError, RunFailure
from gatedv_stats.core.workers import WorkerPool, run_child, spawn_pool
from trainer.grid.grid_run import RunOutcome, run_one
from trainer.run.device import retain_freed_memory

GPU_VARIABLE = "CUDA_VISIBLE_DEVICES"

def visible_gpus(environ: Mapping[str, str], device_count: int) -> list[str]:
    """The GPUs this process may hand out, as CUDA_VISIBLE_DEVICES entries: an existing list is respected
    (indices, UUIDs or MIG names alike), else 0..device_count-1."""
    if GPU_VARIABLE in environ:
        return [entry.strip() for entry in environ[GPU_VARIABLE].split(",") if entry.strip()][:device_count]
    return [str(index) for index in range(device_count)]


def check_gpus_per_run(gpus_per_run: int) -> int:
    """--gpus-per-run: at least 1 (on a CPU, the number of gloo processes of a run)."""
    if gpus_per_run < 1:
        raise InputError(f"--gpus-per-run: must be at least 1, got {gpus_per_run}")
    return gpus_per_run


def default_jobs(gpus: Sequence[str], gpus_per_run: int = 1) -> int:
    """Runs at a time when --jobs is not given: one per GPU (K per run), 1 on a machine without GPUs."""
    return max(1, len(gpus) // check_gpus_per_run(gpus_per_run))


def gpu_assignment(gpus: Sequence[str], jobs: int, gpus_per_run: int = 1) -> list[dict[str, str]]:
    """The environment of each of `jobs` workers: worker i gets the next `gpus_per_run` GPUs, round robin
    (more workers than GPUs share them); without GPUs every worker's environment is left as it is."""
    if jobs < 1:
        raise InputError(f"--jobs: must be at least 1, got {jobs}")
    check_gpus_per_run(gpus_per_run)
    if not gpus:
        return [{} for _ in range(jobs)]
    if gpus_per_run > len(gpus):
        raise InputError(f"--gpus-per-run: {gpus_per_run} but only {len(gpus)} GPU(s) are visible")
    return [{GPU_VARIABLE: ",".join(gpus[(worker * gpus_per_run + k) % len(gpus)] for k in range(gpus_per_run))}
            for worker in range(jobs)]


def threads_per_worker(cpu_count: int, jobs: int) -> int:
    """CPU threads of each worker: the machine's cores split evenly, at least one."""
    return max(1, cpu_count // jobs)


def uses_gpus(device: str) -> bool:
    """Whether `--device` lets the sweep hand out GPUs (auto or cuda; a pinned cuda:N is left alone)."""
    return device in ("auto", "cuda")


def worker_pool(environments: Sequence[Mapping[str, str]], threads: int) -> WorkerPool:
    """A pool of spawned workers, each taking one of `environments` (and `threads` CPU threads) at start."""
    slots = multiprocessing.get_context("spawn").Queue()
    for environment in environments:
        slots.put(dict(environment))
    return spawn_pool(len(environments), _take_slot, (slots, threads))


def _take_slot(slots, threads: int) -> None:
    os.environ.update(slots.get())  # before anything in this process initialises CUDA
    retain_freed_memory()
    import torch

    torch.set_num_threads(threads)


# --- one run over K processes under torchrun -------------------------------------------------------------


def torchrun_command(job_file: Path, outcome_file: Path, nproc: int, log_dir: Path) -> list[str]:
    """The command that trains one pickled grid run in `nproc` data-parallel processes on this machine; torchrun
    keeps its own files in `log_dir` (without one it leaves a `torchelastic_*` directory in /tmp per run)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            f"--log-dir={log_dir}", "-m", "trainer.grid.launch", str(job_file), str(outcome_file)]


def run_distributed(run, runtime, nproc: int, environment: Mapping[str, str] | None = None):
    """`run_one` over `nproc` data-parallel processes (torchrun), with `environment` added to theirs
    (their GPUs); returns rank 0's RunOutcome."""
    import torch

    with tempfile.TemporaryDirectory(prefix="gatedv-launch-") as scratch:
        job_file, outcome_file = Path(scratch) / "run.pkl", Path(scratch) / "outcome.json"
        job_file.write_bytes(pickle.dumps((run, runtime)))
        threads = os.environ.get("OMP_NUM_THREADS") or str(threads_per_worker(torch.get_num_threads(), nproc))
        returncode = run_child(torchrun_command(job_file, outcome_file, nproc, Path(scratch) / "torchrun"),
                               env={**os.environ, **(environment or {}), "OMP_NUM_THREADS": threads})
        if returncode != 0 or not outcome_file.is_file():
            raise RunFailure(f"{run.run_dir}: torchrun with {nproc} processes exited with {returncode} "
                             "(its stderr is above)")
        return RunOutcome(**json.loads(outcome_file.read_text(encoding="utf-8")))


def _main(job_file: str, outcome_file: str) -> None:
    """One rank of `run_distributed`: run the pickled grid run; rank 0 writes the outcome."""
    retain_freed_memory()
    run, runtime = pickle.loads(Path(job_file).read_bytes())
    outcome = run_one(run, runtime)
    if int(os.environ.get("RANK", 0)) == 0:
        write_text_atomic(outcome_file, json.dumps(outcome.to_dict()))


if __name__ == "__main__":
    _main(*sys.argv[1:])
