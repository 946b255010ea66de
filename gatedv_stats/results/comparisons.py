"""The API results of comparisons, one family for every metric: a pair (`ComparisonResult`), its reviewer
statistics (`AnalysisResult`), many arms or tasks (`ArmsResult`), a plan (`PlanResult`). Each table starts with the
columns every metric has — estimate, low, high, p_value, verdict — and goes on with its scale's own. The report's
tables and figures follow the scale's figures (`Scale.figures`): the paper's perplexity tables and charts, or a
score's table and forest plot."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import altair as alt
import pandas as pd

from gatedv_stats.analysis.arms import comparison_label
from gatedv_stats.analysis.comparison import ArmsComparison, Comparison
from gatedv_stats.analysis.figures.score_arms import ScoreArm
from gatedv_stats.analysis.pair import PairAnalysis
from gatedv_stats.analysis.plan import DifferencePlan
from gatedv_stats.core import formatting as fmt
from gatedv_stats.io.runfiles import SkippedFile
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.reporting.model import RowGroup, Table
from gatedv_stats.reporting.sections.comparison import comparison_charts, comparison_row, comparison_table
from gatedv_stats.reporting.sections.tasks import forest_chart, scores_table
from gatedv_stats.reporting.sections.verdicts import verdict_row, verdicts_table
from gatedv_stats.results.base import Result, plan_quantities, planned_at, quantities_table
from gatedv_stats.stats.planning import StudyPlan


@dataclass(frozen=True, repr=False)
class ComparisonResult(Result):
    """`gv.compare`: the verdict and the figures of two arms on their scale (`gatedv bootstrap`).

    Parameters
    ----------
    comparison
        The comparison: verdict, estimate D with its seed-and-document interval, and the scale's own figures
        (perplexity: ΔP, the document bootstrap, the win rate); its fields are reachable on the result.
    paired
        The paired arrays compared.
    skipped
        The unreadable files passed over (None: none were allowed).

    Examples
    --------
    >>> result = gv.compare(example_study(tmp_dir), baseline_arm="baseline", variant_arm="gatedv", n_resamples=200)
    >>> result
    Comparison(gatedv vs baseline: better; ΔP −2.16% [−2.51%, −1.81%]; 3 seed pairs, 60 documents)
    >>> list(result.to_frame().columns[:5])
    ['estimate', 'low', 'high', 'p_value', 'verdict']
    """

    comparison: Comparison
    paired: Paired
    skipped: tuple[SkippedFile, ...] | None = None

    wraps: ClassVar[str] = "comparison"

    def to_frame(self) -> pd.DataFrame:
        """One row: estimate, low, high, p_value, verdict, then the scale's columns (perplexity: the arms, ΔP and D
        with their intervals, PPL, pairs, documents, wins)."""
        return pd.DataFrame([{**self.comparison.leading(), **self.comparison.figures.columns(self.comparison)}])

    def tables(self) -> list[Table]:
        """Perplexity: the Verdicts and Paired comparison tables; a score: its table of one comparison."""
        comparison = self.comparison
        if comparison.scale.figures == "scores":
            return [scores_table(_as_arms(comparison))]
        reference, fit, level = comparison.baseline_arm, comparison.seed_document, comparison.bootstrap.confidence_level
        verdicts = verdict_row(comparison.variant_arm, comparison.verdict_text, comparison.delta_p,
                               None if fit is None else fit.delta_p_interval, comparison.n_pairs, comparison.unit)
        sesoi = None if comparison.verdict is None else comparison.verdict.sesoi
        return [verdicts_table(reference, level, sesoi, (RowGroup(None, (verdicts,)),),
                               (comparison.verdict_explanation,)),
                comparison_table("comparison", fmt.eval_set_name(self.paired.eval_set), reference, comparison.bootstrap,
                                 (RowGroup(None, (comparison_row(comparison.variant_arm, comparison,
                                                                 comparison.verdict_text),)),))]

    def plot(self) -> alt.VConcatChart:
        """The report's figures of this comparison (perplexity: per-document differences and per-seed paired PPL;
        a score: the difference with its interval)."""
        return _plot([self.paired], self.comparison)


@dataclass(frozen=True, repr=False)
class AnalysisResult(Result):
    """`gv.analyze`: everything about one pair of arms (`gatedv analyze`).

    Parameters
    ----------
    analysis
        The analysis: the comparison, the permutation test, the breakdowns and (loss files) the seed-level tests
        and BCa interval; its fields are reachable on the result.
    paired
        The paired arrays analysed.
    skipped
        The unreadable files passed over (None: none were allowed).

    Examples
    --------
    >>> result = gv.analyze(example_study(tmp_dir), baseline_arm="baseline", variant_arm="gatedv", n_resamples=200,
    ...                     n_permutations=200)
    >>> frame = result.to_frame()
    >>> frame.loc[0, "verdict"], bool(frame.loc[0, "t_p_value"] < 0.05)
    ('better', True)
    """

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
        bca_low, bca_high = (nan, nan) if analysis.bca_interval is None else analysis.bca_interval
        return self.comparison_result.to_frame().assign(
            permutation_p_value=analysis.permutation.p_value, bca_low=bca_low, bca_high=bca_high,
            t_p_value=nan if analysis.seed_level is None else analysis.seed_level.t_interval.p_value)

    def tables(self) -> list[Table]:
        return self.comparison_result.tables()

    def plot(self) -> alt.VConcatChart:
        """The report's figures of this comparison (see `ComparisonResult.plot`)."""
        return self.comparison_result.plot()


