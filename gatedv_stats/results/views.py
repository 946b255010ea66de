"""The report's tables and figures of the API's comparison results, by the scale's figures (`Scale.figures`): the
paper's perplexity tables and charts, or a score's table and forest plot."""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import pandas as pd

from gatedv_stats.analysis.comparison import ArmsComparison, Comparison
from gatedv_stats.analysis.figures.score_arms import ScoreArm
from gatedv_stats.core import formatting as fmt
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.reporting.model import RowGroup, Table
from gatedv_stats.reporting.sections.comparison import (
    comparison_charts,
    comparison_row,
    comparison_table,
    per_seed_rows,
)
from gatedv_stats.reporting.sections.tasks import forest_chart, scores_table
from gatedv_stats.reporting.sections.verdicts import verdict_row, verdicts_table
from gatedv_stats.stats.metrics import arm_summary, document_differences


class PerplexityView:
    """Loss files: the Verdicts and Paired comparison tables, per-document differences and per-seed PPL."""

    @staticmethod
    def comparison_tables(comparison: Comparison, paired: Paired) -> list[Table]:
        reference, fit, level = comparison.baseline_arm, comparison.seed_document, comparison.bootstrap.confidence_level
        verdicts = verdict_row(comparison.variant_arm, comparison.verdict_text, comparison.delta_p,
                               None if fit is None else fit.delta_p_interval, comparison.n_pairs, comparison.unit)
        sesoi = None if comparison.verdict is None else comparison.verdict.sesoi
        return [verdicts_table(reference, level, sesoi, (RowGroup(None, (verdicts,)),),
                               (comparison.verdict_explanation,)),
                comparison_table("comparison", fmt.eval_set_name(paired.eval_set), reference, level,
                                 comparison.bootstrap.n_resamples, comparison.bootstrap.rng_seed,
                                 (RowGroup(None, (comparison_row(comparison.variant_arm, comparison,
                                                                 comparison.verdict_text),)),))]

    @staticmethod
    def arms_tables(arms: ArmsComparison) -> list[Table]:
        groups = []
        for eval_set in dict.fromkeys(arm.eval_set for arm in arms.arms):
            rows = tuple(verdict_row(arm.arm, arm.verdict, arm.delta_p, None if arm.delta_p_seed_document_ci is None
                                     else tuple(arm.delta_p_seed_document_ci), arm.n_pairs, arm.unit)
                         for arm in arms.arms if arm.eval_set == eval_set)
            groups.append(RowGroup(fmt.eval_set_name(eval_set), rows))
        return [verdicts_table(arms.reference, 1.0 - arms.alpha, arms.sesoi, tuple(groups),
                               adjusted=len(arms.arms) > 1)]

    @staticmethod
    def plot(pairs: Sequence[Paired], comparisons: ArmsComparison | Comparison) -> alt.VConcatChart:
        """Per-document differences and per-seed paired PPL of the pairs (labelled with their evaluation sets
        where they are several arms')."""
        sets = isinstance(comparisons, ArmsComparison)
        labelled = [(f"{pair.variant_arm} vs {pair.baseline_arm}" + ("" if pair.eval_set is None or not sets
                                                                     else f", {pair.eval_set}"), pair)
                    for pair in pairs]
        names = {pair.eval_set for pair in pairs}
        name = fmt.eval_set_name(names.pop()) if len(names) == 1 else "every evaluation set"
        diffs = [pd.DataFrame({"comparison": label,
                               "diff": document_differences(paired.baseline, paired.variant) / paired.n_units})
                 for label, paired in labelled]
        per_seed = [entry for label, paired in labelled for entry in per_seed_rows(
            label, arm_summary(paired.baseline_arm, paired.seeds, paired.baseline, paired.n_units),
            arm_summary(paired.variant_arm, paired.seeds, paired.variant, paired.n_units))]
        return alt.vconcat(*comparison_charts(name, diffs, per_seed))

    @staticmethod
    def label(arm: object) -> str:
        return arm.arm if arm.eval_set is None else f"{arm.arm} ({arm.eval_set})"  # type: ignore[attr-defined]


class ScoreView:
    """Scores: the table of the comparisons with their adjusted p-values, and the forest plot of the differences."""

    @staticmethod
    def comparison_tables(comparison: Comparison, paired: Paired) -> list[Table]:
        return [scores_table(_alone(comparison))]

    @staticmethod
    def arms_tables(arms: ArmsComparison) -> list[Table]:
        return [scores_table(arms)]

    @staticmethod
    def plot(pairs: Sequence[Paired], comparisons: ArmsComparison | Comparison) -> alt.VConcatChart:
        """The differences with their intervals."""
        arms = comparisons if isinstance(comparisons, ArmsComparison) else _alone(comparisons)
        return alt.vconcat(forest_chart(arms))

    @staticmethod
    def label(arm: object) -> str:
        comparison = arm.comparison  # type: ignore[attr-defined]
        return comparison.variant_arm if comparison.task is None else f"{comparison.variant_arm} on {comparison.task}"


def _alone(comparison: Comparison) -> ArmsComparison:
    """One comparison as a table of one."""
    return ArmsComparison(reference=comparison.baseline_arm, scale=comparison.scale,
                          arms=(ScoreArm(comparison, None, None),), alpha=1.0 - comparison.confidence_level, sesoi=None,
                          n_resamples=0,
                          rng_seed=0, notes=comparison.notes)


VIEWS: dict[str, type[PerplexityView] | type[ScoreView]] = {"perplexity": PerplexityView, "scores": ScoreView}
