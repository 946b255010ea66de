"""Curve files: development NLL over training updates, long format (`arm`, `seed`, `lr`, `step`, `dev_nll`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from gatedv_stats.core.atomic import write_bytes_atomic
from gatedv_stats.core.errors import InputError
from gatedv_stats.core.files import each_once, file_sha256, paths_under, read_seed
from gatedv_stats.core.formatting import format_lr
from gatedv_stats.core.integrity import check_file_sha256
from gatedv_stats.io.lossfiles import MAX_TARGET_NLL
from gatedv_stats.io.runrecords import RUN_FILE_NAME, read_run_file, read_run_record, record_arm, update_run_record

CURVE_FILE_NAME = "curve.csv"
CURVE_COLUMNS = ("arm", "seed", "lr", "step", "dev_nll")
OPTIONAL_CURVE_COLUMNS = ("train_loss", "tokens")
# What the run.json beside a curve file (a trainer's run directory) says of its run, on every row of that file:
# the record's path, its status ("finished", "running", ...) and the run's final update; None / NaN without one.
RUN_RECORD_COLUMNS = ("run_file", "run_status", "run_updates")
RUN_KEY = ["arm", "seed", "lr"]
REWRITE_CURVE = "restore an intact copy, or move the run directory away and train the run again"


def write_curve_file(path: str | Path, rows: list[dict], *, record: bool = False) -> str:
    """Write a run's curve (one row per recorded update, every column) atomically; returns its SHA-256. `record`:
    the run.json beside it records that SHA-256 (`curve_sha256`, and the file it replaces as
    `previous_curve_sha256`) before the new file takes its name, so that a reader can always verify it."""
    text = pd.DataFrame(rows, columns=[*CURVE_COLUMNS, *OPTIONAL_CURVE_COLUMNS]).to_csv(index=False)
    path = Path(path)

    def recorded(sha256: str) -> None:
        previous = file_sha256(path) if path.is_file() else None
        update_run_record(path.parent, {"curve_sha256": sha256, "previous_curve_sha256": previous})

    return write_bytes_atomic(path, text.encode("utf-8"), before_replace=recorded if record else None)


def read_curve_file(path: str | Path) -> pd.DataFrame:
    """Read and validate one curve file (CSV or Parquet); one file may hold many runs. A trainer's curve.csv must be
    the one the run.json beside it records (`write_curve_file(record=True)`): a `damaged` error otherwise. Files of
    other trainers, and curves recorded nowhere, are read as they are."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file")
    record = read_run_record(path.parent) if path.name == CURVE_FILE_NAME else None
    if record and record.get("curve_sha256"):
        check_file_sha256(path, [record["curve_sha256"], record.get("previous_curve_sha256")],
                          path.parent / RUN_FILE_NAME, REWRITE_CURVE)
    try:
        frame = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise InputError(f"{path}: empty file") from None
    except Exception as error:  # noqa: BLE001 - any reader failure is bad input, reported in one line
        raise InputError(f"{path}: cannot read: {' '.join(str(error).split())[:200]}") from None
    return validate_curves(frame, str(path))


def read_curve_inputs(paths: Sequence[str | Path]) -> pd.DataFrame:
    """Read curve files (directories are searched for `curve.csv`) into one validated table. A file named twice
    (itself and through its directory) counts once; a run's step recorded by two files is an error naming both.
    Each row carries the run.json beside its file (`with_run_record`)."""
    files: list[Path] = []
    for given in paths:
        path = Path(given)
        found = ([candidate for candidate in paths_under(path) if candidate.name == CURVE_FILE_NAME] if path.is_dir()
                 else [path])
        if not found:
            raise InputError(f"{path}: no {CURVE_FILE_NAME} found")
        files += found
    frames = [with_run_record(read_curve_file(path), path).assign(file=str(path)) for path in each_once(files)]
    combined = pd.concat(frames, ignore_index=True)
    key = RUN_KEY + ["step"]
    twice = combined.duplicated(key, keep=False).to_numpy()
    if twice.any():
        first = combined[twice].iloc[0]
        where = " and ".join(combined.loc[twice & (combined[key] == first[key]).all(axis=1).to_numpy(), "file"])
        raise InputError(f"step {first['step']} of arm {first['arm']} seed {first['seed']} lr {first['lr']} is "
                         f"recorded twice: {where}")
    return _sorted(combined.drop(columns="file"))


