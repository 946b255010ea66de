"""Strict JSON for every `--json` output: no NaN or Infinity tokens, which most JSON parsers reject.

A non-finite number becomes null, and the output lists where that happened under `non_finite_as_null`, so a
reader can tell "undefined" from "absent".
"""

from __future__ import annotations

import json
import math

import numpy as np

NON_FINITE_KEY = "non_finite_as_null"


def strict_json(value: object) -> str:
    """`value` as indented JSON that `json.loads(text, parse_constant=...)` accepts without any constant."""
    replaced: list[str] = []
    clean = _finite(value, "", replaced)
    if replaced and isinstance(clean, dict):
        clean[NON_FINITE_KEY] = replaced
    return json.dumps(clean, indent=2, allow_nan=False)


def _finite(value: object, path: str, replaced: list[str]) -> object:
    if isinstance(value, dict):
        return {key: _finite(item, f"{path}.{key}" if path else str(key), replaced) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item, f"{path}[{i}]", replaced) for i, item in enumerate(value)]
    if isinstance(value, np.ndarray):
        return _finite(value.tolist(), path, replaced)
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        replaced.append(path or "(value)")
        return None
    return value
