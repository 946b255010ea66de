"""What the Python API returns: the library's results, presented for where they are shown.

Each result reads in one line as its `repr` (`Comparison(gatedv vs baseline: no detectable difference; …)`),
prints as the command line's text summary (`str`), shows the report's tables in a notebook (`_repr_html_`),
gives a pandas DataFrame (`to_frame`), the command line's `--json` object (`to_dict`) and, where the report
draws figures for it, the report's Altair charts (`plot`). The statistics themselves stay in the wrapped result
(`comparison`, `analysis`, `arms`, `plan`), whose fields are also reachable on the wrapper
(`result.delta_p`).
"""

from __future__ import annotations

from collections.abc import Sequence

from gatedv_stats.analysis.arms import ArmsComparison, TaskSuite
from gatedv_stats.analysis.ledger import LedgerHistory
from gatedv_stats.analysis.pair import PairAnalysis
from gatedv_stats.analysis.perplexity import Comparison
from gatedv_stats.analysis.plan import FloorPlan, TaskPlan
from gatedv_stats.analysis.task_scores import TaskComparison
from gatedv_stats.io.lossfiles import SkippedFile
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.results.base import Result
from gatedv_stats.results.floors import FloorPlanResult, NoiseFloorResult
from gatedv_stats.results.ledger import LedgerEntryResult, LedgerResult
from gatedv_stats.results.perplexity import AnalysisResult, ArmsResult, ComparisonResult, PlanResult
from gatedv_stats.results.runs import Runs
from gatedv_stats.results.sequential import SequentialResult
from gatedv_stats.results.tasks import TaskComparisonResult, TaskPlanResult, TaskSuiteResult
from gatedv_stats.stats.planning import StudyPlan

__all__ = ["AnalysisResult", "ArmsResult", "ComparisonResult", "FloorPlanResult", "LedgerEntryResult", "LedgerResult",
           "NoiseFloorResult", "PlanResult", "Result", "Runs", "SequentialResult", "TaskComparisonResult",
           "TaskPlanResult", "TaskSuiteResult", "result_of"]


def result_of(result: object, paired: Paired | Sequence[Paired], skipped: tuple[SkippedFile, ...] | None) -> Result:
    """The API's presentation of a library result (of one pair, or of the pairs of a many-arms comparison)."""
    pairs = tuple(paired) if isinstance(paired, Sequence) else (paired,)
    if isinstance(result, Comparison):
        return ComparisonResult(result, pairs[0], skipped)
    if isinstance(result, PairAnalysis):
        return AnalysisResult(result, pairs[0], skipped)
    if isinstance(result, ArmsComparison):
        return ArmsResult(result, pairs, skipped)
    if isinstance(result, StudyPlan):
        return PlanResult(result, pairs[0], skipped)
    if isinstance(result, TaskComparison):
        return TaskComparisonResult(result, pairs[0], skipped)
    if isinstance(result, TaskSuite):
        return TaskSuiteResult(result, pairs, skipped)
    if isinstance(result, FloorPlan):
        return FloorPlanResult(result, skipped)
    if isinstance(result, TaskPlan):
        return TaskPlanResult(result, pairs[0], skipped)
    if isinstance(result, LedgerHistory):
        return LedgerResult(result)
    raise TypeError(f"no API result for {type(result).__name__}")
