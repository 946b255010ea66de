"""Item-score files (docs/method-statistics.md §5): the schema of per-item scores of a downstream task (accuracy, exact
match, the gold choice's log-likelihood, ...), read and written by `io.runfiles` like loss files.

A file holds one run of one task: one row per item (`doc_id`, one or more float metric columns, optional grouping
columns such as `subtask`, and the harness hashes `doc_hash`, `prompt_hash`, `target_hash`) and the run's metadata
(`format`, `arm`, `seed`, `task`, `n_shot`, `metrics`, `higher_is_better`, provenance); a long table's runs are told
apart by `arm`, `seed` and `task`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.core.files import read_seed
from gatedv_stats.io.columns import check_doc_ids, check_table, is_numeric, numeric_column, text_columns
from gatedv_stats.io.runfiles import (
    RUN_FILE_SUFFIXES,
    Run,
    RunSchema,
    SkippedFile,
    column_names,
    file_format,
    file_runs,
    read_runs,
    write_run,
)

ITEM_FORMAT = "gatedv-item-scores/1"
HASH_COLUMNS: tuple[str, ...] = ("doc_hash", "prompt_hash", "target_hash")
RUN_COLUMNS = ("arm", "seed", "task")
# Columns of a long table that are run metadata (one value per run), not per-item values.
META_COLUMNS = (*RUN_COLUMNS, "n_shot", "task_config_sha256")
# Which way is better for the metrics the harness and `gatedv import lm-eval` write; a file names any other's.
KNOWN_HIGHER_IS_BETTER = {
    "acc": True, "acc_norm": True, "acc_mutual_info": True, "exact_match": True, "f1": True, "mcc": True,
    "gold_loglik": True, "gold_margin": True, "loglik": True, "brier_score": False,
}


def validate_items(frame: pd.DataFrame, source: str, metrics: Sequence[str], *,
                   row_names: Sequence[str] | None = None) -> pd.DataFrame:
    """Check and normalise the per-item columns; returns doc_id, the metrics (float64, finite), then the other
    columns as text (grouping columns and hashes, none missing). An error in one row names it `<source>: row <n>`,
    or `row_names[i]` when given."""
    where = check_table(frame, source, row_names, ("doc_id",), "columns")
    if not metrics:
        raise InputError(f"{source}: no metric column (a numeric per-item score such as acc or exact_match)")
    out = pd.DataFrame({"doc_id": check_doc_ids(frame["doc_id"], source, where).to_numpy(dtype=object)})
    for metric in metrics:
        if metric not in frame.columns:
            raise InputError(f"{source}: metric {metric!r} has no column; its columns are "
                             f"{', '.join(map(str, frame.columns))}")
        out[metric] = numeric_column(frame[metric], metric, source, where, finite=True)
    return text_columns(frame, out, where, "item")


def is_item_file(path: str | Path) -> bool:
    """Whether `path` is an item-score file: its metadata says so, or (a file of another tool) it has a doc_id and
    a known metric column and no loss_sum. Reads only the schema, the header line and the sidecar."""
    path = Path(path)
    if path.suffix not in RUN_FILE_SUFFIXES or not path.is_file():
        return False
    names = column_names(path)
    return file_format(path) == ITEM_FORMAT or (
        "doc_id" in names and "loss_sum" not in names and any(name in KNOWN_HIGHER_IS_BETTER for name in names))


def metric_directions(meta: dict, metrics: Sequence[str], source: str,
                      given: dict[str, bool] | None = None) -> dict[str, bool]:
    """Whether a higher value of each metric is better: as the metadata records it, else as the caller `given` it,
    else as the harness's metrics are known; a metric without a direction, or given against its file's, is an
    error."""
    recorded = meta.get("higher_is_better") or {}
    if not isinstance(recorded, dict):
        raise InputError(f"{source}: metadata higher_is_better must map metric names to true/false, got "
                         f"{recorded!r}")
    directions = {}
    for metric in metrics:
        direction = recorded.get(metric, (given or {}).get(metric, KNOWN_HIGHER_IS_BETTER.get(metric.split(",")[0])))
        if not isinstance(direction, bool):
            raise ParameterError("higher_is_better", f"{source}: no direction for the metric {metric!r}: say which way "
                                 "is better ({higher_is_better}, or its opposite), or record it in the file's "
                                 f"metadata (higher_is_better {{{metric!r}: true or false}})", leading=False)
        if given is not None and metric in given and given[metric] != direction:
            raise InputError(f"{source}: its metadata says a {'higher' if direction else 'lower'} {metric} is "
                             "better, the call the opposite")
        directions[metric] = direction
    return directions


def item_schema(metric: str | None = None, higher_is_better: bool | None = None) -> RunSchema:
    """The schema of item-score files, the direction of `metric` given by the caller where a file records none."""
    given = {metric: higher_is_better} if metric and higher_is_better is not None else None

    def check_items(frame: pd.DataFrame, meta: dict, source: str) -> tuple[pd.DataFrame, dict]:
        metrics = _metric_names(frame, meta, source)
        items = validate_items(frame, source, metrics)
        n_shot = None if meta.get("n_shot") is None else read_seed(meta["n_shot"], f"{source}: n_shot")
        return items, {**meta, "task": str(meta["task"]), "n_shot": n_shot, "metrics": list(metrics),
                       "higher_is_better": metric_directions(meta, metrics, source, given)}

    return RunSchema("items", "item-score file", RUN_COLUMNS, META_COLUMNS, check_items, is_item_file,
                     "item-score files (*.parquet / *.csv of per-item metrics)", ITEM_FORMAT)


ITEMS = item_schema()


def write_item_file(path: str | Path, items: pd.DataFrame, meta: dict) -> None:
    """Write one run of one task as Parquet (a `.parquet` path), atomically, each metadata value JSON-encoded under
    its key; `meta` needs `arm`, `seed` and `task`, and `metrics` when a metric column has an unusual name."""
    write_run(path, items, meta, ITEMS)


def read_item_file(path: str | Path) -> list[Run]:
    """The runs of one item-score file or long table."""
    return file_runs(path, ITEMS)


def read_item_inputs(paths: Sequence[str | Path], *, skipped: list[SkippedFile] | None = None) -> list[Run]:
    """Read item-score files, long tables and directories (searched recursively for item-score files, see
    `is_item_file`), as `io.runfiles.read_runs` does."""
    return read_runs(paths, (ITEMS,), skipped=skipped)


def _metric_names(frame: pd.DataFrame, meta: dict, source: str) -> tuple[str, ...]:
    """The metric columns: those the metadata lists, else every numeric column other than doc_id and hashes."""
    listed = meta.get("metrics")
    if listed is not None:
        if not isinstance(listed, list) or not all(isinstance(name, str) and name.strip() for name in listed):
            raise InputError(f"{source}: metadata metrics must be a list of column names, got {listed!r}")
        return tuple(listed)
    return tuple(str(column) for column in frame.columns if column not in ("doc_id", *HASH_COLUMNS, *META_COLUMNS)
                 and not pd.api.types.is_bool_dtype(frame[column].dtype)
                 and (column in KNOWN_HIGHER_IS_BETTER or is_numeric(frame[column])))


__all__ = ["HASH_COLUMNS", "ITEMS", "ITEM_FORMAT", "is_item_file", "item_schema", "metric_directions",
           "read_item_file", "read_item_inputs", "validate_items", "write_item_file"]
