"""Align the item scores of two arms on one downstream task: pairs by training seed, items by `doc_id`.

Items pair only when the harness recorded the same item for both: the hashes of its document, prompt and
target (`doc_hash`, `prompt_hash`, `target_hash`, compared where the files carry them) and the task's
configuration (`task_config_sha256`, `n_shot`) must agree, else one error names the first differing item or
file and the field (`allow_mismatch` compares them anyway, with a note).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.core.files import paths_under
from gatedv_stats.io.discovery import found_item_file
from gatedv_stats.io.itemfiles import HASH_COLUMNS, ItemRun, read_item_inputs
from gatedv_stats.io.lossfiles import SkippedFile
from gatedv_stats.pairing.selection import natural_key

RUN_FIELDS = ("task_config_sha256", "n_shot")
MISMATCH_FIELDS = HASH_COLUMNS + RUN_FIELDS
_SHOWN = 5


@dataclass(frozen=True)
class PairedScores:
    """One metric's item scores of two arms on the same items of one task, row s = seed `seeds[s]`."""

    baseline_arm: str
    variant_arm: str
    task: str
    metric: str
    higher_is_better: bool
    seeds: np.ndarray  # (S,) int64, sorted
    doc_ids: np.ndarray  # (N,) object, sorted
    baseline: np.ndarray  # (S, N) float64 scores
    variant: np.ndarray  # (S, N) float64
    groups: pd.DataFrame  # N rows aligned with doc_ids: the grouping columns (subtask, ...)
    sources: dict  # {"baseline": [path per seed], "variant": [...]}
    dropped_seeds: tuple = field(default=())  # seeds in one arm only, dropped by allow_unpaired
    mismatches: tuple[str, ...] = field(default=())  # differences accepted through allow_mismatch

    @property
    def n_seeds(self) -> int:
        return int(self.seeds.shape[0])

    @property
    def n_items(self) -> int:
        return int(self.doc_ids.shape[0])

    @property
    def proportion(self) -> bool:
        """Every score lies in [0, 1] (accuracy and the like): differences read as points."""
        return bool(all(np.all((scores >= 0.0) & (scores <= 1.0)) for scores in (self.baseline, self.variant)))

    @property
    def notes(self) -> tuple[str, ...]:
        """What the pairing dropped or accepted, for the output's warnings."""
        dropped = (f"{self.task}: dropped unpaired seeds {', '.join(map(str, self.dropped_seeds))}",) \
            if self.dropped_seeds else ()
        return dropped + self.mismatches


def pair_items(runs: Sequence[ItemRun], *, baseline_arm: str, variant_arm: str, metric: str, task: str | None = None,
               allow_mismatch: Sequence[str] = (), allow_unpaired: bool = False) -> PairedScores:
    """Pair the runs of `baseline_arm` and `variant_arm` on `task` (needed when the runs hold several) by seed, and
    their items by `doc_id`, checking that both arms scored the same items in the same way."""
    unknown = sorted(set(allow_mismatch) - set(MISMATCH_FIELDS))
    if unknown:
        raise ParameterError("allow_mismatch", f"{', '.join(unknown)} is not one of {', '.join(MISMATCH_FIELDS)}")
    if baseline_arm == variant_arm:
        raise InputError(f"--baseline-arm and --variant-arm both name {baseline_arm!r}; name two different arms")
    runs = _task_runs(runs, task)
    task = runs[0].task
    by_seed = [_by_seed(runs, arm, task) for arm in (baseline_arm, variant_arm)]
    seeds = sorted(set(by_seed[0]) & set(by_seed[1]))
    unpaired = tuple(sorted(set(by_seed[0]) ^ set(by_seed[1])))
    if not seeds:
        raise InputError(f"task {task}: no training seed is shared by {baseline_arm} ({_seeds(by_seed[0])}) and "
                         f"{variant_arm} ({_seeds(by_seed[1])})")
    if unpaired and not allow_unpaired:
        raise InputError(f"task {task}: seeds present in one arm only: {', '.join(map(str, unpaired))} "
                         "(--allow-unpaired drops them)")
    ordered = [by_seed[0][seed] for seed in seeds] + [by_seed[1][seed] for seed in seeds]
    higher = _direction(ordered, metric)
    mismatches = _check_run_fields(ordered, tuple(allow_mismatch))
    doc_ids, rows = _item_rows(ordered)
    mismatches += _check_hashes(ordered, rows, doc_ids, tuple(allow_mismatch))
    scores = np.stack([run.items[metric].to_numpy(dtype=np.float64)[index] for run, index in zip(ordered, rows)])
    if not np.all(np.isfinite(scores)):
        run_index, item = np.argwhere(~np.isfinite(scores))[0]
        raise InputError(f"{ordered[run_index].path}: item {doc_ids[item]}: {metric} is not a finite number")
    first = ordered[0]
    group_columns = [column for column in first.items.columns if column not in (
        "doc_id", *HASH_COLUMNS, *first.metrics) and not pd.api.types.is_numeric_dtype(first.items[column])]
    half = len(seeds)
    return PairedScores(
        baseline_arm=baseline_arm, variant_arm=variant_arm, task=task, metric=metric, higher_is_better=higher,
        seeds=np.array(seeds, dtype=np.int64), doc_ids=doc_ids, baseline=scores[:half], variant=scores[half:],
        groups=first.items[group_columns].iloc[rows[0]].reset_index(drop=True),
        sources={"baseline": [run.path for run in ordered[:half]], "variant": [run.path for run in ordered[half:]]},
        dropped_seeds=unpaired, mismatches=mismatches)


