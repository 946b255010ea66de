"""Holm and Benjamini–Hochberg adjusted p-values (gatedv_stats.stats.multiple) against statsmodels'
`multipletests`, in one run: the time per call of a family of 10 p-values, with the libraries a study's process
holds loaded (torch, pandas, scipy: statsmodels' Holm runs a full garbage collection on every call, whose cost
grows with the objects alive), and whether both give the same values.

    python bench/multiple_testing.py [--calls 200]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd  # noqa: F401 - loaded, as in any analysis
import scipy.stats  # noqa: F401
import torch  # noqa: F401 - loaded, as in a process that trains or scores
from statsmodels.stats.multitest import multipletests

from gatedv_stats.stats.multiple import adjust_p_values


def per_call(function, calls: int) -> float:
    """Seconds per call, best of 3 rounds."""
    rounds = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(calls):
            function()
        rounds.append((time.perf_counter() - start) / calls)
    return min(rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    p = [float(value) for value in np.random.default_rng(0).uniform(0.0, 0.2, 10)]
    ours = per_call(lambda: adjust_p_values(p), args.calls)
    theirs = per_call(lambda: (multipletests(p, method="holm"), multipletests(p, method="fdr_bh")), args.calls)
    same = adjust_p_values(p) == {"holm": list(multipletests(p, method="holm")[1]),
                                  "bh": list(multipletests(p, method="fdr_bh")[1])}
    print(f"Holm + BH of 10 p-values, best of 3 × {args.calls} calls: ours {ours * 1e6:.1f} µs, statsmodels "
          f"{theirs * 1e6:.1f} µs per call, statsmodels/ours {theirs / ours:.0f}×; equal to the bit: {same}")


if __name__ == "__main__":
    main()
