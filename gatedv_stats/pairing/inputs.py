"""What the Python API accepts as the data of a comparison, turned into paired structures: paths (files, long tables,
directories), runs already read, a long pandas DataFrame, a `Paired`, or two (seeds × documents) arrays of loss
sums; loss files, or with a metric the item-score files of downstream tasks."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np
import pandas as pd

from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.core.files import paths_under
from gatedv_stats.io.discovery import found_item_file
from gatedv_stats.io.itemfiles import read_item_inputs
from gatedv_stats.io.lossfiles import LossRun, SkippedFile, runs_from_frame
from gatedv_stats.pairing.items import load_item_pairs, pair_tasks
from gatedv_stats.pairing.losses import load_paired, pilot_pair, runs_of
from gatedv_stats.pairing.paired import Paired, pilot_arm

PathLike: TypeAlias = str | os.PathLike[str]
# What holds runs: paths, runs already read (a list, or the `Runs` gv.load returns), or a long table in memory.
Inputs: TypeAlias = PathLike | Sequence[PathLike] | Sequence[LossRun] | pd.DataFrame
# One arm's side of a comparison: as Inputs, or (seeds × documents) loss sums.
Side: TypeAlias = Inputs | np.ndarray | Sequence[Sequence[float]]


# The options of the loss-file comparison that item scores have no use for: given with `metric`, they are refused
# rather than silently ignored.
_LOSS_FILE_ONLY = ("eval_set", "n_resamples", "rng_seed", "method", "n_permutations", "by", "bins", "min_docs", "unit",
                   "n_targets")


def refuse_loss_options(metric: str | None, **choices: object) -> None:
    """With `metric`, options of the loss-file comparison given are refused in one line naming them."""
    given = [name for name in _LOSS_FILE_ONLY if choices.get(name) is not None] if metric is not None else []
    if given:
        raise ParameterError(given[0], f"{', '.join('{' + name + '}' for name in given)}: only without "
                             "{metric} (they set the loss-file comparison)", (*given[1:], "metric"), leading=False)


def pairs_of(data: object, baseline: object, variant: object, baseline_arm: str | None, variant_arm: str | None,
           metric: str | None, allow_unpaired: bool, allow_mismatch: Sequence[str], skipped: list[SkippedFile] | None,
           *, eval_set: str | None, n_targets: object, unit: str | None) -> list[Paired]:
    """The pairs of two arms: one of loss files, or one per task both arms scored on `metric`."""
    if isinstance(data, Paired):
        if baseline is not None or variant is not None:
            raise ParameterError("data", "give either {data} or {baseline} and {variant}", ("baseline", "variant"),
                                 leading=False)
        return [data]
    refuse_loss_options(metric, eval_set=eval_set, n_targets=n_targets, unit=unit)
    if metric is None and (_is_numbers(baseline) or _is_numbers(variant)):
        return [_from_arrays(baseline, variant, n_targets, baseline_arm or "baseline",  # type: ignore[arg-type]
                             variant_arm or "variant")]
    check_kind([data, baseline, variant], metric)
    read: Callable[[Any], list] = path_list if metric is not None else runs_or_paths
    tables, baselines, variants = (None if side is None else read(side) for side in (data, baseline, variant))
    if metric is not None:
        return load_item_pairs(tables=tables, baseline=baselines, variant=variants, baseline_arm=baseline_arm,
                               variant_arm=variant_arm, metric=metric, allow_mismatch=allow_mismatch,
                               allow_unpaired=allow_unpaired, skipped=skipped)
    if isinstance(data, pd.DataFrame) and baseline is None and variant is None:  # arms default as a pilot's
        return [pilot_pair(tables, baseline_arm=baseline_arm, variant_arm=variant_arm,  # type: ignore[arg-type]
                           eval_set=eval_set, allow_unpaired=allow_unpaired, allow_mismatch=tuple(allow_mismatch),
                           unit=unit or "auto", what="frame")]
    return [load_paired(tables=tables, baseline=baselines, variant=variants,
                        baseline_arm=baseline_arm, variant_arm=variant_arm, eval_set=eval_set,
                        allow_unpaired=allow_unpaired, allow_mismatch=tuple(allow_mismatch), unit=unit or "auto",
                        skipped=skipped)]


def check_kind(sides: Sequence[object], metric: str | None) -> None:
    """Refuse loss files given with a metric and item-score files given without one, in one line naming the
    parameter (paths only; runs and tables are what they are)."""
    for given in [path for side in sides if isinstance(side, (str, os.PathLike, list, tuple))
                  for path in path_list(side)]:
        if not isinstance(given, (str, Path)):
            continue  # runs or tables already read
        path = Path(given)
        if path.is_dir():
            if metric is None and any(found_item_file(found) for found in paths_under(path)):
                raise ParameterError("metric", f"{given}: holds item-score files; compare downstream-task scores "
                                     "with {metric} NAME (e.g. {metric} acc)", leading=False)
            continue
        if not path.is_file():
            continue
        item_file = found_item_file(path)  # an unreadable file is the reader's to report (or skip)
        if metric is not None and not item_file:
            raise ParameterError("metric", f"{given}: not an item-score file; {{metric}} compares downstream-task "
                                 "item scores (drop {metric} to compare loss files)", leading=False)
        if metric is None and item_file:
            raise ParameterError("metric", f"{given}: an item-score file; compare downstream-task scores with "
                                 "{metric} NAME (e.g. {metric} acc)", leading=False)


def path_list(paths: PathLike | Sequence[PathLike]) -> list[PathLike]:
    return [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)


def runs_or_paths(data: Inputs) -> list:
    """Runs, or the paths to read them from (see `pairing.losses.runs_of`); a DataFrame as a long table."""
    if isinstance(data, pd.DataFrame):
        return runs_from_frame(data, {}, "frame", long_table=True)
    return path_list(data)  # type: ignore[arg-type]


def _is_numbers(side: object) -> bool:
    """Loss sums given as numbers: a NumPy array, or nested lists of numbers."""
    if isinstance(side, np.ndarray):
        return True
    if isinstance(side, (str, os.PathLike, pd.DataFrame)) or not isinstance(side, Sequence) or not side:
        return False
    first = side[0]
    return isinstance(first, (Sequence, np.ndarray)) and not isinstance(first, str) and len(first) > 0 and all(
        isinstance(value, (int, float, np.number)) for value in first)


def _from_arrays(baseline: object, variant: object, n_targets: Sequence[int] | np.ndarray | None, baseline_arm: str,
                 variant_arm: str) -> Paired:
    """Two arms' (S, N) loss sums, row s of both from seed pair s (seeds 0..S−1, documents doc0..), with each
    document's target count (default 1: the values are per-document mean losses)."""
    loss = [np.asarray(values, dtype=np.float64) for values in (baseline, variant)]
    if loss[0].ndim != 2 or loss[0].shape != loss[1].shape:
        raise ParameterError("variant", f"baseline and variant must be (seeds × documents) arrays of one shape, got "
                             f"{loss[0].shape} and {loss[1].shape}")
    n_seeds, n_docs = loss[0].shape
    counts = np.ones(n_docs, dtype=np.int64) if n_targets is None else np.asarray(n_targets)
    if counts.shape != (n_docs,):
        raise ParameterError("n_targets", f"one count per document: {n_docs} values, got {counts.shape}")
    frame = pd.DataFrame({"arm": np.repeat([baseline_arm, variant_arm], n_seeds * n_docs),
                          "seed": np.tile(np.repeat(np.arange(n_seeds), n_docs), 2),
                          "doc_id": np.tile([f"doc{i}" for i in range(n_docs)], 2 * n_seeds),
                          "n_targets": np.tile(counts, 2 * n_seeds),
                          "loss_sum": np.concatenate([values.ravel() for values in loss])})
    return pilot_pair(runs_or_paths(frame), baseline_arm=baseline_arm, variant_arm=variant_arm, what="frame")


