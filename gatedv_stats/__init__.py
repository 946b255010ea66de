"""gatedv-stats: paired comparisons of Transformer variants from per-document loss files.

The Python API (`import gatedv_stats as gv`; see `gatedv_stats.api`): `gv.load`, `gv.pair`, `gv.compare`,
`gv.analyze`, `gv.arms`, `gv.plan`, `gv.report` for loss files and (with `metric=`) downstream-task item scores,
paired arrays from any pipeline's long table with `gv.pair(frame)` (a `gv.Paired`; `gv.PairedLosses` is its
earlier name), a research ledger with online false-discovery-rate control (`gv.Ledger`), and the errors
`gv.InputError` / `gv.ParameterError`. Importing the package loads none of them until first used; `__init__.pyi`
gives type checkers their types.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> the module that defines it, imported on first use
_EXPORTS = {
    "load": "gatedv_stats.api", "pair": "gatedv_stats.api", "compare": "gatedv_stats.api",
    "analyze": "gatedv_stats.api", "arms": "gatedv_stats.api", "plan": "gatedv_stats.api",
    "report": "gatedv_stats.api", "noise_floor": "gatedv_stats.api", "Ledger": "gatedv_stats.ledger",
    "sequential": "gatedv_stats.decide",
    "AnalysisSettings": "gatedv_stats.analysis.experiment",
    "Paired": "gatedv_stats.pairing.paired", "PairedLosses": "gatedv_stats.pairing.paired",
    "InputError": "gatedv_stats.core.errors", "ParameterError": "gatedv_stats.core.errors",
    "Runs": "gatedv_stats.results", "ComparisonResult": "gatedv_stats.results",
    "AnalysisResult": "gatedv_stats.results", "ArmsResult": "gatedv_stats.results",
    "PlanResult": "gatedv_stats.results", "TaskComparisonResult": "gatedv_stats.results",
    "TaskSuiteResult": "gatedv_stats.results", "TaskPlanResult": "gatedv_stats.results",
    "NoiseFloorResult": "gatedv_stats.results", "FloorPlanResult": "gatedv_stats.results",
    "SequentialResult": "gatedv_stats.results",
    "LedgerResult": "gatedv_stats.results", "LedgerEntryResult": "gatedv_stats.results",
}

__all__ = [
    "AnalysisResult", "AnalysisSettings", "ArmsResult", "ComparisonResult", "FloorPlanResult", "InputError",
    "Ledger", "LedgerEntryResult", "LedgerResult", "NoiseFloorResult", "Paired", "PairedLosses",
    "ParameterError", "PlanResult", "Runs", "SequentialResult", "TaskComparisonResult", "TaskPlanResult",
    "TaskSuiteResult", "__version__", "analyze", "arms", "compare", "load", "noise_floor", "pair", "plan", "report",
    "sequential",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'gatedv_stats' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # found directly next time
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
