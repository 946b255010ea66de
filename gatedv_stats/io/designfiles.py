"""Sequential design files (`gatedv decide --design design.json`): JSON holding a group-sequential design fixed
before its first look and the record of every look, sealed with the SHA-256 of its own content so that a file edited
by hand is refused; the design part carries its own hash too (`design_sha256`), which every look repeats. A run
directory whose runs a sequential sweep decided records the design it belongs to (`sequential.json`), so that the
research ledger can ask for the design's stage-wise p-value instead of a fixed-sample one."""

from __future__ import annotations

import json
import os
from pathlib import Path

from gatedv_stats.core.atomic import write_text_atomic
from gatedv_stats.core.errors import InputError
from gatedv_stats.core.files import canonical_sha256, read_json_object
from gatedv_stats.core.integrity import check_seal, read_sealed_json, sealed
from gatedv_stats.core.outputs import check_output_file

DESIGN_FORMAT = "gatedv-sequential-design/1"
RUN_DESIGN_FILE = "sequential.json"  # in a run directory: the sequential design its runs were decided by
FLAG = "--design"
# a damaged design file: its looks cannot be trusted, and a design is fixed before its first look
RESTART = "restore an intact copy, or start a new design file (a design is fixed before its first look)"


def check_design_path(path: str | os.PathLike[str]) -> None:
    """A design file can be written at `path` (checked before any work)."""
    check_output_file(path, FLAG, suffix=".json")


def write_design_file(path: str | os.PathLike[str], design: dict, looks: list[dict]) -> str:
    """Write a design and its looks as JSON, atomically, with its format, the design's SHA-256 and the SHA-256 of
    the whole canonical content; returns the design's hash. Every number must be finite (strict JSON)."""
    check_design_path(path)
    design_sha256 = canonical_sha256(design)
    content = sealed({"format": DESIGN_FORMAT, "design": design, "design_sha256": design_sha256, "looks": looks},
                     "sha256")
    try:
        text = json.dumps(content, indent=2, ensure_ascii=False, allow_nan=False)
    except ValueError as error:  # a bug: the writer must turn infinities into null
        raise ValueError(f"design file {path}: {error}") from None
    write_text_atomic(path, text + "\n")
    return design_sha256


def read_design_file(path: str | os.PathLike[str]) -> dict:
    """A design file as written: its content checked against the SHA-256 it records; returns {"design", "looks",
    "design_sha256", "path"}."""
    where = Path(path)
    content = read_json_object(path, RESTART)
    if content.get("format") != DESIGN_FORMAT:
        raise InputError(f"{where}: not a sequential design file (format {content.get('format')!r}, expected "
                         f"{DESIGN_FORMAT!r}); gatedv decide writes one on its first look")
    check_seal(content, "sha256", where, RESTART, required=True)
    design, looks = content.get("design"), content.get("looks")
    if not (isinstance(design, dict) and isinstance(looks, list) and all(isinstance(look, dict) for look in looks)):
        raise InputError(f"{where}: a design file holds a 'design' object and a list of 'looks'")
    if content.get("design_sha256") != canonical_sha256(design):
        raise InputError(f"{where}: the design does not match its design_sha256")
    return {"design": design, "looks": looks, "design_sha256": content["design_sha256"], "path": str(where)}


def write_run_design(run_dir: str | os.PathLike[str], design: str | os.PathLike[str], design_sha256: str) -> None:
    """Record in a run directory that its runs are decided by the sequential design at `design` (sealed)."""
    record = sealed({"design": os.path.abspath(design), "design_sha256": design_sha256}, "sha256")
    write_text_atomic(Path(run_dir) / RUN_DESIGN_FILE, json.dumps(record, indent=2) + "\n")


def read_run_design(loss_file: str | os.PathLike[str]) -> dict | None:
    """The sequential design recorded beside a loss file (in its run directory), or None."""
    path = Path(loss_file).parent / RUN_DESIGN_FILE
    if not path.is_file():
        return None
    return read_sealed_json(path, "sha256", "remove it if the runs were not decided by a sequential design, or "
                                            "restore an intact copy")
