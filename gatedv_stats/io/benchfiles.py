"""Cost-benchmark results (`gatedv bench --out EXP/bench.json`): the format tag and the checked reader."""

from __future__ import annotations

from pathlib import Path

from gatedv_stats.errors import InputError
from gatedv_stats.io.fileio import read_json_object

BENCH_FORMAT = "gatedv-bench-1"
BENCH_GLOB = "bench*.json"
SUMMARY_KEYS = ("forward_ratio", "step_ratio", "peak_memory_baseline_bytes", "peak_memory_variant_bytes")
SETTING_KEYS = ("baseline_arm", "variant_arm", "rounds", "warmup", "calls", "batch_size", "seq_len", "device_name",
                "memory_kind", "pairs")


def read_bench_result(path: str | Path) -> dict:
    """One bench result with its `source`; a wrong format or a missing field is an `InputError` naming it."""
    result = read_json_object(path)
    if result.get("format") != BENCH_FORMAT:
        raise InputError(f"{path}: not a gatedv bench result (format {result.get('format')!r}, expected "
                         f"{BENCH_FORMAT!r})")
    summary = result.get("summary")
    if not isinstance(summary, dict):
        raise InputError(f"{path}: bench result lacks or mangles 'summary'")
    for key in SETTING_KEYS:
        if key not in result:
            raise InputError(f"{path}: bench result lacks or mangles {key!r}")
    for key in SUMMARY_KEYS:
        try:
            float(summary[key])
        except (KeyError, TypeError, ValueError):
            raise InputError(f"{path}: bench result lacks or mangles {key!r}") from None
    return {**result, "source": str(path)}
