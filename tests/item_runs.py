"""Item-score runs built in memory for the downstream-task tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from gatedv_stats.io.itemfiles import write_item_file
from gatedv_stats.io.runfiles import Run
from gatedv_stats.pairing.pair import pair_families
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.stats.scale import MetricScale


def item_run(arm: str, seed: int, scores: np.ndarray, *, task: str = "hellaswag", metric: str = "acc",
             higher_is_better: bool = True, n_shot: int | None = 0, hashes: bool = True,
             subtasks: np.ndarray | None = None, meta: dict | None = None) -> Run:
    """One run of `arm` and `seed` scoring items item000… with `scores` on `metric`."""
    scores = np.asarray(scores, dtype=np.float64)
    items = pd.DataFrame({"doc_id": [f"item{i:03d}" for i in range(scores.size)], metric: scores})
    if subtasks is not None:
        items["subtask"] = np.asarray(subtasks, dtype=object)
    if hashes:
        for column in ("doc_hash", "prompt_hash", "target_hash"):
            items[column] = [f"{column[0]}{i}" for i in range(scores.size)]
    return Run(arm=arm, seed=seed, units=items, source=f"{task}-{arm}-{seed}", sha256="", schema="items",
               meta={"arm": arm, "seed": seed, "task": task, "n_shot": n_shot, "metrics": [metric],
                     "higher_is_better": {metric: higher_is_better}, "task_config_sha256": "cfg", **(meta or {})})


def pair_items(runs: list[Run], *, metric: str = "acc", baseline_arm: str = "baseline", variant_arm: str = "gatedv",
               **options) -> Paired:
    """The pair of two arms' item scores on their one task, as the library pairs two sides."""
    [paired] = pair_families([run for run in runs if run.arm == baseline_arm],
                             [run for run in runs if run.arm == variant_arm], MetricScale(metric=metric), **options)
    return paired


def paired_runs(baseline: np.ndarray, variant: np.ndarray, *, seeds: list[int] | None = None,
                **kwargs) -> list[Run]:
    """Runs of arms "baseline" and "gatedv" from (S, N) score arrays, row s = seed `seeds[s]` (default 0, 1, …)."""
    seeds = list(range(len(baseline))) if seeds is None else seeds
    return [item_run(arm, seed, row, **kwargs) for arm, scores in (("baseline", baseline), ("gatedv", variant))
            for seed, row in zip(seeds, scores)]


SHIFTS = {"arc_easy": 0.25, "hellaswag": 0.0}


def write_tasks(folder: Path, arms=("baseline", "gatedv"), tasks=SHIFTS, n_seeds=3, n_items=80) -> Path:
    """Item-score files of every arm, seed and task; the variant arms' accuracy is `tasks[task]` higher."""
    folder.mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    for task, shift in tasks.items():
        p = rng.uniform(0.2, 0.7, n_items)
        for arm in arms:
            for seed in range(n_seeds):
                scores = (rng.random(n_items) < p + (0.0 if arm == "baseline" else shift)).astype(float)
                run = item_run(arm, seed, scores, task=task)
                write_item_file(folder / f"{task}_{arm}_{seed}.parquet", run.units,
                                {"arm": arm, "seed": seed, "task": task, "n_shot": 0, "metrics": ["acc"]})
    return folder
