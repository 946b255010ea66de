"""Downstream tasks: per task the score of each arm (mean ± SD over seeds), the difference with its seeds × items
interval and the verdict (Holm-adjusted across the tasks), the macro-average, and a forest plot across tasks."""

from __future__ import annotations

import pandas as pd

from gatedv_stats.analysis.arms import TaskSuite
from gatedv_stats.analysis.experiment import ExperimentAnalysis
from gatedv_stats.core import formatting as fmt
from gatedv_stats.reporting import plots
from gatedv_stats.reporting.model import Figure, RowGroup, Section, Table, row

KEY, TITLE = "tasks", "Downstream tasks"


def tasks_section(analysis: ExperimentAnalysis) -> Section:
    """The section; build_report adds it only when the inputs hold item-score files."""
    suite = analysis.tasks
    assert suite is not None  # the builder is called only with item scores
    proportion = all(result.proportion for result in suite.results)
    level = fmt.format_level(1.0 - suite.alpha)
    unit = "points" if proportion else suite.metric
    intro = (f"Item scores ({suite.metric}) of every arm against {suite.reference} on each task. The interval of the "
             f"difference generalises over training seeds and items (every item weighs the same); verdicts use "
             f"Holm-adjusted p-values across the {len(suite.results)} comparisons. The macro-average is the mean "
             f"of the tasks' differences, with the seed effect shared by the tasks.",)
    columns = ("Task", "Arm", "Seeds", "Items", f"{suite.reference} (mean ± SD)", "Arm (mean ± SD)",
               "Difference", f"{level} interval", "Verdict", "Holm p")
    rows = tuple(row(result.task, result.variant_arm, *result.cells(proportion),
                     "n/a" if holm is None else f"{holm:.3g}") for result, holm in zip(suite.results, suite.p_holm))
    macro_rows = tuple(row("macro-average", macro.variant_arm, str(macro.n_seeds), f"{macro.n_tasks} tasks", "", "",
                           fmt.format_difference(macro.difference, proportion),
                           fmt.format_difference_interval(macro.confidence_interval, proportion),
                           f"p = {macro.p_value:.3g}", "—") for macro in suite.macro)
    groups = (RowGroup(None, rows),) + ((RowGroup("Macro-average over tasks", macro_rows),) if macro_rows else ())
    table = Table("tasks", f"Downstream tasks: {suite.metric}, variant − {suite.reference} in {unit}.", columns,
                  "llrrrrrllr", groups, notes=suite.notes)
    figure = Figure("tasks-forest", f"Differences per task ({suite.metric})",
                    f"Difference of {suite.metric} (arm − {suite.reference}) per task with its {level} seeds × items "
                    "interval; right of zero the arm scores higher.",
                    plots.chart_spec(plots.task_forest_chart(forest_rows(suite), title=f"{suite.metric} per task",
                                                             x_title=f"difference ({suite.metric})")))
    return Section(KEY, TITLE, intro=intro, tables=(table,), figures=(figure,))


def forest_rows(suite: TaskSuite) -> pd.DataFrame:
    """One row per comparison with an interval, then each arm's macro-average."""
    rows = [{"arm": result.variant_arm, "task": result.task, "difference": result.difference,
             "low": result.interval.confidence_interval.low, "high": result.interval.confidence_interval.high,
             "verdict": result.verdict_text} for result in suite.results if result.interval is not None]
    rows += [{"arm": macro.variant_arm, "task": "macro-average", "difference": macro.difference,
              "low": macro.confidence_interval.low, "high": macro.confidence_interval.high, "verdict": ""}
             for macro in suite.macro]
    return pd.DataFrame(rows, columns=["arm", "task", "difference", "low", "high", "verdict"])
