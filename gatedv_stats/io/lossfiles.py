"""Loss files (docs/method.md §5): read, validate and write per-document loss sums of evaluated runs.

A loss file holds one run: one row per evaluation document (`doc_id`, `n_targets`, `loss_sum`, optional
`domain`, `n_bytes`) plus run metadata (`arm`, `seed`, `lr`, ...) in Parquet key-value metadata, or for
CSV as constant columns or a JSON sidecar `FILE.csv.json`. A long table holds several runs, told apart by
its `arm` and `seed` columns. Rows in error messages are counted from 1 over the data rows.
"""

from __future__ import annotations

import contextlib
import difflib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from gatedv_stats import __version__
from gatedv_stats.core.atomic import atomic_file
from gatedv_stats.core.errors import InputError
from gatedv_stats.core.files import file_sha256, paths_under, read_json_object, read_model_config, read_seed
from gatedv_stats.core.outputs import check_output_file
from gatedv_stats.io.sealing import seal_problem, sealed
from gatedv_stats.io.table_metadata import from_column, group_metadata, merge_meta

REQUIRED_COLUMNS = ("doc_id", "n_targets", "loss_sum")
OPTIONAL_COLUMNS = ("domain", "n_bytes")
RUN_KEYS = ("arm", "seed")
META_KEYS = (
    "arm", "seed", "lr", "step", "eval_set", "eval_set_sha256", "tokenizer_sha256", "checkpoint_sha256",
    "data_manifest_sha256", "value_act", "trained_value_act", "config", "gatedv_version",
)
LOSS_FILE_SUFFIXES = (".parquet", ".csv")
# The largest per-target NLL (nats) accepted: perplexities up to exp(300) ≈ 2e130 keep their sums and squares over
# any number of seeds finite in float64 (exp(NLL) itself is finite up to 709.78); a document above it is a bad row.
MAX_TARGET_NLL = 300.0
_MAX_INTEGER = 2**53  # integer columns are read through float64, exact up to here
_PANDAS_METADATA_KEY = b"pandas"
_SHOWN = 5  # how many offending rows or ids an error message lists
# What to do with a loss or item-score file whose content is not what was written (its recorded content_sha256).
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
    """A file found in a directory that looks like a loss file but could not be read, skipped on request."""

    path: str
    reason: str

    def to_dict(self) -> dict:
        return {"path": self.path, "reason": self.reason}

    def warning(self) -> str:
        return f"skipped unreadable {self.path}: {self.reason}"


@dataclass(frozen=True)
class LossRun:
    """One evaluated run: per-document loss sums plus its metadata and provenance."""

    arm: str
    seed: int
    docs: pd.DataFrame  # doc_id (str), n_targets (int64), loss_sum (float64)[, domain, n_bytes]
    meta: dict
    source: str  # path; for one run of a long table "path[arm=A,seed=S]"
    sha256: str  # of the file's bytes

    @property
    def eval_set(self) -> str | None:
        return self.meta.get("eval_set")


def read_loss_file(path: str | Path, *, arm: str | None = None, seed: int | None = None) -> LossRun:
    """Read one run from a Parquet or CSV loss file.

    `arm` and `seed` supply metadata the file lacks; a file recording a different value is an error.
    """
    runs = _read_runs(Path(path), arm=arm, seed=seed)
    if len(runs) > 1:
        listed = ", ".join(f"({run.arm}, {run.seed})" for run in runs[:_SHOWN])
        raise InputError(f"{path}: holds {len(runs)} runs ({listed}...); read it as a long table")
    return runs[0]


def read_long_table(path: str | Path) -> list[LossRun]:
    """Read a table holding many runs (columns `arm`, `seed`, `doc_id`, `n_targets`, `loss_sum`)."""
    return _read_runs(Path(path), long_table=True)


def read_loss_inputs(paths: Sequence[str | Path], *,
                     skipped: list[SkippedFile] | None = None) -> list[LossRun]:
    """Read loss files, long tables and directories (searched recursively for files with a `loss_sum` column), as
    `read_inputs` does."""
    return read_inputs(paths, _read_runs, _has_loss_column, "loss files (*.parquet / *.csv with a loss_sum column)",
                       skipped=skipped)


