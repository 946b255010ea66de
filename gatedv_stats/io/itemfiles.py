"""Item-score files (docs/method.md §5): per-item scores of a downstream task (accuracy, exact match, the gold
choice's log-likelihood, ...) of one run, read, validated and written like loss files.

A file holds one run of one task: one row per item (`doc_id`, one or more float metric columns, optional grouping
columns such as `subtask`, and the harness hashes `doc_hash`, `prompt_hash`, `target_hash`) plus run metadata
(`format`, `arm`, `seed`, `task`, `n_shot`, `metrics`, `higher_is_better`, provenance) in Parquet key-value
metadata, or for CSV as constant columns or a JSON sidecar `FILE.csv.json`. A long table holds several runs, told
apart by its `arm`, `seed` and `task` columns. Rows in error messages are counted from 1 over the data rows.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from gatedv_stats.core.errors import InputError
from gatedv_stats.core.files import read_json_object, read_seed
from gatedv_stats.io.lossfiles import (
    LOSS_FILE_SUFFIXES,
    SkippedFile,
    check_doc_ids,
    check_table,
    fail_rows,
    is_blank,
    numeric_column,
    read_inputs,
    read_table,
    reading,
    write_run_file,
)
from gatedv_stats.io.table_metadata import group_metadata

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


@dataclass(frozen=True)
class ItemRun:
    """One run of one task: per-item scores plus the run's metadata."""

    path: str  # the file; for one run of a long table "path[arm=A,seed=S,task=T]"
    arm: str
    seed: int
    task: str
    n_shot: int | None
    items: pd.DataFrame  # doc_id + metric columns + grouping/hash columns, validated
    metrics: tuple[str, ...]
    higher_is_better: dict[str, bool]
    meta: dict

    @property
    def source(self) -> str:
        """Where the run was read from, as pairing names it."""
        return self.path


def write_item_file(path: str | Path, items: pd.DataFrame, meta: dict) -> None:
    """Write one run of one task as Parquet (a `.parquet` path), atomically, each metadata value JSON-encoded under
    its key; `meta` needs `arm`, `seed` and `task`, and `metrics` when a metric column has an unusual name."""
    def rows(path: Path, meta: dict) -> pd.DataFrame:  # the metrics and their directions recorded in `meta`
        duplicated = sorted({str(name) for name in items.columns[items.columns.duplicated()]})
        if duplicated:
            raise InputError(f"{path}: column {', '.join(map(repr, duplicated))} appears more than once")
        metrics = _metric_names(items, meta, str(path))
        checked = validate_items(items, str(path), metrics)
        meta.update(metrics=list(metrics), higher_is_better=_higher_is_better(meta, metrics, str(path)))
        return checked

    write_run_file(path, "item-score file", {**meta, "format": ITEM_FORMAT}, RUN_COLUMNS, rows)


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
    for column in frame.columns:
        if column in out.columns:
            continue
        text = frame[column]
        fail_rows(is_blank(text), where, f"{column} is missing (where the column is given, every item needs one)")
        out[str(column)] = text.astype(str).to_numpy(dtype=object)
    return out


def is_item_file(path: str | Path) -> bool:
    """Whether `path` is an item-score file: its metadata says so, or (a file of another tool) it has a doc_id and
    a known metric column and no loss_sum. Reads only the schema, the header line and the sidecar."""
    path = Path(path)
    if path.suffix not in LOSS_FILE_SUFFIXES or not path.is_file():
        return False
    with reading(path):
        if path.suffix == ".parquet":
            schema = pq.read_schema(path)
            names, marked = schema.names, (schema.metadata or {}).get(b"format") == json.dumps(ITEM_FORMAT).encode()
        else:
            names = list(pd.read_csv(path, nrows=0).columns)
            sidecar = path.with_name(path.name + ".json")
            marked = sidecar.is_file() and read_json_object(sidecar).get("format") == ITEM_FORMAT
    return marked or ("doc_id" in names and "loss_sum" not in names and any(n in KNOWN_HIGHER_IS_BETTER for n in names))


