"""Run records: `RUN_DIR/run.json`, the trainer's account of one run (its spec, status, sizes and throughput), and
`RUN_DIR/job.json`, the cluster job that runs it (executor, job id, log paths)."""

from __future__ import annotations

import json
import math
import numbers
from pathlib import Path

from gatedv_stats.core.atomic import write_text_atomic
from gatedv_stats.core.errors import InputError
from gatedv_stats.core.files import read_count, read_model_config, read_seed
from gatedv_stats.core.integrity import read_sealed_json, sealed

RUN_FILE_NAME = "run.json"
JOB_FILE_NAME = "job.json"
# run.json is sealed: the SHA-256 of the rest of its content (canonical JSON) under this key, checked on every read.
RECORD_SEAL = "record_sha256"
RESTORE_RECORD = ("restore an intact copy, or move the run directory away and train the run again (a record "
                  "edited by hand is refused too)")
# job.json is sealed the same way under this key.
JOB_SEAL = "sha256"
RESTORE_JOB = ("restore an intact copy, or move it away: the run then counts as never submitted, so check the "
               "scheduler (squeue) for its job before submitting it again")


def run_record_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / RUN_FILE_NAME


def read_run_record(run_dir: str | Path) -> dict | None:
    """RUN_DIR/run.json, or None when the run has not started."""
    path = run_record_path(run_dir)
    return read_sealed_record(path) if path.is_file() else None


def read_sealed_record(path: str | Path) -> dict:
    """A run.json as written, checked against its seal (`read_sealed_json`), the seal left out."""
    return read_sealed_json(path, RECORD_SEAL, RESTORE_RECORD)


def read_run_file(path: str | Path) -> dict:
    """A run.json read as an input: a JSON object whose recorded fields have the types the report uses (text
    names, a seed, a positive learning rate, counts, a knobs object, a model config); anything else is an
    `InputError` naming the file and the field."""
    record = read_sealed_record(path)
    present = {key: value for key, value in record.items() if value is not None}
    for key in ("variant", "arm", "size"):
        if key in present and not isinstance(present[key], str):
            raise InputError(f"{path}: {key}: {present[key]!r} is not text")
    if "seed" in present:
        record["seed"] = read_seed(present["seed"], f"{path}: seed")
    lr = present.get("lr")
    if lr is not None and (isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not math.isfinite(lr)
                           or lr <= 0):
        raise InputError(f"{path}: lr: {lr!r} is not a positive number")
    for key in ("updates", "warmup", "batch_size", "parameters"):
        if key in present:
            read_count(present[key], f"{path}: {key}")
    if "knobs" in present and not isinstance(present["knobs"], dict):
        raise InputError(f"{path}: knobs: expected a JSON object, got {present['knobs']!r}")
    for key in ("model_config", "config"):
        if key in present:
            read_model_config(present[key], f"{path}: {key}")
    return record


def update_run_record(run_dir: str | Path, fields: dict, *, drop: tuple[str, ...] = ()) -> dict:
    """Merge `fields` into RUN_DIR/run.json, without the keys in `drop` (atomically), and return the record
    written."""
    record = {key: value for key, value in (read_run_record(run_dir) or {}).items() if key not in drop}
    record.update(fields)
    write_text_atomic(run_record_path(run_dir), json.dumps(sealed(record, RECORD_SEAL), indent=2) + "\n")
    return record


def read_job_record(run_dir: str | Path) -> dict | None:
    """RUN_DIR/job.json, checked against its seal, or None when no job was submitted for the run."""
    path = Path(run_dir) / JOB_FILE_NAME
    return read_sealed_json(path, JOB_SEAL, RESTORE_JOB) if path.is_file() else None


def write_job_record(run_dir: str | Path, record: dict) -> None:
    """Write RUN_DIR/job.json atomically, sealed with the SHA-256 of its content."""
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    write_text_atomic(Path(run_dir) / JOB_FILE_NAME, json.dumps(sealed(record, JOB_SEAL), indent=2) + "\n")


def record_arm(record: dict) -> str | None:
    """The arm a run record describes (trainer records name it `variant`)."""
    return record.get("variant") or record.get("arm")
