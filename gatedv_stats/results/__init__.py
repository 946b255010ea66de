"""What the Python API returns: the library's results, presented for where they are shown.

Each result reads in one line as its `repr` (`Comparison(gatedv vs baseline: no detectable difference; …)`),
prints as the command line's text summary (`str`), shows the report's tables in a notebook (`_repr_html_`),
gives a pandas DataFrame (`to_frame`), the command line's `--json` object (`to_dict`) and the report's Altair charts
(`plot`). The statistics themselves stay in the wrapped result (`comparison`, `analysis`, `arms`, `plan`), whose
fields are also reachable on the wrapper (`result.delta_p`). One family serves every metric: `ComparisonResult`,
`AnalysisResult`, `ArmsResult` and `PlanResult` for loss files, item scores and score tables alike.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

from gatedv_stats.analysis.comparison import ArmsComparison, Comparison
from gatedv_stats.analysis.pair import PairAnalysis
from gatedv_stats.analysis.plan import DifferencePlan, FloorPlan
from gatedv_stats.io.runfiles import SkippedFile
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.results.base import Result
from gatedv_stats.results.comparisons import AnalysisResult, ArmsResult, ComparisonResult, PlanResult
from gatedv_stats.results.floors import FloorPlanResult, NoiseFloorResult
from gatedv_stats.results.ledger import LedgerEntryResult, LedgerResult
from gatedv_stats.results.runs import Runs
from gatedv_stats.results.sequential import SequentialResult
from gatedv_stats.stats.planning import StudyPlan

__all__ = ["AnalysisResult", "ArmsResult", "ComparisonResult", "FloorPlanResult", "LedgerEntryResult", "LedgerResult",
           "NoiseFloorResult", "PlanResult", "Result", "Runs", "SequentialResult", "result_of"]

# The names of the downstream tasks' results before one family served every metric: importable for one release,
# with a DeprecationWarning.
DEPRECATED = {"TaskComparisonResult": "ComparisonResult", "TaskSuiteResult": "ArmsResult",
              "TaskPlanResult": "PlanResult"}


def __getattr__(name: str) -> Any:
    if name in DEPRECATED:
        warnings.warn(f"gatedv_stats.results.{name} is deprecated: every metric's result is {DEPRECATED[name]}; "
                      f"{name} goes in the next release", DeprecationWarning, stacklevel=2)
        return globals()[DEPRECATED[name]]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# The API result of each library result: of one pair, or of the pairs of a many-arms comparison.
_OF_ONE_PAIR: dict[type, Callable[..., Result]] = {
    Comparison: ComparisonResult, PairAnalysis: AnalysisResult, StudyPlan: PlanResult, DifferencePlan: PlanResult}


def result_of(result: object, paired: Paired | Sequence[Paired], skipped: tuple[SkippedFile, ...] | None) -> Result:
    """The API's presentation of a library result (of one pair, or of the pairs of a many-arms comparison)."""
    pairs = tuple(paired) if isinstance(paired, Sequence) else (paired,)
    if type(result) in _OF_ONE_PAIR:
        return _OF_ONE_PAIR[type(result)](result, pairs[0], skipped)
    if isinstance(result, ArmsComparison):
        return ArmsResult(result, pairs, skipped)
    if isinstance(result, FloorPlan):
        return FloorPlanResult(result, skipped)
    raise TypeError(f"no API result for {type(result).__name__}")
