"""Adjusted p-values over a family of tests: Holm (family-wise error rate) and Benjamini–Hochberg (false discovery
rate), from `statsmodels.stats.multitest.multipletests`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from statsmodels.stats.multitest import multipletests

ADJUSTMENTS = {"holm": "holm", "bh": "fdr_bh"}  # our key → multipletests method


def adjust_p_values(p_values: Sequence[float]) -> dict[str, list[float]]:
    """Holm and Benjamini–Hochberg adjusted p-values, in the order given."""
    return {key: [float(value) for value in multipletests(np.asarray(p_values, dtype=np.float64), method=method)[1]]
            for key, method in ADJUSTMENTS.items()}


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm-adjusted p-values over those given; None (no test) stays None and takes no share of the family."""
    given = [p for p in p_values if p is not None]
    adjusted = iter(adjust_p_values(given)["holm"] if given else [])
    return [None if p is None else next(adjusted) for p in p_values]
