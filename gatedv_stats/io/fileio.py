"""Small read helpers shared by every edge that touches files: content hashes and JSON objects."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from gatedv_stats.errors import InputError


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_json_object(path: str | os.PathLike) -> dict:
    """A JSON file holding one object; anything else is an `InputError` naming the file."""
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(f"{path}: cannot read JSON: {' '.join(str(error).split())}") from None
    if not isinstance(value, dict):
        raise InputError(f"{path}: expected a JSON object")
    return value
