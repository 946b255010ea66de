"""What the Python API accepts as the data of a comparison, turned into runs and paired structures: paths (files,
long tables, directories), runs already read, a long pandas DataFrame, a `Paired`, or two (seeds × documents)
arrays of loss sums. The kind of runs is decided here, once: loss files without a `metric`; with one, the
item-score files of downstream tasks or the score tables of that metric (`schemas_for`), read into one `Run` type
and compared on the scale of their kind (`scale_of`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TypeAlias

import numpy as np
import pandas as pd

from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.core.files import paths_under
from gatedv_stats.io.itemfiles import ITEMS, is_item_file, item_schema
from gatedv_stats.io.lossfiles import LOSS
from gatedv_stats.io.runfiles import Run, RunSchema, SkippedFile, read_runs, recognised, table_runs
from gatedv_stats.io.scorefiles import score_schema
from gatedv_stats.pairing.pair import pair_sides, pilot_pair
from gatedv_stats.pairing.paired import Paired, check_distinct_arms
from gatedv_stats.pairing.selection import arm_sides
from gatedv_stats.stats.scale import SCALES, Scale

PathLike: TypeAlias = str | os.PathLike[str]
# What holds runs: paths, runs already read (a list, or the `Runs` gv.load returns), or a long table in memory.
Inputs: TypeAlias = PathLike | Sequence[PathLike] | Sequence[Run] | pd.DataFrame
# One arm's side of a comparison: as Inputs, or (seeds × documents) loss sums.
Side: TypeAlias = Inputs | np.ndarray | Sequence[Sequence[float]]


def schemas_for(metric: str | None, higher_is_better: bool | None = None, *,
                every: bool = False) -> tuple[RunSchema, ...]:
    """The kinds of run file a call reads: loss files without a `metric` (and item-score files too when it reads
    `every` kind); with one, item-score files and score tables of it (`higher_is_better`: its direction, where the
    files record none)."""
    if metric is None:
        if higher_is_better is not None:
            raise ParameterError("higher_is_better", "a loss is better when lower: {higher_is_better} says which way "
                                 "a {metric} is better", ("metric",), leading=False)
        return (LOSS, ITEMS) if every else (LOSS,)
    return item_schema(metric, higher_is_better), score_schema(metric, higher_is_better)


def scale_of(runs: Sequence[Run], schemas: Sequence[RunSchema], metric: str | None) -> Scale:
    """The scale of the runs' kind (one kind in a comparison), on `metric`."""
    kinds = sorted({run.schema for run in runs}) or [schemas[0].name]
    if len(kinds) > 1:
        raise InputError(f"the inputs mix {' and '.join(SCALES[kind].files for kind in kinds)}; compare one kind at "
                         "a time")
    kind = SCALES[kinds[0]]
    if kinds[0] not in {schema.name for schema in schemas}:
        raise ParameterError("metric", f"the runs given are {kind.files}: " + (
            "drop {metric} to compare them" if kind.schema == LOSS.name else
            "compare them with {metric} NAME (e.g. {metric} acc)"), leading=False)
    return kind() if kind.schema == LOSS.name else kind(metric=str(metric))


def refuse_unused(schemas: Sequence[RunSchema], allowed: Sequence[str] = (), **choices: object) -> None:
    """Options given that the comparison of these runs has no use for are refused in one line naming them."""
    unused = SCALES[schemas[-1].name].unused_options
    given = [name for name in unused if choices.get(name) is not None and name not in allowed]
    if given:
        raise ParameterError(given[0], f"{', '.join('{' + name + '}' for name in given)}: only without "
                             "{metric} (they set the loss-file comparison)", (*given[1:], "metric"), leading=False)


def read_inputs(data: Inputs, schemas: Sequence[RunSchema], skipped: list[SkippedFile] | None = None) -> list[Run]:
    """Runs already read as they are; a DataFrame as a long table (of item scores where it has a task column);
    else the runs read from paths of the kinds the call compares."""
    if isinstance(data, pd.DataFrame):
        schema = schemas[0] if len(schemas) == 1 or "task" in data.columns else schemas[1]
        return table_runs(data, {}, "frame", "", schema, long_table=True)
    items = path_list(data)  # type: ignore[arg-type]
    runs: list[Run] = [item for item in items if isinstance(item, Run)]
    if runs and len(runs) != len(items):
        raise InputError("give loss runs or paths, not both in one list")
    if runs:
        return runs
    _check_kind(items, schemas)
    return read_runs(items, schemas, skipped=skipped)


