"""Run files (docs/method-statistics.md §5): one reader and one writer for every kind of per-unit file — loss files,
item-score files, score tables — whose columns and metadata a `RunSchema` declares.

A file holds one run (one row per unit, the run's metadata in Parquet key-value metadata, or for CSV as constant
columns or a JSON sidecar `FILE.csv.json`), or, as a long table, several runs told apart by their `arm` and `seed`
(and the schema's other key) columns. Files written here are sealed with their content's SHA-256 and checked on
every read. Rows in error messages are counted from 1 over the data rows.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from gatedv_stats import __version__
from gatedv_stats.core.atomic import atomic_file
from gatedv_stats.core.errors import InputError
from gatedv_stats.core.files import file_sha256, paths_under, read_json_object, read_seed
from gatedv_stats.core.outputs import check_output_file
from gatedv_stats.io.sealing import seal_problem, sealed
from gatedv_stats.io.table_metadata import from_column, group_metadata, merge_meta

RUN_FILE_SUFFIXES = (".parquet", ".csv")
_PANDAS_METADATA_KEY = b"pandas"
_NAMES = ("arm", "eval_set", "task")  # names shown in every table and used to group runs: never blank
# What to do with a run file whose content is not what was written (its recorded content_sha256).
REWRITE = "evaluate the run again (gatedv evaluate, gatedv import lm-eval) or restore an intact copy"


class UnreadableFileError(InputError):
    """A file that cannot be read at all (truncated, undecodable, permission denied), as opposed to one whose
    content is invalid."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = reason


@dataclass(frozen=True)
class SkippedFile:
    """A file found in a directory that looks like a run file but could not be read, skipped on request."""

    path: str
    reason: str

    def to_dict(self) -> dict:
        return {"path": self.path, "reason": self.reason}

    def warning(self) -> str:
        return f"skipped unreadable {self.path}: {self.reason}"


# Checks one run's unit rows (the metadata columns taken out) and completes its metadata: (rows, meta, source) →
# (checked rows, meta).
UnitCheck = Callable[[pd.DataFrame, dict, str], tuple[pd.DataFrame, dict]]


@dataclass(frozen=True)
class RunSchema:
    """What one kind of run file holds: its name, the metadata a run needs (`keys`: arm, seed and any other that
    tells runs apart in a long table), the columns of a long table that are run metadata, the check of its unit
    rows, how a file found in a directory is recognised, and the `format` its metadata records (if any)."""

    name: str  # "loss", "items", "scores": what `Run.schema` says
    what: str  # "loss file": the file in messages
    keys: tuple[str, ...]
    meta_columns: tuple[str, ...]
    check_units: UnitCheck
    belongs: Callable[[Path], bool]
    looked_for: str  # the files, in the error of a directory that holds none
    format: str | None = None

    @property
    def a_file(self) -> str:
        return f"{'an' if self.what[0] in 'aeiou' else 'a'} {self.what}"


@dataclass(frozen=True)
class Run:
    """One evaluated run: per-unit values (a document's loss sum, an item's scores) plus its metadata and
    provenance."""

    arm: str
    seed: int
    units: pd.DataFrame  # doc_id and the schema's columns, checked
    meta: dict
    source: str  # path; for one run of a long table "path[arm=A,seed=S]"
    sha256: str  # of the file's bytes ("" for a table that came from no file)
    schema: str = "loss"

    @property
    def docs(self) -> pd.DataFrame:
        """The units of a loss file's run: its documents."""
        return self.units

    @property
    def eval_set(self) -> str | None:
        return self.meta.get("eval_set")

    @property
    def task(self) -> str | None:
        return self.meta.get("task")


def read_runs(paths: Sequence[str | os.PathLike[str]], schemas: Sequence[RunSchema], *,
              skipped: list[SkippedFile] | None = None, require: bool = True) -> list[Run]:
    """The runs of files, long tables and directories (searched recursively for the files a schema recognises); a
    file given by name is read by the first schema that recognises it, else by the first.

    A file found in a directory that looks like one (*.parquet, *.csv) but cannot be read is an error naming it;
    when a `skipped` list is given, it is appended there instead and the search goes on. A directory that holds no
    such file is an error unless not `require`d. A path given twice is an error naming it; a file reached twice
    (named, and in a directory also given) is read once.
    """
    named: dict[Path, str | os.PathLike[str]] = {}
    for given in paths:
        resolved = Path(given).resolve()
        if resolved in named:
            also = "" if str(named[resolved]) == str(given) else f" (also as {named[resolved]})"
            raise InputError(f"{given}: given twice among the inputs{also}")
        named[resolved] = given
    runs: list[Run] = []
    read: set[Path] = set()
    for given in paths:
        path = Path(given)
        if path.is_dir():
            runs.extend(_runs_under(path, schemas, read, skipped, require))
        elif path.resolve() not in read:
            read.add(path.resolve())
            schema = next((schema for schema in schemas[1:] if path.is_file() and recognised(schema.belongs, path)),
                          schemas[0])
            runs.extend(file_runs(path, schema))
    return runs


