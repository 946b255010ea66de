"""Synthetic loss runs with chosen per-seed perplexities, for tests, examples and calibration."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

from gatedv_stats.io.lossfiles import LossRun

TARGETS_PER_DOC = 256


def synthetic_runs(ppl_by_seed: dict[str, list[float]], n_docs: int, seed: int = 0, *,
                   seeds: list[int] | None = None, noise: float = 0.05) -> list[LossRun]:
    """One `LossRun` per arm and seed whose token-averaged PPL is exactly the given value (to float rounding).

    Documents share a difficulty across arms and seeds (as real evaluation sets do), with per-run
    multiplicative noise of relative size `noise`; each run is then rescaled so Σℓ / Σn = ln(PPL).
    Seeds are numbered `seeds` (default 0, 1, ...) in the order given.
    """
    rng = np.random.default_rng(seed)
    doc_ids = np.array([f"doc{i:06d}" for i in range(n_docs)], dtype=object)
    n_targets = np.full(n_docs, TARGETS_PER_DOC, dtype=np.int64)
    n_bytes = rng.integers(700, 1300, size=n_docs)
    difficulty = rng.lognormal(mean=0.0, sigma=0.3, size=n_docs)
    runs = []
    for arm, ppls in ppl_by_seed.items():
        run_seeds = list(seeds) if seeds is not None else list(range(len(ppls)))
        if len(run_seeds) != len(ppls):
            raise ValueError(f"arm {arm}: {len(ppls)} perplexities for {len(run_seeds)} seeds")
        for run_seed, ppl in zip(run_seeds, ppls):
            shape = difficulty * rng.lognormal(mean=0.0, sigma=noise, size=n_docs) * n_targets
            loss_sum = shape * (np.log(ppl) * n_targets.sum() / shape.sum())
            docs = pd.DataFrame({"doc_id": doc_ids, "n_targets": n_targets, "loss_sum": loss_sum, "n_bytes": n_bytes})
            digest = hashlib.sha256(loss_sum.tobytes()).hexdigest()
            runs.append(LossRun(arm=arm, seed=int(run_seed), docs=docs, meta={"arm": arm, "seed": int(run_seed)},
                                source=f"synthetic[arm={arm},seed={run_seed}]", sha256=digest))
    return runs


def ppls_with_moments(mean: float, sd: float, n_seeds: int) -> list[float]:
    """n_seeds perplexities whose arithmetic mean and sample SD (ddof = 1) are exactly `mean` and `sd`."""
    if n_seeds == 1:
        return [float(mean)]
    spread = np.linspace(-1.0, 1.0, n_seeds)
    spread = spread / np.std(spread, ddof=1)
    return [float(value) for value in mean + sd * spread]
