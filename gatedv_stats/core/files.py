"""Small read helpers shared by every edge that touches files: directory listings, content hashes (of a model
directory's weights too), JSON objects, seeds, counts and model configs."""

from __future__ import annotations

import hashlib
import json
import numbers
import os
import re
from pathlib import Path

from gatedv_stats.core.errors import InputError
from gatedv_stats.core.validation import MAX_SEED

_EXACT_FLOAT = 2**53  # a float beyond it may have lost the seed's last digits


def paths_under(directory: str | os.PathLike[str]) -> list[Path]:
    """Every path under `directory`, sorted, as `Path.rglob("*")` finds them (linked directories are not entered),
    except that a directory that cannot be listed is an `InputError` naming it instead of passed over."""
    return sorted(Path(root, name) for root, directories, files in os.walk(directory, onerror=_unlistable)
                  for name in directories + files)


def _unlistable(error: OSError) -> None:
    raise InputError(f"{error.filename}: cannot list the directory: {error.strerror or type(error).__name__}")


def each_once(paths: list[Path]) -> list[Path]:
    """Each file once, in the order first named, however many ways it was named (itself, through a directory)."""
    first: dict[Path, Path] = {}
    for path in paths:
        first.setdefault(path.resolve(), path)
    return list(first.values())


def file_sha256(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB blocks; a file that cannot be read is an `InputError` naming it."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError as error:
        raise InputError(f"{path}: cannot read: {error.strerror or type(error).__name__}") from None
    return digest.hexdigest()


def files_sha256(paths: list[Path]) -> str:
    """SHA-256 identifying several files: of their bytes for one file, else of the `name<TAB>sha256` lines."""
    if len(paths) == 1:
        return file_sha256(paths[0])
    lines = "".join(f"{path.name}\t{file_sha256(path)}\n" for path in sorted(paths, key=lambda path: path.name))
    return hashlib.sha256(lines.encode("utf-8")).hexdigest()


def weight_files(model_dir: str | os.PathLike[str]) -> list[Path]:
    """The weight files of a model directory: `*.safetensors` and `pytorch_model*.bin`, sorted by name."""
    return sorted(path for path in Path(model_dir).iterdir() if path.is_file()
                  and (path.suffix == ".safetensors" or re.fullmatch(r"pytorch_model.*\.bin", path.name)))


def read_json_object(path: str | os.PathLike[str], advice: str | None = None) -> dict:
    """A JSON file holding one object; anything else is an `InputError` naming the file (and, for a file that is
    not JSON, truncated or emptied, `advice`: what to do)."""
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        reason = " ".join(str(error).split())
        raise InputError(f"{path}: cannot read JSON: {reason}" + (f"; {advice}" if advice else "")) from None
    if not isinstance(value, dict):
        raise InputError(f"{path}: expected a JSON object")
    return value


def read_seed(value: object, where: str) -> int:
    """A run's seed as recorded, exactly: an integer from 0 to `MAX_SEED` (int64), given as an integer, as
    integral text, or as an integral float up to 2**53; anything else is an `InputError` naming `where`."""
    number = value
    if isinstance(value, str):
        text = value.strip()
        try:
            number = int(text) if re.fullmatch(r"[+-]?[0-9]+", text) else float(text)
        except ValueError:
            number = None
    if isinstance(number, numbers.Real) and not isinstance(number, numbers.Integral):
        real = float(number)
        integral = real.is_integer()  # False for inf and NaN
        if integral and _EXACT_FLOAT < real <= MAX_SEED:
            raise InputError(f"{where}: {value!r} is a float beyond 2**53, which may have lost digits; "
                             "record the seed as an integer")
        number = int(real) if integral else None
    if isinstance(number, bool) or not isinstance(number, numbers.Integral) or not 0 <= int(number) <= MAX_SEED:
        raise InputError(f"{where}: {value!r} is not an integer from 0 to {MAX_SEED}")
    return int(number)


def read_count(value: object, where: str, *, minimum: int = 0) -> int:
    """A recorded count (updates, a batch size, a model width): an integer no smaller than `minimum`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise InputError(f"{where}: {value!r} is not an integer >= {minimum}")
    return int(value)


MODEL_SIZES = ("n_layers", "d_model", "n_heads", "head_dim", "d_ff", "vocab_size", "seq_len")


def read_model_config(value: object, where: str) -> dict:
    """A recorded model config: a JSON object whose sizes (`MODEL_SIZES`), where recorded, are positive integers."""
    if not isinstance(value, dict):
        raise InputError(f"{where}: expected a JSON object, got {value!r}")
    for key in MODEL_SIZES:
        if value.get(key) is not None:
            read_count(value[key], f"{where}.{key}", minimum=1)
    return value


def canonical_sha256(value: object) -> str:
    """SHA-256 of `value` as canonical JSON (sorted keys, compact separators, UTF-8)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
