"""Document bootstrap: ours against `scipy.stats.bootstrap(paired=True)` on the same ratio statistic.

    python bench/bootstrap.py           # B = 2,000 at N = 2,048 and 100,000, then N = 1,000,000 and the floor
    python bench/bootstrap.py --json    # the same, then every figure as one JSON object

Each measurement runs in a fresh subprocess so that its peak RSS (ru_maxrss) is its own. Ours runs on the
threads it picks (one per CPU this process may use) and again pinned to one CPU; scipy is single-threaded.
Targets at N = 100,000: ≥ 10× scipy with varying target counts, ≥ 20× with equal ones; < 1 GiB at N = 1,000,000.
The last lines time the parts of one thread's work alone, against the bounded integer draws scipy makes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from typing import Any

SAMPLES = 2000
CASES = [(2048, "percentile", False), (2048, "percentile", True), (2048, "bca", False),
         (100_000, "percentile", False), (100_000, "percentile", True)]
TARGETS = {False: 20.0, True: 10.0}  # at N = 100,000, by varying target counts


def make_sample(n_docs: int, varying_targets: bool):
    import numpy as np

    rng = np.random.default_rng(n_docs)
    n_targets = rng.integers(64, 257, size=n_docs).astype(np.float64) if varying_targets else np.full(n_docs, 256.0)
    d = rng.normal(-0.02, 0.1, size=n_docs) * n_targets
    return d, n_targets


def measure(which: str, n_docs: int, method: str, varying_targets: bool) -> dict:
    """Run one bootstrap in this process and report time, peak RSS, threads and the interval."""
    import numpy as np
    from scipy import stats

    from gatedv_stats.stats import resampling

    d, n_targets = make_sample(n_docs, varying_targets)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start, cpu_start = time.perf_counter(), time.process_time()
    if which == "scipy":
        def ratio(numerator, denominator, axis=-1):
            return np.sum(numerator, axis=axis) / np.sum(denominator, axis=axis)

        result = stats.bootstrap((d, n_targets), ratio, paired=True, vectorized=True, n_resamples=SAMPLES,
                                 method="BCa" if method == "bca" else "percentile", rng=np.random.default_rng(0))
        interval, threads = tuple(result.confidence_interval), 1
    else:
        result = resampling.document_bootstrap(d, n_targets, n_resamples=SAMPLES, rng_seed=0, method=method)
        interval, threads = result.confidence_interval, resampling._thread_count()
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "peak_rss_mib": peak, "rss_after_imports_mib": rss_before,
            "threads": threads, "interval": [float(x) for x in interval]}


def in_subprocess(which: str, n_docs: int, method: str = "percentile", varying_targets: bool = False) -> dict:
    """`which` is "ours", "ours-1cpu" (pinned to one CPU, so one thread) or "scipy"."""
    command = [sys.executable, __file__, "--one", which, "--n", str(n_docs), "--method", method]
    if varying_targets:
        command.append("--varying-targets")
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def floor(n_docs: int = 100_000) -> dict:
    """One thread's work for B resamples at N = n_docs, part by part, against numpy's bounded integer draws."""
    import numpy as np

    from gatedv_stats.stats import resampling

    d, n_targets = make_sample(n_docs, True)
    packed = d + 1j * n_targets
    sizes, _, _ = blocks = resampling._document_blocks(n_docs)
    rows = resampling.CHUNK_ELEMENTS // min(n_docs, resampling._BLOCK_SIZE)  # resamples per chunk, as ours
    index = np.empty(rows * n_docs, dtype=np.intp)
    gathered = {dtype: np.empty(rows * n_docs, dtype=dtype) for dtype in (d.dtype, packed.dtype)}
    generator = np.random.default_rng(0)
    parts = {
        "bounded integer draws, N per resample (scipy's)":
            lambda: generator.integers(0, n_docs, size=(rows, n_docs)),
        "our raw-bit offsets, N per resample":
            lambda: [resampling._uniform_offsets(generator, size, out=index[:rows * size]) for size in sizes],
        "our whole resample, equal targets (d)":
            lambda: resampling._resample_sums(generator, d, blocks, rows, (index, gathered[d.dtype])),
        "our whole resample, varying targets (d + i·n)":
            lambda: resampling._resample_sums(generator, packed, blocks, rows, (index, gathered[packed.dtype])),
    }
    seconds = {}
    for name, part in parts.items():
        start = time.process_time()
        for _ in range(SAMPLES // rows):
            part()
        seconds[name] = time.process_time() - start
    return seconds


def print_case(n_docs: int, method: str, varying: bool, ours: dict, one_cpu: dict, theirs: dict) -> None:
    print(f"{n_docs:>9,} {'varying' if varying else '256':>8} {method:>10} {ours['seconds']:>8.3f} "
          f"{one_cpu['seconds']:>8.3f} {theirs['seconds']:>8.3f} {theirs['seconds'] / ours['seconds']:>6.1f}x "
          f"{theirs['seconds'] / one_cpu['seconds']:>6.1f}x {ours['cpu_seconds']:>8.3f} {theirs['cpu_seconds']:>9.3f} "
          f"{theirs['cpu_seconds'] / ours['cpu_seconds']:>6.1f}x {ours['peak_rss_mib']:>8.0f} "
          f"{theirs['peak_rss_mib']:>9.0f}  [{ours['interval'][0]:.6f}, {ours['interval'][1]:.6f}] | "
          f"[{theirs['interval'][0]:.6f}, {theirs['interval'][1]:.6f}]", flush=True)


def main(as_json: bool) -> None:
    load = os.getloadavg()[0]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs (load average {load:.1f}), "
          f"Python {platform.python_version()}")
    print(f"B = {SAMPLES:,} resamples; one run each. 'ours' on its threads, '1 CPU' pinned to one CPU; ratios are "
          "scipy / ours for wall time (threads, 1 CPU) and for CPU seconds (threads); peak RSS per process (MiB)\n")
    print(f"{'N':>9} {'targets':>8} {'method':>10} {'ours s':>8} {'1 CPU s':>8} {'scipy s':>8} {'ratio':>7} "
          f"{'1 CPU':>7} {'ours cpu':>8} {'scipy cpu':>9} {'ratio':>7} {'ours MiB':>8} {'scipy MiB':>9}  "
          "intervals (ours | scipy)")
    results: list[dict[str, Any]] = []
    for n_docs, method, varying in CASES:
        runs = {which: in_subprocess(which, n_docs, method, varying) for which in ("ours", "ours-1cpu", "scipy")}
        print_case(n_docs, method, varying, runs["ours"], runs["ours-1cpu"], runs["scipy"])
        results.append({"n_docs": n_docs, "method": method, "varying_targets": varying, **runs})
    threads = results[0]["ours"]["threads"]
    print(f"\nours used {threads} thread(s) ({len(os.sched_getaffinity(0))} CPUs available to this process)")
    for case in results:
        if case["n_docs"] == 100_000:
            ratio = case["scipy"]["seconds"] / case["ours"]["seconds"]
            target = TARGETS[case["varying_targets"]]
            print(f"N = 100,000, {'varying' if case['varying_targets'] else 'equal'} targets: {ratio:.1f}x scipy "
                  f"(target >= {target:.0f}x {'met' if ratio >= target else 'NOT met'}); "
                  f"1 CPU {case['scipy']['seconds'] / case['ours-1cpu']['seconds']:.1f}x, "
                  f"CPU seconds {case['scipy']['cpu_seconds'] / case['ours']['cpu_seconds']:.1f}x")
    big = in_subprocess("ours", 1_000_000, "percentile", True)
    print(f"\nN = 1,000,000 (varying targets), ours only: {big['seconds']:.2f} s ({big['cpu_seconds']:.2f} s CPU, "
          f"{big['threads']} threads), peak RSS {big['peak_rss_mib']:.0f} MiB ({big['rss_after_imports_mib']:.0f} MiB "
          f"after imports and data); target < 1 GiB {'met' if big['peak_rss_mib'] < 1024 else 'NOT met'}")
    parts = floor()
    print(f"\none thread's work at N = 100,000, B = {SAMPLES:,} (CPU seconds, each part timed alone):")
    for name, seconds in parts.items():
        print(f"  {name:<48} {seconds:6.3f} s")
    if as_json:
        print(json.dumps({"samples": SAMPLES, "load_average": load, "threads": threads, "cases": results,
                          "n_1000000": big, "floor_seconds": parts}, indent=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print every figure as one JSON object at the end")
    parser.add_argument("--one", choices=["ours", "ours-1cpu", "scipy"], help="measure one case here (internal)")
    parser.add_argument("--n", type=int, default=2048)
    parser.add_argument("--method", choices=["percentile", "bca"], default="percentile")
    parser.add_argument("--varying-targets", action="store_true")
    args = parser.parse_args()
    if args.one:
        if args.one == "ours-1cpu":
            os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        print(json.dumps(measure(args.one.removesuffix("-1cpu"), args.n, args.method, args.varying_targets)))
    else:
        main(args.json)