def read_item_file(path: str | Path) -> list[ItemRun]:
    """The runs of one item-score file or long table."""
    path = Path(path)
    if path.suffix not in LOSS_FILE_SUFFIXES:
        raise InputError(f"{path}: not an item-score file (expected .parquet or .csv)")
    frame, file_meta = read_table(path)
    if file_meta.get("format") not in (None, ITEM_FORMAT):
        raise InputError(f"{path}: format {file_meta['format']!r} is not an item-score file ({ITEM_FORMAT})")
    if len(frame) == 0:
        raise InputError(f"{path}: no rows")
    keys = [column for column in RUN_COLUMNS if column in frame.columns]
    groups = list(frame.groupby([frame[key].astype(str) for key in keys], sort=True)) if keys else [((), frame)]
    return [_run(path, group.reset_index(drop=True), file_meta, keys, len(groups) > 1) for _, group in groups]


def read_item_inputs(paths: Sequence[str | Path], *, skipped: list[SkippedFile] | None = None) -> list[ItemRun]:
    """Read item-score files, long tables and directories (searched recursively for item-score files, see
    `is_item_file`), as `read_inputs` does."""
    return read_inputs(paths, read_item_file, is_item_file,
                       "item-score files (*.parquet / *.csv of per-item metrics)", skipped=skipped)


def _run(path: Path, group: pd.DataFrame, file_meta: dict, keys: list[str], several: bool) -> ItemRun:
    source = f"{path}[{','.join(f'{key}={group[key].iloc[0]}' for key in keys)}]" if several else str(path)
    columns = [column for column in META_COLUMNS if column in group.columns]
    meta = group_metadata(group, columns, file_meta, source)
    for key in RUN_COLUMNS:
        if meta.get(key) is None or not str(meta[key]).strip():
            raise InputError(f"{source}: no {key!r} recorded (metadata key, column or JSON sidecar)")
    seed = read_seed(meta["seed"], f"{source}: seed")
    n_shot = None if meta.get("n_shot") is None else read_seed(meta["n_shot"], f"{source}: n_shot")
    items_frame = group.drop(columns=columns)
    metrics = _metric_names(items_frame, meta, source)
    items = validate_items(items_frame, source, metrics)
    return ItemRun(path=source, arm=str(meta["arm"]), seed=seed, task=str(meta["task"]), n_shot=n_shot, items=items,
                   metrics=metrics, higher_is_better=_higher_is_better(meta, metrics, source),
                   meta={**meta, "seed": seed, "n_shot": n_shot})


def _metric_names(frame: pd.DataFrame, meta: dict, source: str) -> tuple[str, ...]:
    """The metric columns: those the metadata lists, else every numeric column other than doc_id and hashes."""
    listed = meta.get("metrics")
    if listed is not None:
        if not isinstance(listed, list) or not all(isinstance(name, str) and name.strip() for name in listed):
            raise InputError(f"{source}: metadata metrics must be a list of column names, got {listed!r}")
        return tuple(listed)
    names = []
    for column in frame.columns:
        if column == "doc_id" or column in HASH_COLUMNS or column in META_COLUMNS:
            continue
        series = frame[column]
        if pd.api.types.is_bool_dtype(series.dtype):
            continue
        numeric = pd.to_numeric(series, errors="coerce").notna().to_numpy()
        if column in KNOWN_HIGHER_IS_BETTER or (numeric.any() and (numeric | is_blank(series)).all()):
            names.append(str(column))
    return tuple(names)


def _higher_is_better(meta: dict, metrics: Sequence[str], source: str) -> dict[str, bool]:
    given = meta.get("higher_is_better") or {}
    if not isinstance(given, dict):
        raise InputError(f"{source}: metadata higher_is_better must map metric names to true/false, got {given!r}")
    directions = {}
    for metric in metrics:
        direction = given.get(metric, KNOWN_HIGHER_IS_BETTER.get(metric.split(",")[0]))
        if not isinstance(direction, bool):
            raise InputError(f"{source}: no higher_is_better for metric {metric!r} (metadata higher_is_better "
                             f"{{{metric!r}: true or false}})")
        directions[metric] = direction
    return directions


__all__ = ["HASH_COLUMNS", "ITEM_FORMAT", "ItemRun", "is_item_file", "read_item_file", "read_item_inputs",
           "validate_items", "write_item_file"]
