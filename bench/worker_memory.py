"""Page faults and CPU time of one demo run in a sweep worker (glibc keeps freed memory) against the same run in
a plain spawned process (glibc's default allocator settings).

Each round trains the demo's `tiny` run (baseline, seed 1, development curve at 9 points, one thread) and
writes its dev and held-out loss files, once in each kind of process, alternating; the figures are the
process's own counters (getrusage) over the run, so the process start is left out. The two must give the
same numbers bit for bit, which the script checks.

    python bench/worker_memory.py --data gatedv-demo/data                 # 100 updates, 2 rounds
    python bench/worker_memory.py --data DATA --updates 500 --rounds 1    # one full demo run each
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from trainer.grid import launch

COUNTERS = ("faults", "user", "sys", "wall")


def one_run(data: str, updates: int) -> dict:
    """Train and evaluate the demo run in this process; its counters and numbers."""
    import pandas as pd
    import torch

    from trainer.run.evaluate import evaluate_checkpoint
    from trainer.run.recipe import RunSpec, Runtime
    from trainer.run.train import train

    torch.set_num_threads(1)
    spec = RunSpec.make(data, "tiny", "baseline", 1, updates=updates, eval_every=max(1, updates // 8))
    with tempfile.TemporaryDirectory() as run_dir:
        before, began = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        result = train(spec, run_dir, runtime=Runtime(device="cpu", progress=False))
        for eval_set in ("dev", "heldout"):
            evaluate_checkpoint(Path(run_dir) / "checkpoint.pt", eval_set, Path(run_dir) / f"{eval_set}.parquet",
                                device="cpu", progress=False)
        wall, after = time.perf_counter() - began, resource.getrusage(resource.RUSAGE_SELF)
        loss_sums = [pd.read_parquet(Path(run_dir) / f"{name}.parquet")["loss_sum"].tolist()
                     for name in ("dev", "heldout")]
    return {"faults": after.ru_minflt - before.ru_minflt, "user": after.ru_utime - before.ru_utime,
            "sys": after.ru_stime - before.ru_stime, "wall": wall, "tokens_per_second": result.tokens_per_second,
            "numbers": (result.dev_nll, loss_sums)}


def run_in(kind: str, data: str, updates: int) -> dict:
    pool: ProcessPoolExecutor
    if kind == "worker":
        pool = launch.worker_pool([{}], threads=1)
    else:
        pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    with pool:
        return pool.submit(one_run, data, updates).result()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="A prepared data directory.")
    parser.add_argument("--updates", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    data = str(Path(args.data).resolve())
    load_before = os.getloadavg()[0]
    runs: dict[str, list[dict]] = {"plain": [], "worker": []}
    for _ in range(args.rounds):
        for kind in runs:
            runs[kind].append(run_in(kind, data, args.updates))
    numbers = {repr(run["numbers"]) for kind in runs for run in runs[kind]}
    print(f"tiny baseline, {args.updates} updates + dev and held-out loss files, 1 thread, {args.rounds} rounds; "
          f"load average {load_before:.1f} -> {os.getloadavg()[0]:.1f}")
    for kind, label in (("plain", "plain process (glibc defaults)"), ("worker", "sweep worker (keeps freed memory)")):
        median = {key: statistics.median(run[key] for run in runs[kind]) for key in (*COUNTERS, "tokens_per_second")}
        print(f"{label:<35} {median['faults']:>11,.0f} minor faults "
              f"({median['faults'] / args.updates:,.0f} per update), user {median['user']:.2f} s, "
              f"sys {median['sys']:.2f} s, wall {median['wall']:.2f} s, "
              f"training {median['tokens_per_second']:,.0f} tokens/s")
    ratios = {key: statistics.median(p[key] / w[key] for p, w in zip(runs["plain"], runs["worker"]))
              for key in ("faults", "wall", "tokens_per_second")}
    cpu = statistics.median((p["user"] + p["sys"]) / (w["user"] + w["sys"])
                            for p, w in zip(runs["plain"], runs["worker"]))
    print(f"plain / worker (median per-round ratio): faults {ratios['faults']:.1f}x, CPU time {cpu:.3f}, "
          f"wall {ratios['wall']:.3f}; worker / plain tokens/s {1 / ratios['tokens_per_second']:.3f}")
    print("numbers (final dev NLL, loss sums): " + ("identical in every run" if len(numbers) == 1 else "DIFFER"))


if __name__ == "__main__":
    main()
