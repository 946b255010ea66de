"""The metadata of a run in a loss or item-score table: the file's key-value metadata merged with columns that
hold one value per run, numbers read back from CSV text, and the same key given two ways checked to agree."""

from __future__ import annotations

import contextlib
import json
import numbers
from collections.abc import Sequence

import numpy as np
import pandas as pd

from gatedv_stats.core.errors import InputError

_SHOWN = 5  # how many differing values an error message lists


def group_metadata(group: pd.DataFrame, columns: Sequence[str], file_meta: dict, source: str) -> dict:
    """The file's metadata merged with the metadata `columns` of one run's rows, each of which must hold one value
    (a value the file's metadata also gives must agree with it)."""
    meta = dict(file_meta)
    for column in columns:
        values = group[column].dropna().unique()
        if len(values) > 1:
            raise InputError(f"{source}: column {column!r} is metadata and must hold one value, found "
                             f"{', '.join(map(repr, values[:_SHOWN]))}")
        if len(values) == 1:
            merge_meta(meta, column, from_column(values[0]), source)
    return meta


def from_column(value: object) -> object:
    """A CSV cell holds text: recover numbers (lr 0.003, step 100) and JSON objects."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, str):
        with contextlib.suppress(json.JSONDecodeError):
            return json.loads(value)
    return value


def merge_meta(meta: dict, key: str, value: object, source: str) -> None:
    if meta.get(key) is not None and str(meta[key]) != str(value) and not _same_number(meta[key], value):
        raise InputError(f"{source}: {key} is {meta[key]!r} in one place and {value!r} in another")
    meta[key] = value


def _same_number(first: object, second: object) -> bool:
    """Whether two values are one number written two ways (0.003 and "0.003", 7 and 7.0); integers compare exactly."""
    if all(isinstance(value, numbers.Integral) and not isinstance(value, bool) for value in (first, second)):
        return int(first) == int(second)  # type: ignore[call-overload]
    try:
        return float(first) == float(second)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
