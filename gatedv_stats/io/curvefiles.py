"""Curve files: development NLL over training updates, long format (`arm`, `seed`, `lr`, `step`, `dev_nll`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from gatedv_stats.errors import InputError
from gatedv_stats.io.atomic import atomic_path

CURVE_FILE_NAME = "curve.csv"
CURVE_COLUMNS = ("arm", "seed", "lr", "step", "dev_nll")
OPTIONAL_CURVE_COLUMNS = ("train_loss", "tokens")
RUN_KEY = ["arm", "seed", "lr"]


def write_curve_file(path: str | Path, rows: list[dict]) -> None:
    """Write a run's curve (one row per recorded update, every column) atomically."""
    with atomic_path(path) as tmp:
        pd.DataFrame(rows, columns=[*CURVE_COLUMNS, *OPTIONAL_CURVE_COLUMNS]).to_csv(tmp, index=False)


def read_curve_file(path: str | Path) -> pd.DataFrame:
    """Read and validate one curve file (CSV or Parquet); one file may hold many runs."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file")
    try:
        frame = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise InputError(f"{path}: empty file") from None
    except Exception as error:  # noqa: BLE001 - any reader failure is bad input, reported in one line
        raise InputError(f"{path}: cannot read: {' '.join(str(error).split())[:200]}") from None
    return validate_curves(frame, str(path))


def read_curve_inputs(paths: list[str | Path]) -> pd.DataFrame:
    """Read curve files (directories are searched for `curve.csv`) into one validated table."""
    frames = []
    for given in paths:
        path = Path(given)
        found = sorted(path.rglob(CURVE_FILE_NAME)) if path.is_dir() else [path]
        if not found:
            raise InputError(f"{path}: no {CURVE_FILE_NAME} found")
        frames.extend(read_curve_file(candidate) for candidate in found)
    return validate_curves(pd.concat(frames, ignore_index=True), ", ".join(map(str, paths)))


def validate_curves(frame: pd.DataFrame, source: str) -> pd.DataFrame:
    """Check columns and values; one row per (arm, seed, lr, step); rows sorted by run and step."""
    if len(frame) == 0:
        raise InputError(f"{source}: no rows")
    missing = [column for column in CURVE_COLUMNS if column not in frame.columns]
    if missing:
        raise InputError(f"{source}: missing column {', '.join(map(repr, missing))}; columns are "
                         f"{', '.join(map(str, frame.columns))}")
    out = pd.DataFrame({"arm": frame["arm"].astype(str)})
    for column, integer in (("seed", True), ("lr", False), ("step", True), ("dev_nll", False)):
        values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64)
        bad = ~np.isfinite(values)
        if integer:
            bad |= np.isfinite(values) & (values != np.round(values))
        bad |= values < 0
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            kind = "a non-negative integer" if integer else "a finite non-negative number"
            value = frame[column].iloc[row]
            value = value.item() if isinstance(value, np.generic) else value
            raise InputError(f"{source}: row {row + 1}: {column} {value!r} is not {kind}")
        out[column] = values.astype(np.int64) if integer else values
    for column in OPTIONAL_CURVE_COLUMNS:
        if column in frame.columns:
            out[column] = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64)
    duplicated = out.duplicated(RUN_KEY + ["step"], keep="first").to_numpy()
    if duplicated.any():
        row = int(np.flatnonzero(duplicated)[0])
        arm, seed, lr, step = out.iloc[row][RUN_KEY + ["step"]]
        raise InputError(f"{source}: row {row + 1}: step {step} of arm {arm} seed {seed} lr {lr} appears twice")
    return out.sort_values(RUN_KEY + ["step"], kind="stable").reset_index(drop=True)
