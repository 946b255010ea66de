"""The API results of comparisons, one family for every metric: a pair (`ComparisonResult`), its reviewer
statistics (`AnalysisResult`), many arms or tasks (`ArmsResult`), a plan (`PlanResult`). Each table starts with the
columns every metric has — estimate, low, high, p_value, verdict — and goes on with its scale's own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import altair as alt
import pandas as pd

from gatedv_stats.analysis.arms import ArmsComparison
from gatedv_stats.analysis.compare import Comparison
from gatedv_stats.analysis.pair import PairAnalysis
from gatedv_stats.analysis.plan import DifferencePlan
from gatedv_stats.io.runfiles import SkippedFile
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.reporting.model import Table
from gatedv_stats.results.base import PilotPlanResult, Result, adjusted_headline, planned_at
from gatedv_stats.results.views import VIEWS
from gatedv_stats.stats.planning import StudyPlan


@dataclass(frozen=True, repr=False)
class ComparisonResult(Result):
    """`gv.compare`: the verdict and the figures of two arms on their scale (`gatedv bootstrap`)."""

    comparison: Comparison
    paired: Paired
    skipped: tuple[SkippedFile, ...] | None = None

    wraps: ClassVar[str] = "comparison"

    def headline(self) -> str:
        return self.comparison.headline()

    def to_frame(self) -> pd.DataFrame:
        """One row: estimate, low, high, p_value, verdict, then the scale's columns (perplexity: the arms, ΔP and D
        with their intervals, PPL, pairs, documents, wins)."""
        comparison = self.comparison
        return pd.DataFrame([{**comparison.leading(), **comparison.figures.columns(comparison)}])

    def tables(self) -> list[Table]:
        return VIEWS[self.paired.scale.figures].comparison_tables(self.comparison, self.paired)

    def plot(self) -> alt.VConcatChart:
        """The report's figures of this comparison (perplexity: per-document differences and per-seed paired PPL;
        a score: the difference with its interval)."""
        return VIEWS[self.paired.scale.figures].plot([self.paired], self.comparison)


@dataclass(frozen=True, repr=False)
class AnalysisResult(Result):
    """`gv.analyze`: everything about one pair of arms (`gatedv analyze`)."""

    analysis: PairAnalysis
    paired: Paired
    skipped: tuple[SkippedFile, ...] | None = None

    wraps: ClassVar[str] = "analysis"

    @property
    def warnings(self) -> tuple[str, ...]:
        """The comparison's: seeds dropped, mismatches accepted, undefined spreads, groups the units do not explain."""
        return self.analysis.comparison.warnings

    @property
    def comparison_result(self) -> ComparisonResult:
        """The comparison inside the analysis, as `gv.compare` returns it."""
        return ComparisonResult(self.analysis.comparison, self.paired, self.skipped)

    def headline(self) -> str:
        return self.comparison_result.headline()

    def to_frame(self) -> pd.DataFrame:
        analysis, nan = self.analysis, float("nan")
        seed_level = analysis.seed_level
        return self.comparison_result.to_frame().assign(
            permutation_p_value=analysis.permutation.p_value,
            bca_low=nan if analysis.bca_interval is None else analysis.bca_interval.low,
            bca_high=nan if analysis.bca_interval is None else analysis.bca_interval.high,
            t_p_value=nan if seed_level is None else seed_level.t_interval.p_value)

    def tables(self) -> list[Table]:
        return self.comparison_result.tables()

    def plot(self) -> alt.VConcatChart:
        """The report's figures of this comparison (see `ComparisonResult.plot`)."""
        return self.comparison_result.plot()


@dataclass(frozen=True, repr=False)
class ArmsResult(Result):
    """`gv.arms` (and `gv.compare` over a suite of tasks): every arm against a reference, with Holm and BH adjusted
    p-values (`gatedv arms`)."""

    arms: ArmsComparison
    pairs: tuple[Paired, ...]
    skipped: tuple[SkippedFile, ...] | None = None

    wraps: ClassVar[str] = "arms"

    def headline(self) -> str:
        view = VIEWS[self.arms.scale.figures]
        return adjusted_headline([(row.leading()["verdict"], view.label(row)) for row in self.arms.arms],
                                 self.arms.reference)

    def to_dict(self) -> dict:
        return {**self.arms.to_dict(),
                "inputs": [{"arm": pair.variant_arm, "eval_set": pair.eval_set, **({} if pair.task is None else
                                                                                   {"task": pair.task}),
                            **pair.sources} for pair in self.pairs],
                **self._skipped()}

    def to_frame(self) -> pd.DataFrame:
        return self.arms.to_frame()

    def tables(self) -> list[Table]:
        return VIEWS[self.arms.scale.figures].arms_tables(self.arms)

    def plot(self) -> alt.VConcatChart:
        """The report's figures of every comparison (see `ComparisonResult.plot`)."""
        return VIEWS[self.arms.scale.figures].plot(self.pairs, self.arms)


@dataclass(frozen=True, repr=False)
class PlanResult(PilotPlanResult):
    """`gv.plan`: seeds and units needed to detect an effect on the pair's scale, from pilot runs (`gatedv plan`):
    a relative ΔP of loss files, or a difference in a score's units."""

    plan: StudyPlan | DifferencePlan

    def headline(self) -> str:
        return self.plan.headline(self.paired.baseline_arm, self.paired.variant_arm)

    def summary(self) -> str:
        return f"{planned_at(self.level)}{self.paired.variant_arm} vs {self.paired.baseline_arm}\n{self.plan.summary()}"
