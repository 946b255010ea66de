"""Run records: `RUN_DIR/run.json`, the trainer's account of one run (its spec, status, sizes and throughput)."""

from __future__ import annotations

import json
from pathlib import Path

from gatedv_stats.io.atomic import write_text_atomic
from gatedv_stats.io.fileio import read_json_object

RUN_FILE_NAME = "run.json"


def run_record_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / RUN_FILE_NAME


def read_run_record(run_dir: str | Path) -> dict | None:
    """RUN_DIR/run.json, or None when the run has not started."""
    path = run_record_path(run_dir)
    return read_json_object(path) if path.is_file() else None


def update_run_record(run_dir: str | Path, fields: dict) -> dict:
    """Merge `fields` into RUN_DIR/run.json (atomically) and return the record written."""
    record = {**(read_run_record(run_dir) or {}), **fields}
    write_text_atomic(run_record_path(run_dir), json.dumps(record, indent=2) + "\n")
    return record


def record_arm(record: dict) -> str | None:
    """The arm a run record describes (trainer records name it `variant`)."""
    return record.get("variant") or record.get("arm")
