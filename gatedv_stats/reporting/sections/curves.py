"""Training curves (paper Figures 2 and 3): ΔP(t) with per-pair curves, and absolute PPL over the final quarter."""

from __future__ import annotations

import pandas as pd

from gatedv_stats.analysis.experiment import ExperimentAnalysis
from gatedv_stats.core.formatting import format_lr
from gatedv_stats.io.curvefiles import CURVE_FILE_NAME
from gatedv_stats.reporting import plots
from gatedv_stats.reporting.model import Figure, Section, omitted, slug

KEY, TITLE = "curves", "Training curves"


def curves_section(analysis: ExperimentAnalysis) -> Section:
    if not analysis.curves:
        return omitted(KEY, TITLE, f"No curve files ({CURVE_FILE_NAME}) among the inputs, so there are no training "
                                   "curves to show.")
    reference = analysis.reference
    figures = []
    notes: list[str] = []
    for curves in analysis.curves:
        lr = format_lr(curves.lr)
        notes += curves.notes
        if curves.comparisons:
            pairs = [result.per_pair.assign(variant=variant)[["variant", "seed", "step", "delta_p"]]
                     for variant, result in curves.comparisons]
            means = [result.frame().assign(variant=variant)[["variant", "step", "delta_p"]]
                     for variant, result in curves.comparisons]
            figures.append(Figure(
                f"delta-p-curve-lr-{slug(lr)}", f"ΔP during training, LR {lr}",
                f"ΔP(t) = mean PPL of the variant / mean PPL of {reference} − 1 at each recorded update (thick), "
                f"with each seed pair's ratio (thin); peak LR {lr}. Below zero the variant is better.",
                plots.chart_spec(plots.delta_p_curve_chart(pd.concat(pairs), pd.concat(means),
                                                           title=f"ΔP vs {reference}, LR {lr}"))))
        figures.append(Figure(
            f"final-quarter-lr-{slug(lr)}", f"Final quarter of training, LR {lr}",
            f"Development PPL over the final quarter of training (mean over seeds, band ± 1 SD); peak LR {lr}.",
            plots.chart_spec(plots.final_quarter_chart(curves.final_quarter, title=f"Final-quarter PPL, LR {lr}"))))
    if reference is None:
        notes.append("No reference arm, so only absolute PPL is shown.")
    return Section(KEY, TITLE, intro=tuple(notes), figures=tuple(figures))