Run = TypeVar("Run")


def read_inputs(paths: Sequence[str | Path], read_file: Callable[[Path], list[Run]],
                belongs: Callable[[Path], bool], looked_for: str, *,
                skipped: list[SkippedFile] | None = None) -> list[Run]:
    """The runs of files, long tables and directories (searched recursively for the files `belongs` recognises),
    each read with `read_file`; `looked_for` names those files in the error of a directory that holds none.

    A file found in a directory that looks like one (*.parquet, *.csv) but cannot be read is an error naming it;
    when a `skipped` list is given, it is appended there instead and the search goes on. A path given twice is an
    error naming it; a file reached twice (named, and in a directory also given) is read once.
    """
    named: dict[Path, str | Path] = {}
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
        if not path.is_dir():
            if path.resolve() not in read:
                read.add(path.resolve())
                runs.extend(read_file(path))
            continue
        held, unreadable = False, 0
        # Files named like loss files, broken links included (they are unreadable files).
        for candidate in [found for found in paths_under(path)
                          if found.suffix in LOSS_FILE_SUFFIXES and (found.is_file() or not found.exists())]:
            if candidate.resolve() in read:  # named as well, or under another directory given
                held = True
                continue
            try:
                if belongs(candidate):
                    read.add(candidate.resolve())
                    runs.extend(read_file(candidate))
                    held = True
            except UnreadableFileError as error:
                if skipped is None:
                    raise
                skipped.append(SkippedFile(error.path, error.reason))
                unreadable += 1
        if not held:
            also = f"; {unreadable} unreadable file(s) skipped" if unreadable else ""
            raise InputError(f"{path}: no {looked_for} found{also}")
    return runs


def write_loss_file(path: str | Path, docs: pd.DataFrame, meta: dict) -> None:
    """Write one run as Parquet (a `.parquet` path), atomically, with each metadata value JSON-encoded under
    its key."""
    write_run_file(path, "loss file", meta, RUN_KEYS, lambda path, meta: validate_docs(docs, str(path)))


def write_run_file(path: str | Path, what: str, meta: dict, keys: Sequence[str],
                   rows: Callable[[Path, dict], pd.DataFrame]) -> None:
    """One run as the Parquet file `path` (a `what`), sealed with its content's SHA-256 and written atomically, each
    metadata value JSON-encoded under its key: `meta` needs `keys`, and `rows(path, meta)` gives the checked rows
    (it may add to `meta`) once the metadata is checked."""
    check_output_file(path, what, suffix=".parquet")
    path = Path(path)
    meta = dict(meta)
    for key in keys:
        if meta.get(key) in (None, ""):  # a file without them could not be read back
            raise InputError(f"{path}: metadata needs {key!r}")
    meta["seed"] = read_seed(meta["seed"], f"{path}: metadata seed")
    meta.setdefault("gatedv_version", __version__)
    table = pa.Table.from_pandas(rows(path, meta), preserve_index=False)
    kv = dict(table.schema.metadata or {})
    kv.update({key.encode(): json.dumps(value, default=json_default).encode() for key, value in meta.items()})
    with atomic_file(path) as writer:
        pq.write_table(sealed(table.replace_schema_metadata(kv)), writer)