def recognised(belongs: Callable[[Path], bool], path: Path) -> bool:
    """Whether a file is of the kind `belongs` recognises; an unreadable file is not, and is left to the reader to
    report (or skip)."""
    with contextlib.suppress(UnreadableFileError):
        return belongs(path)
    return False


def _runs_under(directory: Path, schemas: Sequence[RunSchema], read: set[Path],
                skipped: list[SkippedFile] | None, require: bool) -> list[Run]:
    """The runs of every file under `directory` a schema recognises, each file once."""
    runs: list[Run] = []
    held, unreadable = False, 0
    # Files named like run files, broken links included (they are unreadable files).
    for candidate in [found for found in paths_under(directory)
                      if found.suffix in RUN_FILE_SUFFIXES and (found.is_file() or not found.exists())]:
        if candidate.resolve() in read:  # named as well, or under another directory given
            held = True
            continue
        try:
            schema = next((schema for schema in schemas if schema.belongs(candidate)), None)
            if schema is not None:
                read.add(candidate.resolve())
                runs.extend(file_runs(candidate, schema))
                held = True
        except UnreadableFileError as error:
            if skipped is None:
                raise
            skipped.append(SkippedFile(error.path, error.reason))
            unreadable += 1
    if not held and require:
        also = f"; {unreadable} unreadable file(s) skipped" if unreadable else ""
        raise InputError(f"{directory}: no {' or '.join(schema.looked_for for schema in schemas)} found{also}")
    return runs


def file_runs(path: str | Path, schema: RunSchema, *, arm: str | None = None, seed: int | None = None,
                  long_table: bool = False) -> list[Run]:
    """The runs of one file of `schema`; `arm` and `seed` supply metadata the file lacks (a file recording a
    different value is an error), `long_table` requires the columns that tell its runs apart."""
    path = Path(path)
    frame, meta = read_table(path, schema)
    return table_runs(frame, meta, str(path), file_sha256(path), schema, arm=arm, seed=seed, long_table=long_table)


def table_runs(frame: pd.DataFrame, file_meta: dict, path: str, sha256: str, schema: RunSchema, *,
               arm: str | None = None, seed: int | None = None, long_table: bool = False) -> list[Run]:
    """A table's runs (a long table's told apart by `arm` and `seed`, and the schema's other keys where they are
    columns), checked; `path` names it in messages."""
    if schema.format is not None and file_meta.get("format") not in (None, schema.format):
        raise InputError(f"{path}: format {file_meta['format']!r} is not {schema.a_file} ({schema.format})")
    missing = [column for column in ("arm", "seed") if column not in frame.columns]
    if long_table and missing:
        raise InputError(f"{path}: a long table needs the columns arm and seed; missing {', '.join(missing)}")
    if len(frame) == 0:
        raise InputError(f"{path}: no rows")
    meta_columns = [column for column in schema.meta_columns if column in frame.columns]
    keys = [] if missing else [key for key in schema.keys if key in frame.columns]
    groups = list(frame.groupby([frame[key].astype(str) for key in keys], sort=True)) if keys else [((), frame)]
    runs = []
    for _, group in groups:
        source = f"{path}[{','.join(f'{key}={group[key].iloc[0]}' for key in keys)}]" if len(groups) > 1 else path
        meta = group_metadata(group, meta_columns, file_meta, source)
        for key, given in [(key, given) for key, given in (("arm", arm), ("seed", seed)) if given is not None]:
            merge_meta(meta, key, given, source)
        for key in schema.keys:
            if meta.get(key) in (None, ""):
                raise InputError(f"{source}: no {key!r} recorded (metadata key, column or JSON sidecar)")
        meta["arm"] = str(meta["arm"])
        for key in _NAMES:
            if meta.get(key) is not None and not str(meta[key]).strip():
                raise InputError(f"{source}: {key} {meta[key]!r} is blank; name it")
        meta["seed"] = read_seed(meta["seed"], f"{source}: seed")
        units, meta = schema.check_units(group.drop(columns=meta_columns).reset_index(drop=True), meta, source)
        runs.append(Run(arm=meta["arm"], seed=meta["seed"], units=units, meta=meta, source=source, sha256=sha256,
                        schema=schema.name))
    return runs


