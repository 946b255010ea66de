"""Downstream tasks and other scores: per task (or score table) the score of each arm (mean ± SD over seeds), the
difference with its seeds × units interval and the verdict (Holm-adjusted across the comparisons), the
macro-average over each arm's tasks, and a forest plot across them."""

from __future__ import annotations

import pandas as pd

from gatedv_stats.analysis.comparison import ArmsComparison
from gatedv_stats.analysis.experiment import ExperimentAnalysis
from gatedv_stats.core import formatting as fmt
from gatedv_stats.reporting import plots
from gatedv_stats.reporting.model import Figure, RowGroup, Section, Table, row

KEY, TITLE = "tasks", "Downstream tasks"


def tasks_section(analysis: ExperimentAnalysis) -> Section:
    """The section; build_report adds it only when the inputs hold item-score files or score tables."""
    suite = analysis.tasks
    assert suite is not None  # the builder is called only with scores
    metric, noun = suite.scale.metric, suite.scale.noun
    level = fmt.format_level(1.0 - suite.alpha)
    intro = (f"{'Item scores' if noun == 'item' else 'Scores'} ({metric}) of every arm against {suite.reference}"
             f"{' on each task' if _tasks(suite) else ''}. The interval of the difference generalises over training "
             f"seeds and {noun}s (every {noun} weighs the same); verdicts use Holm-adjusted p-values across the "
             f"{len(suite.arms)} comparisons." + (" The macro-average is the mean of the tasks' differences, with "
                                                  "the seed effect shared by the tasks." if suite.macro else ""),)
    figure = Figure("tasks-forest", f"Differences per {'task' if _tasks(suite) else 'arm'} ({metric})",
                    f"Difference of {metric} (arm − {suite.reference}) per {'task' if _tasks(suite) else 'arm'} with "
                    f"its {level} seeds × {noun}s interval; right of zero the arm scores higher.",
                    plots.chart_spec(forest_chart(suite)))
    return Section(KEY, TITLE if _tasks(suite) else f"Scores: {metric}", intro=intro, tables=(scores_table(suite),),
                   figures=(figure,))


def _tasks(suite: ArmsComparison) -> bool:
    return any(arm.comparison.task is not None for arm in suite.arms)


def scores_table(suite: ArmsComparison) -> Table:
    """Every comparison's row (its verdict Holm-adjusted), then each arm's macro-average."""
    proportion = all(arm.comparison.scale.proportion for arm in suite.arms)
    level, metric = fmt.format_level(1.0 - suite.alpha), suite.scale.metric
    tasks = _tasks(suite)  # a score table has no task column
    columns = ("Task",) * tasks + ("Arm", "Seeds", f"{suite.scale.noun.capitalize()}s",
                                   f"{suite.reference} (mean ± SD)", "Arm (mean ± SD)", "Difference",
                                   f"{level} interval", "Verdict", "Holm p", "BH p")
    rows = tuple(row(*(arm.comparison.task,) * tasks, arm.comparison.variant_arm,
                     *arm.comparison.figures.cells(arm.comparison, proportion), _p(arm.p_holm), _p(arm.p_bh))
                 for arm in suite.arms)
    macro_rows = tuple(row("macro-average", macro.variant_arm, str(macro.n_seeds), f"{macro.n_tasks} tasks", "", "",
                           fmt.format_difference(macro.difference, proportion),
                           fmt.format_difference_interval(macro.confidence_interval, proportion),
                           f"p = {macro.p_value:.3g}", "—", "—") for macro in suite.macro)
    groups = (RowGroup(None, rows),) + ((RowGroup("Macro-average over tasks", macro_rows),) if macro_rows else ())
    return Table("tasks", f"{'Downstream tasks' if tasks else 'Scores'}: {metric}, variant − {suite.reference} in "
                 f"{'points' if proportion else metric}.", columns, "l" * tasks + "lrrrrrllrr", groups,
                 notes=suite.notes)


def _p(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def forest_chart(suite: ArmsComparison):
    """The forest plot of every comparison's difference with its interval (one row each where it has one), and each
    arm's macro-average."""
    rows = [{"arm": arm.comparison.variant_arm, "task": arm.comparison.task or arm.comparison.scale.metric,
             "difference": arm.comparison.estimate, "low": fit.confidence_interval.low,
             "high": fit.confidence_interval.high, "verdict": arm.comparison.verdict_text}
            for arm in suite.arms if (fit := arm.comparison.seed_document) is not None]
    rows += [{"arm": macro.variant_arm, "task": "macro-average", "difference": macro.difference,
              "low": macro.confidence_interval.low, "high": macro.confidence_interval.high, "verdict": ""}
             for macro in suite.macro]
    return plots.task_forest_chart(pd.DataFrame(rows, columns=["arm", "task", "difference", "low", "high", "verdict"]),
                                   title=f"{suite.scale.metric} per {'task' if _tasks(suite) else 'arm'}",
                                   x_title=f"difference ({suite.scale.metric})")