def pilot_of(data: Inputs, metric: str | None, eval_set: str | None, allow_unpaired: bool,
           allow_mismatch: Sequence[str], unit: str | None, skipped: list[SkippedFile] | None,
           baseline_arm: str | None = None, variant_arm: str | None = None) -> Paired:
    """The two arms of pilot runs (or of an earlier study): the baseline defaults to the arm named "baseline", the
    variant to the other; item scores of one task."""
    if metric is None:
        return pilot_pair(runs_of(runs_or_paths(data), skipped), baseline_arm=baseline_arm, variant_arm=variant_arm,
                          eval_set=eval_set, allow_unpaired=allow_unpaired, allow_mismatch=tuple(allow_mismatch),
                          unit=unit or "auto")
    runs = read_item_inputs(path_list(data), skipped=skipped)  # type: ignore[arg-type]
    pairs = pair_tasks(runs, reference=pilot_arm(baseline_arm, {run.arm for run in runs}), metric=metric,
                       variant_arm=variant_arm, allow_mismatch=allow_mismatch, allow_unpaired=allow_unpaired)
    if len(pairs) > 1:
        found = ", ".join(f"{paired.variant_arm} on {paired.task}" for paired in pairs)
        raise InputError(f"the pilot holds several tasks or variants ({found}); give the pilot files of one task "
                         "and two arms")
    return pairs[0]