def pair_tasks(runs: Sequence[ItemRun], *, reference: str, metric: str, variant_arm: str | None = None,
               allow_mismatch: Sequence[str] = (), allow_unpaired: bool = False) -> list[PairedScores]:
    """Every other arm (or only `variant_arm`) against `reference` on every task that holds both, tasks in name
    order, arms in natural name order (v2 before v10)."""
    arms = sorted({run.arm for run in runs}, key=natural_key)
    if reference not in arms:
        raise InputError(f"no item scores of arm {reference!r} (arms found: {', '.join(arms) or 'none'})")
    others = [arm for arm in arms if arm != reference] if variant_arm is None else [variant_arm]
    if not others or (variant_arm is not None and variant_arm not in arms):
        raise InputError(f"no item scores of an arm to compare with {reference!r} (arms found: {', '.join(arms)})")
    pairs = []
    for task in sorted({run.task for run in runs}):
        in_task = [run for run in runs if run.task == task]
        present = {run.arm for run in in_task}
        pairs += [pair_items(in_task, baseline_arm=reference, variant_arm=arm, metric=metric,
                             allow_mismatch=allow_mismatch, allow_unpaired=allow_unpaired)
                  for arm in others if arm in present and reference in present]
    if not pairs:
        raise InputError(f"no task holds {reference!r} together with {', '.join(others)}")
    return pairs


def check_input_kind(paths: Sequence[str], metric: str | None) -> None:
    """Refuse loss files given with --metric and item-score files given without it, in one line naming the flag."""
    for path in paths:
        if Path(path).is_dir():
            if metric is None and any(found_item_file(found) for found in paths_under(Path(path))):
                raise InputError(f"{path}: holds item-score files; compare downstream-task scores with --metric NAME "
                                 "(e.g. --metric acc)")
            continue
        if not Path(path).is_file():
            continue
        item_file = found_item_file(Path(path))  # an unreadable file is the reader's to report (or skip)
        if metric is not None and not item_file:
            raise InputError(f"{path}: not an item-score file; --metric compares downstream-task item scores (drop "
                             "--metric to compare loss files)")
        if metric is None and item_file:
            raise InputError(f"{path}: an item-score file; compare downstream-task scores with --metric NAME "
                             "(e.g. --metric acc)")


def _task_runs(runs: Sequence[ItemRun], task: str | None) -> list[ItemRun]:
    tasks = sorted({run.task for run in runs})
    if task is None and len(tasks) > 1:
        raise InputError(f"the item scores hold several tasks ({', '.join(tasks)}); choose one")
    chosen = [run for run in runs if task is None or run.task == task]
    if not chosen:
        raise InputError(f"no item scores of task {task!r} (tasks found: {', '.join(tasks) or 'none'})")
    return chosen


def _by_seed(runs: Sequence[ItemRun], arm: str, task: str) -> dict[int, ItemRun]:
    by_seed: dict[int, ItemRun] = {}
    for run in runs:
        if run.arm != arm:
            continue
        if run.seed in by_seed:
            raise InputError(f"task {task}: arm {arm} seed {run.seed} appears twice: {by_seed[run.seed].path} and "
                             f"{run.path}")
        by_seed[run.seed] = run
    if not by_seed:
        arms = ", ".join(sorted({run.arm for run in runs}, key=natural_key))
        raise InputError(f"task {task}: no item scores of arm {arm!r} (arms found: {arms})")
    return by_seed


def _seeds(by_seed: dict[int, ItemRun]) -> str:
    return ", ".join(map(str, sorted(by_seed)))


def _direction(runs: Sequence[ItemRun], metric: str) -> bool:
    """Whether higher scores of `metric` are better, as every run records it."""
    directions = {}
    for run in runs:
        if metric not in run.metrics:
            raise InputError(f"{run.path}: no metric {metric!r} (metrics: {', '.join(run.metrics)})")
        if metric not in run.higher_is_better:
            raise InputError(f"{run.path}: higher_is_better does not say which way {metric!r} is better")
        directions[bool(run.higher_is_better[metric])] = run
    if len(directions) > 1:
        raise InputError(f"{directions[True].path} and {directions[False].path} disagree on whether a higher "
                         f"{metric} is better")
    return next(iter(directions))


