"""Learning rates side by side (paper Table 8): each evaluation set at every rate, arms side by side with ΔP
against the reference."""

from __future__ import annotations

from gatedv_stats.analysis.experiment import ExperimentAnalysis
from gatedv_stats.core.formatting import eval_set_name, format_delta_p, format_lr
from gatedv_stats.pairing.selection import other_arms
from gatedv_stats.reporting.cells import MISSING, NO_REFERENCE, ppl_text
from gatedv_stats.reporting.model import RowGroup, Section, Table, omitted, row

KEY, TITLE = "learning-rates", "Learning rates side by side"


def learning_rates_section(analysis: ExperimentAnalysis) -> Section:
    reference = analysis.reference
    if reference is None:
        return omitted(KEY, TITLE, NO_REFERENCE)
    compared = [(eval_set, [group for group in groups if group.compared])
                for eval_set, groups in analysis.by_eval_set()]
    row_groups = [(eval_set, groups) for eval_set, groups in compared if len(groups) >= 2]
    if not row_groups:
        return omitted(KEY, TITLE, f"No evaluation set has {reference!r} and a variant at two or more learning "
                                   "rates.")
    variants = other_arms({arm for _, groups in row_groups for group in groups for arm in group.group.arms},
                          reference)
    columns = ["Peak LR", f"{reference} PPL", *(name for variant in variants
                                                for name in (f"{variant} PPL", f"ΔP {variant}"))]
    out_groups = [RowGroup(eval_set_name(eval_set).capitalize(), tuple(
        row(format_lr(group.group.lr), ppl_text(group.summaries[reference]),
            *(cell for variant in variants for cell in (
                (ppl_text(group.summaries[variant]), format_delta_p(group.deltas[(reference, variant)].delta_p))
                if variant in group.summaries else (MISSING, MISSING))))
        for group in groups)) for eval_set, groups in row_groups]
    table = Table(KEY, f"P̄ ± SD over seeds per evaluation set and peak learning rate; ΔP against "
                       f"{reference} at the same rate.",
                  tuple(columns), "l" + "r" * (len(columns) - 1), tuple(out_groups))
    return Section(KEY, TITLE, tables=(table,))
