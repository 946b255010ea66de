"""Timing shared by the benchmark scripts."""

from __future__ import annotations

import time
from collections.abc import Callable


def best_of(call: Callable[[], object], repeats: int = 3) -> float:
    """The fastest of `repeats` wall-clock timings of `call()`, in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)