def validate_docs(frame: pd.DataFrame, source: str, *, row_names: Sequence[str] | None = None) -> pd.DataFrame:
    """Check and normalise the per-document columns; returns doc_id, n_targets, loss_sum[, domain, n_bytes].

    An error in one row names it `<source>: row <n>`, or `row_names[i]` when given (where the row came from)."""
    where = check_table(frame, source, row_names, REQUIRED_COLUMNS, "per-document columns")
    doc_id = check_doc_ids(frame["doc_id"], source, where)
    loss_sum = numeric_column(frame["loss_sum"], "loss_sum", source, where, finite=True)
    fail_rows(loss_sum < 0, where, "loss_sum is negative", loss_sum)
    n_targets = _integers(frame["n_targets"], "n_targets", source, where, minimum=1)
    # Bounding each document's mean NLL also keeps every sum of loss sums finite in float64.
    fail_rows(loss_sum / n_targets > MAX_TARGET_NLL, where, f"loss_sum is more than {MAX_TARGET_NLL:g} nats "
               "per target (beyond, the perplexities overflow the statistics in float64)", loss_sum)
    out = pd.DataFrame({"doc_id": doc_id.to_numpy(dtype=object), "n_targets": n_targets, "loss_sum": loss_sum})
    if "domain" in frame.columns:
        domain = frame["domain"]
        fail_rows(domain.isna().to_numpy(), where, "domain is missing (where the column is given, every document "
                   "needs one)")
        out["domain"] = domain.astype(str).to_numpy(dtype=object)
    if "n_bytes" in frame.columns:
        out["n_bytes"] = _integers(frame["n_bytes"], "n_bytes", source, where, minimum=0)
    return out


def check_doc_ids(doc_id: pd.Series, source: str, where: Callable[[int], str]) -> pd.Series:
    """The ids as text; an error names the first blank one, or the repeated ones and their rows."""
    fail_rows((doc_id.isna() | (doc_id.astype(str).str.strip() == "")).to_numpy(), where, "doc_id is empty")
    doc_id = doc_id.astype(str)
    duplicated = doc_id.duplicated(keep=False).to_numpy()
    if duplicated.any():
        ids, rows = list(dict.fromkeys(doc_id[duplicated])), ", ".join(map(str, np.flatnonzero(duplicated)[:_SHOWN]+1))
        raise InputError(f"{source}: duplicate doc_id {', '.join(map(repr, ids[:_SHOWN]))}"
                         f"{' ...' if len(ids) > _SHOWN else ''} ({len(ids)} ids, rows {rows}...)")
    return doc_id


