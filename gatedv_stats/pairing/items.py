"""Pair the item scores of two arms on a downstream task: runs by training seed, items by `doc_id`.

Items pair only when the harness recorded the same item for both: the hashes of its document, prompt and
target (`doc_hash`, `prompt_hash`, `target_hash`, compared where the files carry them) and the task's
configuration (`task_config_sha256`, `n_shot`) must agree, else one error names the first differing item or
file and the field (`allow_mismatch` compares them anyway, with a note). The result is the same `Paired` as the
loss files', with items as its units (weighted equally) and the metric's scale.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.io.itemfiles import HASH_COLUMNS, ItemRun, read_item_inputs
from gatedv_stats.io.lossfiles import SkippedFile
from gatedv_stats.pairing.paired import (
    Paired,
    check_distinct_arms,
    check_mismatch_fields,
    paired_seeds,
    provenance_notes,
    runs_by_seed,
    shared_setup,
    unit_rows,
)
from gatedv_stats.pairing.selection import arm_sides, natural_key
from gatedv_stats.stats.scale import metric_scale

RUN_FIELDS = ("task_config_sha256", "n_shot")
ITEM_SETUP = ("task", "n_shot", "task_config_sha256")  # what a noise floor of item scores must match
MISMATCH_FIELDS = HASH_COLUMNS + RUN_FIELDS


def pair_items(runs: Sequence[ItemRun], *, baseline_arm: str, variant_arm: str, metric: str, task: str | None = None,
               allow_mismatch: Sequence[str] = (), allow_unpaired: bool = False) -> Paired:
    """Pair the runs of `baseline_arm` and `variant_arm` on `task` (needed when the runs hold several) by seed, and
    their items by `doc_id`, checking that both arms scored the same items in the same way."""
    check_mismatch_fields(allow_mismatch, MISMATCH_FIELDS)
    check_distinct_arms(baseline_arm, variant_arm)
    tasks = sorted({run.task for run in runs})
    if task is None and len(tasks) > 1:
        raise InputError(f"the item scores hold several tasks ({', '.join(tasks)}); choose one")
    runs = [run for run in runs if task is None or run.task == task]
    if not runs:
        raise InputError(f"no item scores of task {task!r} (tasks found: {', '.join(tasks) or 'none'})")
    task = runs[0].task
    prefix = f"task {task}: "
    by_seed: list[dict[int, ItemRun]] = []
    for arm in (baseline_arm, variant_arm):
        by_seed.append(runs_by_seed(runs, arm, prefix=prefix))
        if not by_seed[-1]:
            arms = ", ".join(sorted({run.arm for run in runs}, key=natural_key))
            raise InputError(f"{prefix}no item scores of arm {arm!r} (arms found: {arms})")
    seeds, unpaired, ordered = paired_seeds(by_seed[0], by_seed[1], baseline_arm, variant_arm,
                                            allow_unpaired=allow_unpaired, prefix=prefix)
    higher = _direction(ordered, metric)
    mismatches = provenance_notes(ordered, RUN_FIELDS, allow_mismatch, item_setup_value)
    doc_ids, rows = unit_rows([run.items["doc_id"] for run in ordered], [run.path for run in ordered], "item")
    mismatches += _check_hashes(ordered, rows, doc_ids, tuple(allow_mismatch))
    # Finite: every run holds `metric` (`_direction`), and reading a run checked every metric's values.
    scores = np.stack([run.items[metric].to_numpy(dtype=np.float64)[index] for run, index in zip(ordered, rows)])
    first = ordered[0]
    group_columns = [column for column in first.items.columns if column not in (
        "doc_id", *HASH_COLUMNS, *first.metrics) and not pd.api.types.is_numeric_dtype(first.items[column])]
    proportion = bool(np.all((scores >= 0.0) & (scores <= 1.0)))
    half = len(seeds)
    return Paired(
        baseline_arm=baseline_arm, variant_arm=variant_arm, seeds=np.array(seeds, dtype=np.int64), doc_ids=doc_ids,
        n_units=np.ones(len(doc_ids), dtype=np.int64), baseline=scores[:half], variant=scores[half:],
        doc_columns=first.items[group_columns].iloc[rows[0]].reset_index(drop=True),
        sources={"baseline": [run.path for run in ordered[:half]], "variant": [run.path for run in ordered[half:]]},
        dropped_seeds=unpaired, mismatches=mismatches, unit="item",
        scale=metric_scale(metric, higher, proportion), task=task,
        setup=shared_setup(ordered, ITEM_SETUP, item_setup_value))


def pair_tasks(runs: Sequence[ItemRun], *, reference: str, metric: str, variant_arm: str | None = None,
               allow_mismatch: Sequence[str] = (), allow_unpaired: bool = False) -> list[Paired]:
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


def item_setup_value(run: ItemRun, name: str) -> object:
    """A setup field of an item-score run (`ITEM_SETUP`, `RUN_FIELDS`)."""
    return {"task": run.task, "n_shot": run.n_shot}.get(name, run.meta.get(name))


def _direction(runs: Sequence[ItemRun], metric: str) -> bool:
    """Whether higher scores of `metric` are better, as every run records it."""
    directions = {}
    for run in runs:
        if metric not in run.metrics:
            raise InputError(f"{run.path}: no metric {metric!r} (metrics: {', '.join(run.metrics)})")
        directions[bool(run.higher_is_better[metric])] = run  # reading a run found every metric's direction
    if len(directions) > 1:
        raise InputError(f"{directions[True].path} and {directions[False].path} disagree on whether a higher "
                         f"{metric} is better")
    return next(iter(directions))


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
                raise ParameterError("allow_mismatch", f"{text}: they were not scored on the same item "
                                     f"({{allow_mismatch}} {column} pairs them anyway)", leading=False)
            notes.append(f"compared although {text}")
            break
    return tuple(notes)


def load_item_pairs(*, tables: Sequence[str] | None = None, baseline: Sequence[str] | None = None,
                    variant: Sequence[str] | None = None, baseline_arm: str | None = None,
                    variant_arm: str | None = None, metric: str, allow_mismatch: Sequence[str] = (),
                    allow_unpaired: bool = False, skipped: list[SkippedFile] | None = None) -> list[Paired]:
    """Read item-score inputs and pair the two arms on every task both scored: either `baseline` and `variant` paths
    (their arms are the ones the files record), or `tables` holding both arms, told apart by `baseline_arm` and
    `variant_arm`. `skipped`: see `read_item_inputs`."""
    sides = arm_sides(lambda inputs: read_item_inputs(inputs, skipped=skipped), "item-score", tables=tables,
                      baseline=baseline, variant=variant, baseline_arm=baseline_arm, variant_arm=variant_arm)
    if not tables:  # each side's arm is the one its files record
        given = baseline_arm is not None and variant_arm is not None
        baseline_arm, variant_arm = (arm or _single_arm(side, name) for arm, side, name
                                     in ((baseline_arm, sides[0], "baseline"), (variant_arm, sides[1], "variant")))
        if not given and baseline_arm == variant_arm:  # pairing tells the arms apart by name
            raise InputError(f"{sides[0][0].path} (baseline) and {sides[1][0].path} (variant) are both item scores "
                             f"of arm {baseline_arm!r}; item scores pair two arms told apart by name: give the other "
                             "arm's files on one side")
    runs = [run for run in sides[0] if run.arm == baseline_arm] + [run for run in sides[1] if run.arm == variant_arm]
    assert baseline_arm is not None and variant_arm is not None  # named or read from the files above
    return pair_tasks(runs, reference=baseline_arm, variant_arm=variant_arm, metric=metric,
                      allow_mismatch=allow_mismatch, allow_unpaired=allow_unpaired)


def _single_arm(runs: Sequence[ItemRun], side: str) -> str:
    arms = sorted({run.arm for run in runs}, key=natural_key)
    if len(arms) != 1:
        raise ParameterError(f"{side}_arm", f"the {side} item scores hold several arms ({', '.join(arms)}); select "
                             f"one with {{{side}_arm}}", leading=False)
    return arms[0]