def with_run_record(curve: pd.DataFrame, path: str | Path) -> pd.DataFrame:
    """`curve` (read from `path`) with `RUN_RECORD_COLUMNS` from the run.json beside it. A row that is not the
    recorded run (its arm, lr or seed, where recorded) is an `InputError`: which of the two files is right cannot
    be told, and a curve filed under another run's record would be selected and drawn as that run."""
    path = Path(path)
    record_path = path.parent / RUN_FILE_NAME
    if not record_path.is_file():
        return curve.assign(run_file=None, run_status=None, run_updates=np.nan)
    record = read_run_file(record_path)
    arm, lr, seed = record_arm(record), record.get("lr"), record.get("seed")
    other = np.zeros(len(curve), dtype=bool)
    if arm is not None:
        other |= (curve["arm"] != arm).to_numpy()
    if lr is not None:
        other |= ~np.isclose(curve["lr"].to_numpy(dtype=np.float64), float(lr), rtol=1e-9, atol=0.0)
    if seed is not None:
        other |= (curve["seed"] != seed).to_numpy()
    if other.any():
        row = curve[other].iloc[0]
        shown = {"arm": arm, "lr": None if lr is None else format_lr(lr), "seed": seed}
        recorded = " ".join(f"{name} {value}" for name, value in shown.items() if value is not None)
        raise InputError(f"{path}: step {row['step']} holds arm {row['arm']} lr {format_lr(row['lr'])} "
                         f"seed {row['seed']}, not the run of {record_path} ({recorded})")
    status = record.get("status")
    if status is not None and not isinstance(status, str):
        raise InputError(f"{record_path}: status: {status!r} is not text")
    updates = record.get("updates")
    return curve.assign(run_file=str(record_path), run_status=status,
                        run_updates=np.nan if updates is None else float(updates))


def validate_curves(frame: pd.DataFrame, source: str) -> pd.DataFrame:
    """Check columns and values; one row per (arm, seed, lr, step); rows sorted by run and step."""
    if len(frame) == 0:
        raise InputError(f"{source}: no rows")
    missing = [column for column in CURVE_COLUMNS if column not in frame.columns]
    if missing:
        raise InputError(f"{source}: missing column {', '.join(map(repr, missing))}; columns are "
                         f"{', '.join(map(str, frame.columns))}")
    firsts = frame["seed"].reset_index(drop=True).drop_duplicates()  # each seed read once, named by its first row
    seeds = {value: read_seed(value, f"{source}: row {row + 1}: seed") for row, value in firsts.items()}
    out = pd.DataFrame({"arm": frame["arm"].astype(str), "seed": frame["seed"].map(seeds).to_numpy(dtype=np.int64)})
    for column, integer in (("lr", False), ("step", True), ("dev_nll", False)):
        values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64)
        bad = ~np.isfinite(values) | (values < 0) | ((values != np.round(values)) & integer)  # a step is whole
        kind = "a non-negative integer" if integer else "a finite non-negative number"
        if column == "dev_nll" and not bad.any():
            bad = values > MAX_TARGET_NLL
            kind = (f"at most {MAX_TARGET_NLL:g} nats per target (beyond, the perplexities overflow the statistics "
                    "in float64)")
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
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
    return _sorted(out)


def _sorted(curves: pd.DataFrame) -> pd.DataFrame:
    return curves.sort_values(RUN_KEY + ["step"], kind="stable").reset_index(drop=True)