def json_default(value: object) -> object:
    """numpy scalars and arrays in metadata (a seed from an array, a config of numpy ints)."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise TypeError(f"metadata value {value!r} of type {type(value).__name__} is not JSON-serialisable")


def check_table(frame: pd.DataFrame, source: str, row_names: Sequence[str] | None, required: Sequence[str],
                 listed: str) -> Callable[[int], str]:
    """How an error names row i (counted from 0), `<source>: row <i + 1>` or `row_names[i]`, of a table with rows
    and the `required` columns (one missing is named with the closest name it has and its `listed` columns)."""
    if len(frame) == 0:
        raise InputError(f"{source}: no rows")
    for column in required:
        if column not in frame.columns:
            close = difflib.get_close_matches(column, [str(c) for c in frame.columns], n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InputError(f"{source}: missing column {column!r}{hint}; its {listed} are "
                             f"{', '.join(map(str, frame.columns))}")
    if row_names is not None:
        return row_names.__getitem__
    return lambda row: f"{source}: row {row + 1}"


def numeric_column(series: pd.Series, column: str, source: str, where: Callable[[int], str], *,
                   finite: bool = False) -> np.ndarray:
    if pd.api.types.is_bool_dtype(series.dtype):
        raise InputError(f"{source}: {column} holds booleans, not numbers")
    values = pd.to_numeric(series, errors="coerce")
    not_numeric = values.isna().to_numpy() & ~is_blank(series)
    if not_numeric.any():
        row = int(np.flatnonzero(not_numeric)[0])
        raise InputError(f"{where(row)}: {column} {series.iloc[row]!r} is not a number"
                         f"{_more(int(not_numeric.sum()))}")
    numbers = values.to_numpy(dtype=np.float64)
    if finite:
        fail_rows(np.isnan(numbers), where, f"{column} is missing or NaN")
        fail_rows(np.isinf(numbers), where, f"{column} is infinite", numbers)
    return numbers


def _integers(series: pd.Series, column: str, source: str, where: Callable[[int], str], *,
              minimum: int) -> np.ndarray:
    values = numeric_column(series, column, source, where)
    fail_rows(~np.isfinite(values), where, f"{column} is missing or not finite")
    fail_rows(values != np.round(values), where, f"{column} is not an integer", values)
    fail_rows(np.abs(values) > _MAX_INTEGER, where, f"{column} is beyond 2**53", values)
    integers = values.astype(np.int64)
    fail_rows(integers < minimum, where, f"{column} must be >= {minimum}", integers)
    return integers


def is_blank(series: pd.Series) -> np.ndarray:
    """True where a value is absent (NaN / None / empty text) rather than malformed."""
    blank = series.isna().to_numpy()
    if series.dtype == object or pd.api.types.is_string_dtype(series.dtype):
        text = series.astype(str).str.strip().str.lower()
        blank = blank | text.isin(["", "nan", "none", "null", "na", "<na>"]).to_numpy()
    return blank


def fail_rows(bad: np.ndarray, where: Callable[[int], str], what: str, values: np.ndarray | None = None) -> None:
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        shown = f" ({values[row].item()!r})" if values is not None else ""
        raise InputError(f"{where(row)}: {what}{shown}{_more(int(bad.sum()))}")


def _more(count: int) -> str:
    return f" (and {count - 1} more rows)" if count > 1 else ""


def _has_loss_column(path: Path) -> bool:
    """Whether a file found in a directory is a loss file; a readable file without `loss_sum` (an evaluation
    set, a curve) is not. Reads only the schema or the header line."""
    with reading(path):
        if path.suffix == ".parquet":
            return "loss_sum" in pq.read_schema(path).names
        return "loss_sum" in pd.read_csv(path, nrows=0).columns


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


def read_table(path: Path) -> tuple[pd.DataFrame, dict]:
    """The raw table and its file-level metadata (Parquet key-value or CSV sidecar)."""
    if not path.exists():
        raise UnreadableFileError(path, "no such file")
    if path.suffix not in LOSS_FILE_SUFFIXES:
        raise InputError(f"{path}: not a loss file (expected .parquet or .csv)")
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


def _read_runs(path: Path, arm: str | None = None, seed: int | None = None, long_table: bool = False) -> list[LossRun]:
    return runs_from_frame(*read_table(path), str(path), file_sha256(path), arm=arm, seed=seed, long_table=long_table)


def runs_from_frame(frame: pd.DataFrame, file_meta: dict, path: str, sha256: str = "", *, arm: str | None = None,
                    seed: int | None = None, long_table: bool = False) -> list[LossRun]:
    """A loss table's runs (a long table's told apart by `arm` and `seed`), checked; `path` names it in messages."""
    missing = [column for column in RUN_KEYS if column not in frame.columns]
    if long_table and missing:
        raise InputError(f"{path}: a long table needs the columns arm and seed; missing {', '.join(missing)}")
    if len(frame) == 0:
        raise InputError(f"{path}: no rows")
    meta_columns = [column for column in META_KEYS if column in frame.columns]
    groups = ([((None, None), frame)] if missing else
              list(frame.groupby([frame["arm"].astype(str), frame["seed"].astype(str)], sort=True)))
    runs = []
    for _, group in groups:
        source = str(path) if len(groups) == 1 else f"{path}[arm={group['arm'].iloc[0]},seed={group['seed'].iloc[0]}]"
        meta = group_metadata(group, meta_columns, file_meta, source)
        for key, given in [(key, given) for key, given in (("arm", arm), ("seed", seed)) if given is not None]:
            merge_meta(meta, key, given, source)
        for key in RUN_KEYS:
            if meta.get(key) in (None, ""):
                raise InputError(f"{source}: no {key!r} recorded (metadata key, column or JSON sidecar)")
        meta["arm"] = str(meta["arm"])
        for key in ("arm", "eval_set"):  # names shown in every table and used to group runs
            if key in meta and meta[key] is not None and not str(meta[key]).strip():
                raise InputError(f"{source}: {key} {meta[key]!r} is blank; name it")
        meta["seed"] = read_seed(meta["seed"], f"{source}: seed")
        if meta.get("config") is not None:
            read_model_config(meta["config"], f"{source}: config")
        docs = validate_docs(group.drop(columns=meta_columns).reset_index(drop=True), source)
        runs.append(LossRun(arm=meta["arm"], seed=meta["seed"], docs=docs, meta=meta, source=source, sha256=sha256))
    return runs
