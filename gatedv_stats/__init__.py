"""gatedv-stats: paired comparisons of Transformer variants from per-document loss files.

The Python API (`import gatedv_stats as gv`): the calls of `gatedv_stats.api`, the research ledger `gv.Ledger`, the
paired arrays `gv.Paired` (`gv.PairedLosses` is its earlier name), the results the calls return and the errors
`gv.InputError` / `gv.ParameterError`. Importing the package loads none of them until first used; `dir(gv)` lists
only them; `__init__.pyi` gives type checkers their types.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# the module that defines each public name, imported on first use
_MODULES = {
    "gatedv_stats.api": ("analyze", "arms", "compare", "load", "noise_floor", "pair", "plan", "report", "sequential"),
    "gatedv_stats.ledger": ("Ledger",),
    "gatedv_stats.analysis.experiment": ("AnalysisSettings",),
    "gatedv_stats.pairing.paired": ("Paired", "PairedLosses"),
    "gatedv_stats.core.errors": ("InputError", "ParameterError"),
    "gatedv_stats.results": ("AnalysisResult", "ArmsResult", "ComparisonResult", "FloorPlanResult",
                             "LedgerEntryResult", "LedgerResult", "NoiseFloorResult", "PlanResult", "Runs",
                             "SequentialResult"),
}
# Earlier names, kept for one release: each access warns (`gatedv_stats.results.DEPRECATED`).
_DEPRECATED = {name: "gatedv_stats.results" for name in ("TaskComparisonResult", "TaskPlanResult", "TaskSuiteResult")}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}
__all__ = sorted([*_EXPORTS, "__version__"])


def __getattr__(name: str) -> Any:
    if name in _DEPRECATED:  # looked up each time, so that each access warns
        return getattr(importlib.import_module(_DEPRECATED[name]), name)
    if name not in _EXPORTS:
        raise AttributeError(f"module 'gatedv_stats' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # found directly next time
    return value


def __dir__() -> list[str]:
    """The public names (`__all__`) and the module's own dunders, not its helpers, submodules or deprecated names."""
    return sorted({*_EXPORTS, *(name for name in globals() if name.startswith("__") and name.endswith("__"))})
