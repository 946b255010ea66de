"""The API results of loss-file comparisons: a pair, its reviewer statistics, many arms, a plan."""


from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import altair as alt
import pandas as pd

from gatedv_stats.analysis.arms import ArmsComparison
from gatedv_stats.analysis.pair import PairAnalysis
from gatedv_stats.analysis.perplexity import Comparison
from gatedv_stats.core import formatting as fmt
from gatedv_stats.io.lossfiles import SkippedFile
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.reporting.model import RowGroup, Table
from gatedv_stats.reporting.sections.comparison import (
    comparison_charts,
    comparison_row,
    comparison_table,
    per_seed_rows,
)
from gatedv_stats.reporting.sections.verdicts import verdict_row, verdicts_table
from gatedv_stats.results.base import PilotPlanResult, Result, adjusted_headline, planned_at
from gatedv_stats.stats.metrics import arm_summary, document_differences
from gatedv_stats.stats.planning import StudyPlan


def _charts(name: str, pairs: Sequence[tuple[str, Paired]]) -> alt.VConcatChart:
    """The report's figures of these (label, paired) comparisons."""
    diffs = [pd.DataFrame({"comparison": label,
                           "diff": document_differences(paired.baseline, paired.variant) / paired.n_units})
             for label, paired in pairs]
    per_seed = [entry for label, paired in pairs for entry in per_seed_rows(
        label, arm_summary(paired.baseline_arm, paired.seeds, paired.baseline, paired.n_units),
        arm_summary(paired.variant_arm, paired.seeds, paired.variant, paired.n_units))]
    return alt.vconcat(*comparison_charts(name, diffs, per_seed))