def write_run(path: str | Path, units: pd.DataFrame, meta: dict, schema: RunSchema) -> None:
    """One run as the Parquet file `path` of `schema`, its units checked, sealed with its content's SHA-256 and
    written atomically, each metadata value JSON-encoded under its key (`meta` needs the schema's keys)."""
    check_output_file(path, schema.what, suffix=".parquet")
    path = Path(path)
    meta = dict(meta) if schema.format is None else {**meta, "format": schema.format}
    for key in schema.keys:
        if meta.get(key) in (None, ""):  # a file without them could not be read back
            raise InputError(f"{path}: metadata needs {key!r}")
    meta["seed"] = read_seed(meta["seed"], f"{path}: metadata seed")
    meta.setdefault("gatedv_version", __version__)
    duplicated = sorted({str(name) for name in units.columns[units.columns.duplicated()]})
    if duplicated:
        raise InputError(f"{path}: column {', '.join(map(repr, duplicated))} appears more than once")
    rows, meta = schema.check_units(units, meta, str(path))
    table = pa.Table.from_pandas(rows, preserve_index=False)
    kv = dict(table.schema.metadata or {})
    kv.update({key.encode(): json.dumps(value, default=json_default).encode() for key, value in meta.items()})
    with atomic_file(path) as writer:
        pq.write_table(sealed(table.replace_schema_metadata(kv)), writer)


def json_default(value: object) -> object:
    """numpy scalars and arrays in metadata (a seed from an array, a config of numpy ints)."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise TypeError(f"metadata value {value!r} of type {type(value).__name__} is not JSON-serialisable")


def column_names(path: Path) -> list[str]:
    """A run file's column names, from its schema or its header line only."""
    with reading(path):
        if path.suffix == ".parquet":
            return list(pq.read_schema(path).names)
        return [str(name) for name in pd.read_csv(path, nrows=0).columns]


def file_format(path: Path) -> object:
    """The `format` a run file's metadata records (Parquet key-value metadata, or a CSV's sidecar), else None."""
    with reading(path):
        if path.suffix == ".parquet":
            recorded = (pq.read_schema(path).metadata or {}).get(b"format")
            return None if recorded is None else from_column(recorded.decode("utf-8", errors="replace"))
        sidecar = path.with_name(path.name + ".json")
        return read_json_object(sidecar).get("format") if sidecar.is_file() else None


@contextlib.contextmanager
def reading(path: Path) -> Iterator[None]:
    """Any reader failure inside becomes one `UnreadableFileError` naming `path`; a file whose bytes do not decode
    (truncated, emptied, damaged) says how to get it back (`REWRITE`)."""
    try:
        yield
    except pd.errors.EmptyDataError:
        raise UnreadableFileError(path, f"empty file; {REWRITE}") from None
    except Exception as error:  # noqa: BLE001 - any reader failure is bad input, reported in one line
        reason = " ".join(str(error).split())[:200] or type(error).__name__
        # A failure on the file's bytes (truncated, emptied, damaged), not on reaching them (permission denied, a
        # directory): the system's errors carry an errno, the decoders' none.
        if path.is_file() and getattr(error, "errno", None) is None:
            reason = f"{reason.rstrip('.')}; {REWRITE}"
        raise UnreadableFileError(path, f"cannot read: {reason}") from None


def read_table(path: Path, schema: RunSchema) -> tuple[pd.DataFrame, dict]:
    """The raw table and its file-level metadata (Parquet key-value or CSV sidecar)."""
    if not path.exists():
        raise UnreadableFileError(path, "no such file")
    if path.suffix not in RUN_FILE_SUFFIXES:
        raise InputError(f"{path}: not {schema.a_file} (expected .parquet or .csv)")
    problem = None  # what a Parquet file's recorded content sha256 says of it
    with reading(path):
        if path.suffix == ".parquet":
            with pq.ParquetFile(path) as file:
                table = file.read()
                problem = seal_problem(table, file.metadata.metadata)
            names, meta = table.schema.names, {  # other writers may store plain strings
                key.decode("utf-8", errors="replace"): from_column(value.decode("utf-8", errors="replace"))
                for key, value in (table.schema.metadata or {}).items() if key != _PANDAS_METADATA_KEY}
            frame = table.to_pandas() if len(set(names)) == len(names) and problem is None else None
        else:
            names = list(pd.read_csv(path, header=None, nrows=1, dtype=str, keep_default_na=False).iloc[0])
            frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    if problem is not None:
        raise UnreadableFileError(path, f"{problem}; {REWRITE}")
    duplicated = sorted({str(name) for name in names if names.count(name) > 1})
    if duplicated:
        raise InputError(f"{path}: column {', '.join(map(repr, duplicated))} appears more than once")
    if path.suffix == ".csv":
        sidecar = path.with_name(path.name + ".json")
        meta = read_json_object(sidecar) if sidecar.exists() else {}
    return frame, meta
