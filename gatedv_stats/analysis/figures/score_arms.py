"""The rows of many score comparisons against one reference: every (arm, task) comparison of a downstream suite,
or every arm of a score table, each a whole comparison whose verdict uses the Holm-adjusted p across all of them,
with its p-value adjusted by Holm and Benjamini–Hochberg, and a macro-average over each arm's tasks
(`stats.tasks.macro_average`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gatedv_stats.analysis.compare import comparison_of
from gatedv_stats.analysis.comparison import ArmsComparison, Comparison
from gatedv_stats.analysis.figures.scores import ScoreFigures
from gatedv_stats.core import formatting as fmt
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.stats.seed_document import SeedDocumentResult
from gatedv_stats.stats.tasks import MacroAverage, macro_average
from gatedv_stats.stats.verdict import Verdict

TESTS = {"seed_document": "seed-and-document t test"}
WITHIN_FAMILY = False  # every comparison of the suite is one family


@dataclass(frozen=True)
class ScoreArm:
    """One comparison with the reference, its verdict from the Holm-adjusted p, with its adjusted p-values."""

    comparison: Comparison
    p_holm: float | None
    p_bh: float | None

    def leading(self) -> dict:
        """The comparison's leading columns, its p-value the raw one (the adjusted ones follow)."""
        fit = self.comparison.seed_document
        return {**self.comparison.leading(), "p_value": float("nan") if fit is None else fit.p_value}

    def columns(self) -> dict:
        nan = float("nan")
        return {**self.comparison.figures.columns(self.comparison), "p_holm": nan if self.p_holm is None else
                self.p_holm, "p_bh": nan if self.p_bh is None else self.p_bh}

    def to_dict(self) -> dict:
        return {**self.comparison.to_dict(), "p_holm": self.p_holm, "p_bh": self.p_bh}

    @staticmethod
    def family_dict(arms: ArmsComparison) -> dict:
        """The `--json` object of a many-arms comparison of these rows."""
        return {"reference": arms.reference, "metric": arms.scale.metric, "alpha": arms.alpha, "sesoi": arms.sesoi,
                "arms": [row.to_dict() for row in arms.arms],
                "macro_average": [macro.to_dict() for macro in arms.macro], "notes": list(arms.notes),
                "warnings": list(arms.warnings)}

    @staticmethod
    def family_summary(arms: ArmsComparison) -> str:
        """The text table of a many-arms comparison of these rows."""
        proportion = all(row.comparison.scale.proportion for row in arms.arms)
        what, noun = "accuracy" if proportion else "mean score", arms.scale.noun
        tasks = any(row.comparison.task is not None for row in arms.arms)
        lines = [f"{arms.scale.metric}: every {'task' if tasks else 'arm'} against {arms.reference} "
                 f"({len(arms.arms)} comparisons; p-values two-sided, adjusted across them with Holm (FWER) and "
                 "Benjamini–Hochberg (FDR); verdicts use the Holm-adjusted p; intervals generalise over training "
                 f"seeds and {noun}s)"]
        header = ("arm", *(("task",) if tasks else ()), "seeds", f"{noun}s", f"{arms.reference} {what}",
                  f"variant {what}", "difference", f"{fmt.format_level(1 - arms.alpha)} interval", "verdict", "p",
                  "Holm", "BH")
        rows = [(row.comparison.variant_arm, *((str(row.comparison.task),) if tasks else ()),
                 *row.comparison.figures.cells(row.comparison, proportion),
                 *(_p_text(p) for p in (row.leading()["p_value"], row.p_holm, row.p_bh))) for row in arms.arms]
        lines += ["", *fmt.text_table(header, rows, "l" * (1 + tasks) + "rrrrrllrrr")]
        lines += [f"macro-average over {macro.n_tasks} tasks ({macro.variant_arm}): "
                  f"{fmt.format_difference(macro.difference, proportion)}, {fmt.format_level(macro.confidence_level)} "
                  f"interval {fmt.format_difference_interval(macro.confidence_interval, proportion)} "
                  f"(SE {fmt.format_difference(macro.se, proportion, signed=False)}, df {macro.df:.1f}), "
                  f"p = {macro.p_value:.3g}" for macro in arms.macro]
        return "\n".join(lines + [f"note: {note}" for note in arms.notes])


def cluster_of(pair: Paired, cluster: str | None) -> str | None:
    """A task without the cluster column has its units as the sampled units."""
    return cluster if cluster in pair.doc_columns else None


def arm_tests(pair: Paired, fit: SeedDocumentResult | None, **_permutations: object) -> dict[str, float | None]:
    """The raw two-sided p-value of the verdict's test."""
    return {"seed_document": None if fit is None else fit.p_value}


def arm_rows(pairs: Sequence[Paired], fits: Sequence[SeedDocumentResult | None], clusters: Sequence[str | None],
             tests: Sequence[dict], adjusted: Sequence[dict], verdicts: Sequence[Verdict | None],
             raw: Sequence[Verdict | None], *, cluster: str | None,
             alpha: float) -> tuple[list[ScoreArm], list[str], list[str], list[MacroAverage]]:
    """Each comparison, whole; the macro-average of each arm over its tasks; the notes."""
    rows = [ScoreArm(comparison_of(pair, fit, decided, column, 1.0 - alpha,
                                   ScoreFigures.of(pair, confidence_level=1.0 - alpha)),
                     *adjustment["seed_document"])
            for pair, fit, decided, column, adjustment in zip(pairs, fits, verdicts, clusters, adjusted)]
    macros, notes = _macro_averages([row.comparison for row in rows])
    if cluster is not None:
        notes += [f"{pair.task}: no {cluster} column; its {pair.noun}s are the sampled units"
                  for pair, column in zip(pairs, clusters) if column is None]
    notes += [f"{row.comparison.task or row.comparison.variant_arm}: {text}" for row in rows
              for text in row.comparison.notes]
    return rows, notes, [], macros


def _macro_averages(comparisons: Sequence[Comparison]) -> tuple[list[MacroAverage], list[str]]:
    """Each arm's macro-average over its tasks (two or more with the same paired seeds, each with an interval)."""
    macros, notes = [], []
    tasks = Counter(comparison.variant_arm for comparison in comparisons)
    for arm in (arm for arm, count in tasks.items() if count >= 2):  # the arms of two tasks or more
        mine = [comparison for comparison in comparisons if comparison.variant_arm == arm]
        fits = [comparison.seed_document for comparison in mine]
        if len({comparison.seeds for comparison in mine}) != 1 or any(fit is None for fit in fits):
            notes.append(f"{arm}: no macro-average interval: the tasks need the same paired seeds (2 or more)")
            continue
        macros.append(macro_average([fit for fit in fits if fit is not None], variant_arm=arm))
    return macros, notes


def _p_text(value: float | None) -> str:
    return "n/a" if value is None or np.isnan(value) else f"{value:.3g}"
