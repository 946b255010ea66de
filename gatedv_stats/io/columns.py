"""The checks of a run file's columns, shared by every schema: required columns, unit ids, numbers and integers, each
failure one line naming the file and the first bad row (rows counted from 1 over the data rows)."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from gatedv_stats.core.errors import InputError

_MAX_INTEGER = 2**53  # integer columns are read through float64, exact up to here
SHOWN = 5  # how many offending rows or ids an error message lists


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
    return (lambda row: f"{source}: row {row + 1}") if row_names is None else row_names.__getitem__


def check_doc_ids(doc_id: pd.Series, source: str, where: Callable[[int], str]) -> pd.Series:
    """The ids as text; an error names the first blank one, or the repeated ones and their rows."""
    fail_rows((doc_id.isna() | (doc_id.astype(str).str.strip() == "")).to_numpy(), where, "doc_id is empty")
    doc_id = doc_id.astype(str)
    duplicated = doc_id.duplicated(keep=False).to_numpy()
    if duplicated.any():
        ids, rows = list(dict.fromkeys(doc_id[duplicated])), ", ".join(map(str, np.flatnonzero(duplicated)[:SHOWN]+1))
        raise InputError(f"{source}: duplicate doc_id {', '.join(map(repr, ids[:SHOWN]))}"
                         f"{' ...' if len(ids) > SHOWN else ''} ({len(ids)} ids, rows {rows}...)")
    return doc_id


def numeric_column(series: pd.Series, column: str, source: str, where: Callable[[int], str], *,
                   finite: bool = False) -> np.ndarray:
    """A column as float64; text that is not a number is an error (blanks are NaN, an error too when `finite`)."""
    if pd.api.types.is_bool_dtype(series.dtype):
        raise InputError(f"{source}: {column} holds booleans, not numbers")
    values = pd.to_numeric(series, errors="coerce")
    fail_rows(values.isna().to_numpy() & ~is_blank(series), where,
              lambda row: f"{column} {series.iloc[row]!r} is not a number")
    numbers = values.to_numpy(dtype=np.float64)
    if finite:
        fail_rows(np.isnan(numbers), where, f"{column} is missing or NaN")
        fail_rows(np.isinf(numbers), where, f"{column} is infinite", numbers)
    return numbers


def integer_column(series: pd.Series, column: str, source: str, where: Callable[[int], str], *,
                   minimum: int) -> np.ndarray:
    """A column of whole numbers of at least `minimum`, as int64."""
    values = numeric_column(series, column, source, where)
    fail_rows(~np.isfinite(values), where, f"{column} is missing or not finite")
    fail_rows(values != np.round(values), where, f"{column} is not an integer", values)
    fail_rows(np.abs(values) > _MAX_INTEGER, where, f"{column} is beyond 2**53", values)
    integers = values.astype(np.int64)
    fail_rows(integers < minimum, where, f"{column} must be >= {minimum}", integers)
    return integers


def text_columns(frame: pd.DataFrame, out: pd.DataFrame, where: Callable[[int], str], what: str) -> pd.DataFrame:
    """`out` with every column of `frame` it lacks added as text (grouping columns, hashes), none missing; `what`
    names a unit in the error ("item")."""
    for column in [column for column in frame.columns if column not in out.columns]:
        fail_rows(is_blank(frame[column]), where, f"{column} is missing (where the column is given, every {what} "
                  "needs one)")
        out[str(column)] = frame[column].astype(str).to_numpy(dtype=object)
    return out


def is_numeric(series: pd.Series) -> bool:
    """Whether every value given is a number (a column read from CSV holds text)."""
    numbers = pd.to_numeric(series, errors="coerce").notna().to_numpy()
    return bool(numbers.any() and (numbers | is_blank(series)).all())


def is_blank(series: pd.Series) -> np.ndarray:
    """True where a value is absent (NaN / None / empty text) rather than malformed."""
    blank = series.isna().to_numpy()
    if series.dtype == object or pd.api.types.is_string_dtype(series.dtype):
        text = series.astype(str).str.strip().str.lower()
        blank = blank | text.isin(["", "nan", "none", "null", "na", "<na>"]).to_numpy()
    return blank


def fail_rows(bad: np.ndarray, where: Callable[[int], str], what: str | Callable[[int], str],
              values: np.ndarray | None = None) -> None:
    """An error naming the first row where `bad` holds (and how many more), with its value when given; `what` is
    wrong there, or says it from the row."""
    if bad.any():
        row, count = int(np.flatnonzero(bad)[0]), int(bad.sum())
        shown = f" ({values[row].item()!r})" if values is not None else ""
        more = f" (and {count - 1} more rows)" if count > 1 else ""
        raise InputError(f"{where(row)}: {what(row) if callable(what) else what}{shown}{more}")