def _check_run_fields(runs: Sequence[ItemRun], allow_mismatch: tuple[str, ...]) -> tuple[str, ...]:
    """The task's configuration and shot count must agree between runs that record them."""
    notes = []
    for name in RUN_FIELDS:
        carrying = [run for run in runs if (run.n_shot if name == "n_shot" else run.meta.get(name)) not in (None, "")]
        values = {str(run.n_shot if name == "n_shot" else run.meta.get(name)): run for run in carrying}
        if len(values) < 2:
            continue
        (value_a, run_a), (value_b, run_b) = list(values.items())[:2]
        text = f"{name} differs: {run_a.path} has {value_a!r}, {run_b.path} has {value_b!r}"
        if name not in allow_mismatch:
            raise InputError(f"{text}; the task was not evaluated alike (--allow-mismatch {name} compares anyway)")
        notes.append(f"compared although {text}")
    return tuple(notes)


def _item_rows(runs: Sequence[ItemRun]) -> tuple[np.ndarray, list[np.ndarray]]:
    """The sorted doc ids of the first run and, for every run, the rows holding them; an error naming the items when
    a run scored other items."""
    first = runs[0].items["doc_id"].astype(str)
    doc_ids = np.sort(first.to_numpy(dtype=object))
    rows = []
    for run in runs:
        ids = pd.Index(run.items["doc_id"].astype(str).to_numpy(dtype=object))
        index = ids.get_indexer(doc_ids) if len(ids) == len(doc_ids) and ids.is_unique else None
        if index is None or np.any(index < 0):
            ours, theirs = set(doc_ids), set(ids)
            parts = [f"{len(missing)} missing from {source} (first: {', '.join(sorted(missing)[:_SHOWN])})"
                     for source, missing in ((runs[0].path, theirs - ours), (run.path, ours - theirs)) if missing]
            raise InputError(f"items differ between {runs[0].path} and {run.path}: "
                             f"{'; '.join(parts) or 'repeated doc_ids'}")
        rows.append(index)
    return doc_ids, rows


def _check_hashes(runs: Sequence[ItemRun], rows: list[np.ndarray], doc_ids: np.ndarray,
                  allow_mismatch: tuple[str, ...]) -> tuple[str, ...]:
    """Every item's hashes agree across the runs that carry them; the first differing item names the field."""
    notes = []
    for column in HASH_COLUMNS:
        carrying = [(run, index) for run, index in zip(runs, rows) if column in run.items.columns]
        if len(carrying) < 2:
            continue
        reference, reference_rows = carrying[0]
        ours = reference.items[column].astype(str).to_numpy()[reference_rows]
        for run, index in carrying[1:]:
            differ = np.flatnonzero(ours != run.items[column].astype(str).to_numpy()[index])
            if not differ.size:
                continue
            text = (f"{column} differs for {differ.size} items between {reference.path} and {run.path} (first: item "
                    f"{doc_ids[differ[0]]})")
            if column not in allow_mismatch:
                raise InputError(f"{text}: they were not scored on the same item (--allow-mismatch {column} pairs "
                                 "them anyway)")
            notes.append(f"compared although {text}")
            break
    return tuple(notes)


def load_item_pairs(*, tables: Sequence[str] | None = None, baseline: Sequence[str] | None = None,
                    variant: Sequence[str] | None = None, baseline_arm: str | None = None,
                    variant_arm: str | None = None, metric: str, allow_mismatch: Sequence[str] = (),
                    allow_unpaired: bool = False, skipped: list[SkippedFile] | None = None) -> list[PairedScores]:
    """Read item-score inputs and pair the two arms on every task both scored: either `baseline` and `variant` paths
    (their arms are the ones the files record), or `tables` holding both arms, told apart by `baseline_arm` and
    `variant_arm`. `skipped`: see `read_item_inputs`."""
    if tables and (baseline or variant):
        raise InputError("give either long tables / directories holding both arms, or --baseline and --variant files")
    if tables:
        runs = read_item_inputs(tables, skipped=skipped)
        missing = [flag for flag, arm in (("--baseline-arm", baseline_arm), ("--variant-arm", variant_arm))
                   if arm is None]
        if missing:
            arms = ", ".join(sorted({run.arm for run in runs}, key=natural_key))
            raise InputError(f"name the arms to compare with {' and '.join(missing)} (arms found: {arms})")
    elif baseline and variant:
        sides = [read_item_inputs(paths, skipped=skipped) for paths in (baseline, variant)]
        baseline_arm, variant_arm = (arm or _single_arm(side, name) for arm, side, name
                                     in ((baseline_arm, sides[0], "baseline"), (variant_arm, sides[1], "variant")))
        runs = [run for run in sides[0] if run.arm == baseline_arm] + [run for run in sides[1]
                                                                       if run.arm == variant_arm]
    else:
        raise InputError("give --baseline and --variant item-score files, or a long table with --baseline-arm and "
                         "--variant-arm")
    assert baseline_arm is not None and variant_arm is not None  # named or read from the files above
    return pair_tasks(runs, reference=baseline_arm, variant_arm=variant_arm, metric=metric,
                      allow_mismatch=allow_mismatch, allow_unpaired=allow_unpaired)


def _single_arm(runs: Sequence[ItemRun], side: str) -> str:
    arms = sorted({run.arm for run in runs}, key=natural_key)
    if len(arms) != 1:
        raise InputError(f"the {side} item scores hold several arms ({', '.join(arms)}); select one with "
                         f"--{side}-arm")
    return arms[0]