@dataclass(frozen=True, repr=False)
class ArmsResult(Result):
    """`gv.arms` (and `gv.compare` over a suite of tasks): every arm against a reference, with Holm and BH adjusted
    p-values (`gatedv arms`).

    Parameters
    ----------
    arms
        The comparisons with the reference and their adjusted p-values; its fields are reachable on the result.
    pairs
        The paired arrays of each comparison.
    skipped
        The unreadable files passed over (None: none were allowed).

    Examples
    --------
    >>> result = gv.arms(example_study(tmp_dir), reference="baseline", n_permutations=200)
    >>> result
    Arms(1 comparisons with baseline, Holm-adjusted: better: gatedv (heldout))
    >>> result.to_frame()[["arm", "verdict"]].values.tolist()
    [['gatedv', 'better']]
    """

    arms: ArmsComparison
    pairs: tuple[Paired, ...]
    skipped: tuple[SkippedFile, ...] | None = None

    wraps: ClassVar[str] = "arms"

    def headline(self) -> str:
        """The comparisons grouped by their Holm-adjusted verdicts."""
        named = [(row.leading()["verdict"], _label(row)) for row in self.arms.arms]
        grouped = "; ".join(f"{verdict}: {', '.join(name for of, name in named if of == verdict)}"
                            for verdict in dict.fromkeys(verdict for verdict, _ in named))
        return f"{len(self.arms.arms)} comparisons with {self.arms.reference}, Holm-adjusted: {grouped}"

    def to_dict(self) -> dict:
        inputs = [{"arm": pair.variant_arm, "eval_set": pair.eval_set,
                   **({} if pair.task is None else {"task": pair.task}), **pair.sources} for pair in self.pairs]
        return {**self.arms.to_dict(), "inputs": inputs, **self._skipped()}

    def tables(self) -> list[Table]:
        """Perplexity: the Verdicts table by evaluation set; scores: the table of the comparisons with their
        adjusted p-values."""
        arms = self.arms
        if arms.scale.figures == "scores":
            return [scores_table(arms)]
        groups = []
        for eval_set in dict.fromkeys(arm.eval_set for arm in arms.arms):
            rows = tuple(verdict_row(arm.arm, arm.verdict, arm.delta_p, None if arm.delta_p_seed_document_ci is None
                                     else tuple(arm.delta_p_seed_document_ci), arm.n_pairs, arm.unit)
                         for arm in arms.arms if arm.eval_set == eval_set)
            groups.append(RowGroup(fmt.eval_set_name(eval_set), rows))
        return [verdicts_table(arms.reference, 1.0 - arms.alpha, arms.sesoi, tuple(groups),
                               adjusted=len(arms.arms) > 1)]

    def plot(self) -> alt.VConcatChart:
        """The report's figures of every comparison (see `ComparisonResult.plot`)."""
        return _plot(self.pairs, self.arms)


