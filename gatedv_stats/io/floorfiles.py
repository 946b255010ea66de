"""Noise-floor files (`gatedv noise-floor --out floor.json`): JSON holding a setup's seed variance, what it is valid
for and where it came from, sealed with the SHA-256 of its own content so that a file edited by hand is refused."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from gatedv_stats.core.atomic import write_text_atomic
from gatedv_stats.core.errors import InputError
from gatedv_stats.core.files import read_count, read_json_object
from gatedv_stats.core.integrity import check_seal, sealed
from gatedv_stats.core.outputs import check_output_file

FLOOR_FORMAT = "gatedv-noise-floor/1"
REQUIRED = ("seed_variance", "df", "metric", "unit", "setup", "source")
LISTS = ("values", "seeds", "inputs")  # recorded where the floor came from; absent from older files
# Far above any metric's seed variance; beyond it the interval's arithmetic overflows.
MAX_VARIANCE = 1e100
REMEASURE = "measure the floor again with gatedv noise-floor, or restore an intact copy"  # a damaged floor file


def write_floor_file(path: str | os.PathLike[str], floor: dict) -> None:
    """Write a noise floor as JSON, atomically, with its format and the SHA-256 of its canonical content."""
    check_output_file(path, "noise-floor file", suffix=".json")
    content = sealed({"format": FLOOR_FORMAT, **floor}, "sha256")
    write_text_atomic(path, json.dumps(content, indent=2, ensure_ascii=False) + "\n")


def read_floor_file(path: str | os.PathLike[str]) -> dict:
    """A noise floor as written, its content checked against its recorded SHA-256 and its fields checked."""
    content = read_json_object(path, REMEASURE)
    where = Path(path)
    if content.get("format") != FLOOR_FORMAT:
        raise InputError(f"{where}: not a noise-floor file (format {content.get('format')!r}, expected "
                         f"{FLOOR_FORMAT!r}); write one with gatedv noise-floor")
    check_seal(content, "sha256", where, REMEASURE, required=True)
    missing = [field for field in REQUIRED if field not in content]
    if missing:
        raise InputError(f"{where}: field {missing[0]!r} is missing")
    for field in ("seed_variance", "df"):
        value = content[field]
        if not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 < value <= MAX_VARIANCE:
            raise InputError(f"{where}: field {field!r} must be a positive number up to {MAX_VARIANCE:g} (got "
                             f"{value!r})")
    if not isinstance(content["setup"], dict):
        raise InputError(f"{where}: field 'setup' must be a JSON object")
    read_count(content.get("n_sources", 0), f"{where}: field 'n_sources'")
    wrong = next((field for field in LISTS if not isinstance(content.get(field, []), list)), None)
    if wrong is not None:
        raise InputError(f"{where}: field {wrong!r} must be a list (got {content[wrong]!r})")
    return {**content, "path": str(where)}