def _check_kind(paths: Sequence[PathLike], schemas: Sequence[RunSchema]) -> None:
    """Refuse item-score files where only loss files are read (no metric), and files of no kind read where loss
    files are not (a metric), in one line naming the parameter."""
    names = {schema.name for schema in schemas}
    items, loss = ITEMS.name in names, LOSS.name in names
    for path in map(Path, paths):
        if not items and any(recognised(is_item_file, found) for found in
                             (paths_under(path) if path.is_dir() else [path] if path.is_file() else [])):
            held = "holds item-score files" if path.is_dir() else "an item-score file"
            raise ParameterError("metric", f"{path}: {held}; compare downstream-task scores with {{metric}} NAME (e.g. "
                                 "{metric} acc)", leading=False)
        if path.is_file() and not loss and not any(recognised(schema.belongs, path) for schema in schemas):
            raise ParameterError("metric", f"{path}: not an item-score file or one of the {schemas[-1].looked_for}; "
                                 "{metric} compares item scores and per-unit scores (drop {metric} to compare loss "
                                 "files)", leading=False)


def path_list(paths: PathLike | Sequence[PathLike]) -> list[PathLike]:
    return [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)


def pairs_of(data: object, baseline: object, variant: object, baseline_arm: str | None, variant_arm: str | None,
             metric: str | None, higher_is_better: bool | None, allow_unpaired: bool, allow_mismatch: Sequence[str],
             skipped: list[SkippedFile] | None, *, eval_set: str | None, n_targets: object,
             unit: str | None) -> list[Paired]:
    """The pairs of two arms: one, or one per task both arms scored on a downstream task's `metric`."""
    if isinstance(data, Paired):
        if baseline is not None or variant is not None:
            raise ParameterError("data", "give either {data} or {baseline} and {variant}", ("baseline", "variant"),
                                 leading=False)
        return [data]
    schemas = schemas_for(metric, higher_is_better)
    refuse_unused(schemas, eval_set=eval_set, n_targets=n_targets, unit=unit)
    options = {"allow_unpaired": allow_unpaired, "allow_mismatch": tuple(allow_mismatch), "unit": unit or "auto"}
    if _is_numbers(baseline) or _is_numbers(variant):
        if schemas[0] is not LOSS:
            raise ParameterError("baseline", "(seeds × documents) arrays are loss sums; give the scores of {metric} "
                                 "as files or a DataFrame", ("metric",))
        return [_from_arrays(baseline, variant, n_targets, baseline_arm or "baseline",  # type: ignore[arg-type]
                             variant_arm or "variant")]
    if isinstance(data, pd.DataFrame) and baseline is None and variant is None:  # arms default as a pilot's
        runs = read_inputs(data, schemas)
        return [pilot_pair(runs, scale_of(runs, schemas, metric), baseline_arm=baseline_arm, variant_arm=variant_arm,
                           eval_set=eval_set, what="frame", **options)]
    check_distinct_arms(baseline_arm, variant_arm)
    given = [None if side is None else read_inputs(side, schemas) if isinstance(side, pd.DataFrame)
             else path_list(side) for side in (data, baseline, variant)]  # type: ignore[arg-type]
    baseline_runs, variant_runs = arm_sides(lambda inputs: read_inputs(inputs, schemas, skipped),
                                            " or ".join(schema.what.removesuffix(" file") for schema in schemas),
                                            tables=given[0], baseline=given[1], variant=given[2],
                                            baseline_arm=baseline_arm, variant_arm=variant_arm)
    return pair_sides(baseline_runs, variant_runs, scale_of([*baseline_runs, *variant_runs], schemas, metric),
                      baseline_arm=baseline_arm, variant_arm=variant_arm, eval_set=eval_set, **options)


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
    return pilot_pair(read_inputs(frame, (LOSS,)), baseline_arm=baseline_arm, variant_arm=variant_arm, what="frame")


def runs_of(data: Inputs, metric: str | None, higher_is_better: bool | None = None,
            skipped: list[SkippedFile] | None = None) -> tuple[list[Run], Scale]:
    """The runs the inputs hold, of the kind `metric` says, and the scale they are compared on."""
    schemas = schemas_for(metric, higher_is_better)
    runs = read_inputs(data, schemas, skipped)
    return runs, scale_of(runs, schemas, metric)


def pilot_of(data: Inputs, metric: str | None, higher_is_better: bool | None, eval_set: str | None,
             allow_unpaired: bool, allow_mismatch: Sequence[str], unit: str | None,
             skipped: list[SkippedFile] | None, baseline_arm: str | None = None,
             variant_arm: str | None = None) -> Paired:
    """The two arms of pilot runs (or of an earlier study): the baseline defaults to the arm named "baseline", the
    variant to the other; item scores of one task."""
    refuse_unused(schemas_for(metric, higher_is_better), eval_set=eval_set, unit=unit)
    runs, scale = runs_of(data, metric, higher_is_better, skipped)
    return pilot_pair(runs, scale, baseline_arm=baseline_arm, variant_arm=variant_arm, eval_set=eval_set,
                      allow_unpaired=allow_unpaired, allow_mismatch=tuple(allow_mismatch), unit=unit or "auto")
