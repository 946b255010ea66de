"""Document bootstrap: ours against `scipy.stats.bootstrap(paired=True)` on the same ratio statistic.

    python bench/bootstrap.py            # B = 2,000 at N = 2,048 and 100,000, then the N = 1,000,000 memory check

Each measurement runs in a fresh subprocess so that its peak RSS (ru_maxrss) is its own; the RSS of the
interpreter after imports is printed beside it. Targets (issue 2): ≥ 10× scipy at N = 100,000,
< 0.1 s at N = 2,048, < 1 GiB at N = 1,000,000.
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

SAMPLES = 2000


def make_sample(n_docs: int, varying_targets: bool):
    import numpy as np

    rng = np.random.default_rng(n_docs)
    n_targets = rng.integers(64, 257, size=n_docs).astype(np.float64) if varying_targets else np.full(n_docs, 256.0)
    d = rng.normal(-0.02, 0.1, size=n_docs) * n_targets
    return d, n_targets


def measure(which: str, n_docs: int, method: str, varying_targets: bool) -> dict:
    """Run one bootstrap in this process and report time, peak RSS and the interval."""
    import numpy as np
    from scipy import stats

    from gatedv_stats.stats.resampling import document_bootstrap

    d, n_targets = make_sample(n_docs, varying_targets)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start, cpu_start = time.perf_counter(), time.process_time()
    if which == "ours":
        result = document_bootstrap(d, n_targets, n_resamples=SAMPLES, seed=0, method=method)
        interval = result.confidence_interval
    else:
        def ratio(numerator, denominator, axis=-1):
            return np.sum(numerator, axis=axis) / np.sum(denominator, axis=axis)

        result = stats.bootstrap((d, n_targets), ratio, paired=True, vectorized=True, n_resamples=SAMPLES,
                                 method="BCa" if method == "bca" else "percentile", rng=np.random.default_rng(0))
        interval = tuple(result.confidence_interval)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "peak_rss_mib": peak, "rss_after_imports_mib": rss_before,
            "interval": [float(x) for x in interval]}


def in_subprocess(which: str, n_docs: int, method: str = "percentile", varying_targets: bool = False) -> dict:
    command = [sys.executable, __file__, "--one", which, "--n", str(n_docs), "--method", method]
    if varying_targets:
        command.append("--varying-targets")
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def main() -> None:
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"B = {SAMPLES:,} resamples; one run each: wall and CPU seconds (CPU time is steadier on a shared"
          " machine), peak RSS per process (MiB)\n")
    header = f"{'N':>9} {'targets':>8} {'method':>10} {'ours s':>8} {'scipy s':>8} {'ratio':>7} " \
             f"{'ours cpu':>9} {'scipy cpu':>10} {'ratio':>7} " \
             f"{'ours MiB':>9} {'scipy MiB':>10} {'imports MiB':>12}  intervals (ours | scipy)"
    print(header)
    cases = [(2048, "percentile", False), (2048, "percentile", True), (2048, "bca", False),
             (100_000, "percentile", False), (100_000, "percentile", True)]
    for n_docs, method, varying in cases:
        ours = in_subprocess("ours", n_docs, method, varying)
        theirs = in_subprocess("scipy", n_docs, method, varying)
        print(f"{n_docs:>9,} {'varying' if varying else '256':>8} {method:>10} {ours['seconds']:>8.3f} "
              f"{theirs['seconds']:>8.3f} {theirs['seconds'] / ours['seconds']:>6.1f}x {ours['cpu_seconds']:>9.3f} "
              f"{theirs['cpu_seconds']:>10.3f} {theirs['cpu_seconds'] / ours['cpu_seconds']:>6.1f}x {ours['peak_rss_mib']:>9.0f} "
              f"{theirs['peak_rss_mib']:>10.0f} {ours['rss_after_imports_mib']:>12.0f}  "
              f"[{ours['interval'][0]:.6f}, {ours['interval'][1]:.6f}] | "
              f"[{theirs['interval'][0]:.6f}, {theirs['interval'][1]:.6f}]", flush=True)
    big = in_subprocess("ours", 1_000_000, "percentile", True)
    print(f"\nN = 1,000,000 (varying targets), ours only: {big['seconds']:.2f} s ({big['cpu_seconds']:.2f} s CPU), peak RSS {big['peak_rss_mib']:.0f} MiB "
          f"({big['rss_after_imports_mib']:.0f} MiB after imports and data); target < 1 GiB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--one", choices=["ours", "scipy"], help="measure one case in this process (internal)")
    parser.add_argument("--n", type=int, default=2048)
    parser.add_argument("--method", choices=["percentile", "bca"], default="percentile")
    parser.add_argument("--varying-targets", action="store_true")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.n, args.method, args.varying_targets)))
    else:
        main()