@dataclass(frozen=True, repr=False)
class PlanResult(Result):
    """`gv.plan`: seeds and units needed to detect an effect on the pair's scale, from pilot runs (`gatedv plan`):
    a relative ΔP of loss files, or a difference in a score's units.

    Parameters
    ----------
    plan
        The plan: the seed pairs and units required and the smallest detectable effects; its fields are reachable
        on the result.
    paired
        The pilot's paired arrays.
    skipped
        The unreadable files passed over (None: none were allowed).
    level
        Where the plan's level came from (a research ledger's next level), when it was not given.

    Examples
    --------
    >>> result = gv.plan(example_study(tmp_dir), effect=0.02)
    >>> result
    Plan(gatedv vs baseline: 2 seed pairs to detect ΔP +2.00% with power 0.8 at α = 0.05 (pilot 3 seeds × 60 documents))
    >>> result.seeds_required
    2
    """

    plan: StudyPlan | DifferencePlan
    paired: Paired
    skipped: tuple[SkippedFile, ...] | None = None
    level: str | None = None  # where the plan's level came from (a research ledger's next level), when not given

    wraps: ClassVar[str] = "plan"

    @property
    def warnings(self) -> tuple[str, ...]:
        """What the pilot's pairing dropped or accepted, and groups the plan does not model."""
        return self.paired.notes + getattr(self.plan, "warnings", ())

    def to_dict(self) -> dict:
        return {**self.plan.to_dict(), "baseline_arm": self.paired.baseline_arm, "variant_arm": self.paired.variant_arm,
                "inputs": self.paired.sources, "level_from": self.level, **self._skipped()}

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([{"baseline_arm": self.paired.baseline_arm, "variant_arm": self.paired.variant_arm,
                              **plan_quantities(self.plan)}])

    def tables(self) -> list[Table]:
        task = "" if self.paired.task is None else f" on {self.paired.task}"
        return [quantities_table(plan_quantities(self.plan), f"Plan for {self.paired.variant_arm} vs "
                                 f"{self.paired.baseline_arm}{task} from the pilot runs.")]

    def headline(self) -> str:
        return self.plan.headline(self.paired.baseline_arm, self.paired.variant_arm)

    def summary(self) -> str:
        return f"{planned_at(self.level)}{self.paired.variant_arm} vs {self.paired.baseline_arm}\n{self.plan.summary()}"


def _label(row: Any) -> str:
    """A many-arms comparison's row as its headline names it."""
    if isinstance(row, ScoreArm):
        return comparison_label(row.comparison)
    return row.arm if row.eval_set is None else f"{row.arm} ({row.eval_set})"


def _plot(pairs: Sequence[Paired], comparisons: ArmsComparison | Comparison) -> alt.VConcatChart:
    """A score's differences with their intervals; else per-document differences and per-seed paired PPL of the
    pairs (labelled with their evaluation sets where they are several arms')."""
    if comparisons.scale.figures == "scores":
        return alt.vconcat(forest_chart(_as_arms(comparisons)))
    sets = isinstance(comparisons, ArmsComparison)
    names = {pair.eval_set for pair in pairs}
    labelled = [(f"{pair.variant_arm} vs {pair.baseline_arm}"
                 + (f", {pair.eval_set}" if sets and pair.eval_set is not None else ""), pair) for pair in pairs]
    name = fmt.eval_set_name(names.pop()) if len(names) == 1 else "every evaluation set"
    return alt.vconcat(*comparison_charts(name, labelled))


def _as_arms(comparisons: ArmsComparison | Comparison) -> ArmsComparison:
    """A score's comparisons as a table of them (one comparison: a table of one)."""
    if isinstance(comparisons, ArmsComparison):
        return comparisons
    return ArmsComparison(reference=comparisons.baseline_arm, scale=comparisons.scale,
                          arms=(ScoreArm(comparisons, None, None),), alpha=1.0 - comparisons.confidence_level,
                          sesoi=None, n_resamples=0, rng_seed=0, notes=comparisons.notes)
