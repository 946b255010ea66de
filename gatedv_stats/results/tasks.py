"""The API results of downstream-task comparisons: one task, a suite of tasks, a plan in the metric's units."""


from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import pandas as pd

from gatedv_stats.analysis.arms import TaskSuite
from gatedv_stats.analysis.plan import TaskPlan
from gatedv_stats.analysis.task_scores import TaskComparison
from gatedv_stats.core import formatting as fmt
from gatedv_stats.io.lossfiles import SkippedFile
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.reporting.model import RowGroup, Table, row
from gatedv_stats.results.base import PilotPlanResult, Result, adjusted_headline


@dataclass(frozen=True, repr=False)
class TaskComparisonResult(Result):
    """`gv.compare(..., metric=...)` on one task: the verdict and the figures of two arms' item scores."""

    comparison: TaskComparison
    paired: Paired
    skipped: tuple[SkippedFile, ...] | None = None

    wraps: ClassVar[str] = "comparison"

    def headline(self) -> str:
        result = self.comparison
        return (f"{result.variant_arm} vs {result.baseline_arm} on {result.task} ({result.metric}): "
                f"{result.verdict_text}; difference {fmt.format_difference(result.difference, result.proportion)}; "
                f"{result.n_seeds} seed pairs, {fmt.format_count(result.n_items)} items")

    def to_frame(self) -> pd.DataFrame:
        return _task_frame([self.comparison], [None])

    def tables(self) -> list[Table]:
        return [_tasks_table(self.comparison.baseline_arm, self.comparison.metric, [self.comparison], [None])]


@dataclass(frozen=True, repr=False)
class TaskSuiteResult(Result):
    """`gv.compare` / `gv.arms` with `metric=` over several tasks: every (arm, task) comparison, Holm-adjusted
    across the suite, with each arm's macro-average."""

    suite: TaskSuite
    pairs: tuple[Paired, ...]
    skipped: tuple[SkippedFile, ...] | None = None

    wraps: ClassVar[str] = "suite"

    def headline(self) -> str:
        return adjusted_headline([(result.verdict_text, f"{result.variant_arm} on {result.task}")
                                  for result in self.suite.results], self.suite.reference, "task comparisons")

    def to_frame(self) -> pd.DataFrame:
        return _task_frame(self.suite.results, self.suite.p_holm)

    def tables(self) -> list[Table]:
        return [_tasks_table(self.suite.reference, self.suite.metric, self.suite.results, self.suite.p_holm)]


def _task_frame(results: Sequence[TaskComparison], p_holm: Sequence[float | None]) -> pd.DataFrame:
    nan = float("nan")
    return pd.DataFrame([{
        "baseline_arm": result.baseline_arm, "variant_arm": result.variant_arm, "task": result.task,
        "metric": result.metric, "verdict": result.verdict_text, "difference": result.difference,
        "difference_low": nan if result.interval is None else result.interval.confidence_interval.low,
        "difference_high": nan if result.interval is None else result.interval.confidence_interval.high,
        "p_value": nan if result.interval is None else result.interval.p_value,
        "p_holm": nan if holm is None else holm, "n_seeds": result.n_seeds, "n_items": result.n_items}
        for result, holm in zip(results, p_holm)])


def _tasks_table(reference: str, metric: str, results: Sequence[TaskComparison],
                 p_holm: Sequence[float | None]) -> Table:
    rows = tuple(row(result.task, result.variant_arm, result.verdict_text,
                     fmt.format_difference(result.difference, result.proportion),
                     "—" if result.interval is None else
                     fmt.format_difference_interval(result.interval.confidence_interval, result.proportion),
                     "n/a" if holm is None else f"{holm:.3g}") for result, holm in zip(results, p_holm))
    return Table("tasks", f"Downstream tasks: {metric}, variant − {reference}.",
                 ("Task", "Arm", "Verdict", "Difference", "Interval", "Holm p"), "llllrr", (RowGroup(None, rows),))


@dataclass(frozen=True, repr=False)
class TaskPlanResult(PilotPlanResult):
    """`gv.plan(..., metric=...)`: seed pairs and items needed for a difference in a task's metric."""

    plan: TaskPlan

    def headline(self) -> str:
        plan = self.plan
        seeds = "more than 1000" if plan.seeds_required is None else str(plan.seeds_required)
        return (f"{self.paired.variant_arm} vs {self.paired.baseline_arm} on {plan.task}: {seeds} seed pairs to detect "
                f"{fmt.format_difference(plan.effect, plan.proportion, signed=False)} of {plan.metric} with power "
                f"{plan.power:g} at α = {plan.alpha:g} (pilot {plan.n_seeds} seeds × {fmt.format_count(plan.n_items)} "
                "items)")
