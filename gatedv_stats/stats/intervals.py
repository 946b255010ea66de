"""The one confidence-interval type every statistic returns."""

from __future__ import annotations

from typing import NamedTuple


class ConfidenceInterval(NamedTuple):
    """A two-sided interval [low, high]; a tuple, so `low, high = interval` and `list(interval)` work."""

    low: float
    high: float
