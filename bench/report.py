"""Report time for a 20-run experiment: 5 arms × 4 seeds on a 2,048-document held-out set, plus curves.

    python bench/report.py

Times `gatedv report` as a user runs it (a fresh process: interpreter start, imports, reading 20 loss files
and a curve file, 4 paired comparisons with B = 2,000 document-bootstrap resamples, figures, rendering) for
HTML, Markdown and LaTeX; HTML both with an empty cache (vl_convert builds the Vega JavaScript bundle) and
with the bundle cached. Target: under 10 s on 2 CPU cores.
"""

from __future__ import annotations

import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ARMS = {"baseline": 59.1, "gatedv": 57.9, "q-silu": 60.0, "qkv-silu": 58.9, "v-tanh": 58.4}
SEEDS = [0, 1, 2, 3]
N_DOCS = 2048
TARGET_SECONDS = 10.0


def build_experiment(root: Path) -> None:
    """20 loss files (one run directory each, with a curve.csv) of a paper-sized held-out set."""
    import pandas as pd

    from gatedv_stats.io.lossfiles import write_loss_file
    from gatedv_stats.testing import ppls_with_moments, synthetic_runs

    runs = synthetic_runs({arm: ppls_with_moments(ppl, 0.5, len(SEEDS)) for arm, ppl in ARMS.items()},
                          n_docs=N_DOCS, rng_seed=0, seeds=SEEDS)
    for run in runs:
        run_dir = root / f"{run.arm}-seed{run.seed}"
        write_loss_file(run_dir / "heldout.parquet", run.docs, {**run.meta, "eval_set": "heldout", "lr": 0.0048})
        final = ARMS[run.arm] * (1 + 0.004 * run.seed)
        curve = [{"arm": run.arm, "seed": run.seed, "lr": 0.0048, "step": step,
                  "dev_nll": math.log(final) + 6.0 * math.exp(-step / 4000)} for step in range(0, 32769, 1024)]
        pd.DataFrame(curve).to_csv(run_dir / "curve.csv", index=False)


def time_report(root: Path, fmt: str, cache: Path) -> tuple[float, float]:
    """Wall-clock and CPU seconds (user + system, all threads) of one `gatedv report` process."""
    out = root / f"report.{fmt}"
    env = {**os.environ, "GATEDV_CACHE_DIR": str(cache)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "cli", "report", str(root), "--format", fmt, "--out", str(out)],
                   check=True, env=env, stdout=subprocess.DEVNULL, cwd=Path(__file__).resolve().parents[1])
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs visible, Python {platform.python_version()}")
    print(f"experiment: {len(ARMS)} arms × {len(SEEDS)} seeds = {len(ARMS) * len(SEEDS)} runs, "
          f"{N_DOCS:,} documents, curves of 33 points, B = 2,000")
    with tempfile.TemporaryDirectory() as tmp:
        root, cache = Path(tmp) / "experiment", Path(tmp) / "cache"
        build_experiment(root)
        rows = [("html, empty bundle cache", time_report(root, "html", cache)),
                ("html, bundle cached", time_report(root, "html", cache)),
                ("md (SVG figures)", time_report(root, "md", cache)),
                ("latex (PDF figures)", time_report(root, "latex", cache))]
        html_size = (root / "report.html").stat().st_size
    print(f"load average before: {os.getloadavg()[0]:.1f} (other processes share the CPUs)")
    for name, (wall, cpu) in rows:
        print(f"gatedv report --format {name:<26} wall {wall:6.2f} s ({wall / TARGET_SECONDS:.2f} × the 10 s target), "
              f"CPU {cpu:6.2f} s")
    print(f"HTML report size: {html_size / 2**20:.2f} MiB (one file, Vega bundle inlined once)")


if __name__ == "__main__":
    main()