@dataclass(frozen=True, repr=False)
class ComparisonResult(Result):
    """`gv.compare`: the verdict and the paper's comparison of two arms (`gatedv bootstrap`)."""

    comparison: Comparison
    paired: Paired
    skipped: tuple[SkippedFile, ...] | None = None

    wraps: ClassVar[str] = "comparison"

    def headline(self) -> str:
        result = self.comparison
        interval = ("" if result.seed_document is None else
                    " " + fmt.format_delta_p_interval(result.seed_document.delta_p_interval))
        return (f"{result.variant.arm} vs {result.baseline.arm}: {result.verdict_text}; ΔP "
                f"{fmt.format_delta_p(result.delta_p)}{interval}; {result.n_pairs} seed pairs, "
                f"{fmt.format_count(result.win.n_docs)} documents")

    def to_frame(self) -> pd.DataFrame:
        result = self.comparison
        fit = result.seed_document
        nan = float("nan")
        return pd.DataFrame([{
            "baseline_arm": result.baseline.arm, "variant_arm": result.variant.arm, "eval_set": self.paired.eval_set,
            "verdict": result.verdict_text, "delta_p": result.delta_p,
            "delta_p_low": nan if fit is None else fit.delta_p_interval[0],
            "delta_p_high": nan if fit is None else fit.delta_p_interval[1],
            "nll_diff_mean": result.nll_diff_mean,
            "nll_diff_low": nan if fit is None else fit.confidence_interval.low,
            "nll_diff_high": nan if fit is None else fit.confidence_interval.high,
            "p_value": nan if result.verdict is None else result.verdict.p_value,
            "nll_diff_models_fixed_low": result.nll_diff_ci.low, "nll_diff_models_fixed_high": result.nll_diff_ci.high,
            "baseline_ppl_mean": result.baseline.ppl_mean, "variant_ppl_mean": result.variant.ppl_mean,
            "improved_pairs": result.improved_pairs, "n_pairs": result.n_pairs, "n_docs": result.win.n_docs,
            "win_rate": result.win.win_rate, "unit": result.unit}])

    def tables(self) -> list[Table]:
        result, reference = self.comparison, self.comparison.baseline.arm
        fit, level = result.seed_document, result.bootstrap.confidence_level
        verdicts = verdict_row(result.variant.arm, result.verdict_text, result.delta_p,
                               None if fit is None else fit.delta_p_interval, result.n_pairs, result.unit)
        sesoi = None if result.verdict is None else result.verdict.sesoi
        return [verdicts_table(reference, level, sesoi, (RowGroup(None, (verdicts,)),), (result.verdict_explanation,)),
                comparison_table("comparison", fmt.eval_set_name(self.paired.eval_set), reference, level,
                                 result.bootstrap.n_resamples, result.bootstrap.rng_seed,
                                 (RowGroup(None, (comparison_row(result.variant.arm, result, result.verdict_text),)),))]

    def plot(self) -> alt.VConcatChart:
        """The report's figures of this comparison: per-document differences and per-seed paired PPL."""
        label = f"{self.paired.variant_arm} vs {self.paired.baseline_arm}"
        return _charts(fmt.eval_set_name(self.paired.eval_set), [(label, self.paired)])


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
    """`gv.arms`: every arm against a reference, with Holm and BH adjusted p-values (`gatedv arms`)."""

    arms: ArmsComparison
    pairs: tuple[Paired, ...]
    skipped: tuple[SkippedFile, ...] | None = None

    wraps: ClassVar[str] = "arms"

    def headline(self) -> str:
        return adjusted_headline([(arm.verdict, arm.arm if arm.eval_set is None else f"{arm.arm} ({arm.eval_set})")
                                  for arm in self.arms.arms], self.arms.reference)

    def to_dict(self) -> dict:
        return {**self.arms.to_dict(),
                "inputs": [{"arm": pair.variant_arm, "eval_set": pair.eval_set, **pair.sources} for pair in self.pairs],
                **self._skipped()}

    def to_frame(self) -> pd.DataFrame:
        return self.arms.to_frame()

    def tables(self) -> list[Table]:
        groups = []
        for eval_set in dict.fromkeys(arm.eval_set for arm in self.arms.arms):
            rows = tuple(verdict_row(arm.arm, arm.verdict, arm.delta_p, None if arm.delta_p_seed_document_ci is None
                                     else tuple(arm.delta_p_seed_document_ci), arm.n_pairs, arm.unit)
                         for arm in self.arms.arms if arm.eval_set == eval_set)
            groups.append(RowGroup(fmt.eval_set_name(eval_set), rows))
        return [verdicts_table(self.arms.reference, 1.0 - self.arms.alpha, self.arms.sesoi, tuple(groups),
                               adjusted=len(self.arms.arms) > 1)]

    def plot(self) -> alt.VConcatChart:
        """The report's figures of every comparison: per-document differences and per-seed paired PPL."""
        compared = [(f"{pair.variant_arm} vs {pair.baseline_arm}" + ("" if pair.eval_set is None else
                                                                    f", {pair.eval_set}"), pair) for pair in self.pairs]
        sets = {pair.eval_set for pair in self.pairs}
        return _charts(fmt.eval_set_name(sets.pop()) if len(sets) == 1 else "every evaluation set", compared)


@dataclass(frozen=True, repr=False)
class PlanResult(PilotPlanResult):
    """`gv.plan`: seeds and documents needed to detect a relative ΔP, from pilot runs (`gatedv plan`)."""

    plan: StudyPlan

    def headline(self) -> str:
        plan = self.plan
        return (f"{self.paired.variant_arm} vs {self.paired.baseline_arm}: {plan.seeds_required} seed pairs to detect "
                f"ΔP {fmt.format_delta_p(plan.effect)} with power {plan.power:g} at α = {plan.alpha:g} (pilot "
                f"{plan.n_seeds} seeds × {fmt.format_count(plan.n_docs)} documents)")

    def summary(self) -> str:
        return f"{planned_at(self.level)}{self.paired.variant_arm} vs {self.paired.baseline_arm}\n{self.plan.summary()}"
