"""Verifying what was written: a file against the SHA-256 a record holds for it, a JSON record against the SHA-256
of its own content. A mismatch is one `InputError` naming the file, where its hash is recorded and what to do."""

from __future__ import annotations

import os
from collections.abc import Iterable

from gatedv_stats.core.errors import InputError
from gatedv_stats.core.files import canonical_sha256, file_sha256, read_json_object


def damaged(path: str | os.PathLike[str], detail: str, advice: str) -> InputError:
    """The one-line error of a file whose content is not what was written: `PATH: damaged: DETAIL; ADVICE`."""
    return InputError(f"{os.fspath(path)}: damaged: {detail}; {advice}")


def check_file_sha256(path: str | os.PathLike[str], accepted: Iterable[str | None], record: str | os.PathLike[str],
                      advice: str) -> str:
    """The SHA-256 of the file `path`, which must be one of `accepted` (the hashes `record` holds for it: the file
    written last, and the one it was about to replace while the record already named the new one); else a
    `damaged` error."""
    hashes = [sha for sha in accepted if sha]
    found = file_sha256(path)
    if hashes and found not in hashes:
        raise damaged(path, f"its sha256 {found[:12]}… is not the one {os.fspath(record)} records "
                            f"({hashes[0][:12]}…)", advice)
    return found


def sealed(record: dict, key: str) -> dict:
    """`record` with `key` set to the SHA-256 of the rest of it as canonical JSON (`canonical_sha256`)."""
    content = {name: value for name, value in record.items() if name != key}
    return {**content, key: canonical_sha256(content)}


def check_seal(record: dict, key: str, path: str | os.PathLike[str], advice: str, *, required: bool = False) -> dict:
    """`record` (read from `path`) when it records no `key` (unless `required`), or when `key` is the SHA-256 of the
    rest of it; else a `damaged` error (edited by hand, or damaged)."""
    if key not in record:
        if required:
            raise damaged(path, f"it records no sha256 of its content ({key})", advice)
        return record
    if record[key] != sealed(record, key)[key]:
        raise damaged(path, f"its content does not match the sha256 it records ({key})", advice)
    return record


def read_sealed_json(path: str | os.PathLike[str], key: str, advice: str) -> dict:
    """The JSON object in `path` without its seal `key`, checked against it (`check_seal`; a file written before its
    kind was sealed has none and is read as it is). A file that is not JSON, truncated or emptied, is one line
    naming it and `advice` too."""
    record = read_json_object(path, advice)
    check_seal(record, key, path, advice)
    record.pop(key, None)
    return record
