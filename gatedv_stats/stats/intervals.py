"""The one confidence-interval type every statistic returns."""

from __future__ import annotations

import math
from typing import NamedTuple, SupportsFloat


class ConfidenceInterval(NamedTuple):
    """A two-sided interval [low, high]; a tuple, so `low, high = interval` and `list(interval)` work."""

    low: float
    high: float


def log_interval_as_change(low: float, high: float) -> ConfidenceInterval:
    """An interval [low, high] of a log ratio as a relative change exp(x) − 1; an upper end beyond float64
    (a very wide interval) is infinite."""
    return ConfidenceInterval(*(math.expm1(end) if end < 709.0 else math.inf for end in (low, high)))


def finite_or_none(value: SupportsFloat | None) -> float | None:
    """`value` as a float, or None where it is None, infinite or NaN (undefined, or an infinity strict JSON lacks)."""
    return None if value is None or not math.isfinite(value) else float(value)
