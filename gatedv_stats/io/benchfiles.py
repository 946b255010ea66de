"""Cost-benchmark results (`gatedv bench --out EXP/bench.json`): the format tag, the writer, which seals a result with
the SHA-256 of its content, and the checked reader."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from gatedv_stats.core.atomic import write_text_atomic
from gatedv_stats.core.errors import InputError
from gatedv_stats.core.integrity import read_sealed_json, sealed
from gatedv_stats.io.jsonout import strict_json

BENCH_FORMAT = "gatedv-bench-1"
BENCH_GLOB = "bench*.json"
SUMMARY_KEYS = ("forward_ratio", "step_ratio", "peak_memory_baseline_bytes", "peak_memory_variant_bytes")
SETTING_KEYS = ("baseline_arm", "variant_arm", "rounds", "warmup", "calls", "batch_size", "seq_len", "device_name",
                "memory_kind", "pairs")
# A result is sealed under this key (one written before results were sealed records none and is read as it is).
BENCH_SEAL = "sha256"
BENCH_AGAIN = "run gatedv bench again (… --out FILE) or restore an intact copy"


def write_bench_result(path: str | os.PathLike[str], result: dict) -> None:
    """Write a bench result as strict JSON (`strict_json`), atomically, sealed with the SHA-256 of the content a
    reader gets back."""
    content = json.loads(strict_json(result))  # non-finite numbers as null, as they will be read
    write_text_atomic(path, strict_json(sealed(content, BENCH_SEAL)) + "\n")


def read_bench_result(path: str | Path) -> dict:
    """One bench result with its `source`; a wrong format, or a field missing or out of its range (a ratio that is not
    a finite positive number, a round count of 0, an empty arm name, no seed pairs), is an `InputError` naming it."""
    result = read_sealed_json(path, BENCH_SEAL, BENCH_AGAIN)
    if result.get("format") != BENCH_FORMAT:
        raise InputError(f"{path}: not a gatedv bench result (format {result.get('format')!r}, expected "
                         f"{BENCH_FORMAT!r})")
    summary = result.get("summary")
    if not isinstance(summary, dict):
        raise InputError(f"{path}: bench result lacks or mangles 'summary'")
    for key in SETTING_KEYS:
        if key not in result:
            raise InputError(f"{path}: bench result lacks or mangles {key!r}")
    for key in ("baseline_arm", "variant_arm", "device_name", "memory_kind"):
        _check(path, key, result[key], isinstance(result[key], str) and bool(result[key].strip()), "a non-empty name")
    for key, least in (("rounds", 1), ("warmup", 0), ("calls", 1), ("batch_size", 1), ("seq_len", 1)):
        value = result[key]
        _check(path, key, value, isinstance(value, int) and not isinstance(value, bool) and value >= least,
               f"an integer of at least {least}")
    pairs = result["pairs"]
    _check(path, "pairs", pairs, isinstance(pairs, list) and bool(pairs) and
           all(isinstance(pair, dict) and pair for pair in pairs),
           "a list of seed pairs (at least one, each an object of its results)")
    for key in SUMMARY_KEYS:
        value = summary.get(key)
        number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
        smallest, what = (0.0, "a finite number of bytes ≥ 0") if key.endswith("bytes") else (
            math.ulp(0.0), "a finite positive number")
        _check(path, f"summary.{key}", value, math.isfinite(number) and number >= smallest, what)
    return {**result, "source": str(path)}


def _check(path: str | Path, field: str, value: object, good: bool, what: str) -> None:
    if not good:
        raise InputError(f"{path}: {field}: {json.dumps(value, allow_nan=True)[:60]} is not {what}")
