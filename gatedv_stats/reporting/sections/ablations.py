"""Ablations (paper Tables 4, 5 and 7): every arm at every learning rate against the reference and, when present,
against GatedV."""

from __future__ import annotations

from gatedv_stats.analysis.experiment import ExperimentAnalysis, GroupAnalysis
from gatedv_stats.core.formatting import eval_set_name
from gatedv_stats.pairing.selection import GATEDV, other_arms
from gatedv_stats.reporting.cells import MISSING, NO_REFERENCE, delta_cells, ppl_text
from gatedv_stats.reporting.model import RowGroup, Section, Table, omitted, row, slug

KEY, TITLE = "ablations", "Ablations against the references"


def ablation_section(analysis: ExperimentAnalysis) -> Section:
    reference = analysis.reference
    if reference is None:
        return omitted(KEY, TITLE, NO_REFERENCE)
    second = GATEDV if reference != GATEDV else None
    tables = []
    for eval_set, all_groups in analysis.by_eval_set():
        groups = [group for group in all_groups if reference in group.group.arms]
        variants = {arm for group in groups for arm in group.group.arms if arm != reference}
        if len(variants) < 2:
            continue
        with_second = second is not None and any(second in group.group.arms for group in groups)
        row_groups = [RowGroup(group.group.label, _rows(group, reference, second if with_second else None))
                      for group in groups if group.compared]
        if not row_groups:
            continue
        columns = ["Variant", f"{reference} PPL", "Variant PPL", f"ΔP vs {reference}", f"Pairs vs {reference}"]
        if with_second:
            columns += [f"ΔP vs {second}", f"Pairs vs {second}"]
        tables.append(Table(
            f"ablations-{slug(eval_set)}",
            f"Variants on the {eval_set_name(eval_set)} against {reference}"
            + (f" and against {second}" if with_second else "") + ": P̄ ± SD over seeds, ΔP and improved pairs.",
            tuple(columns), "l" + "r" * (len(columns) - 1), tuple(row_groups),
            ("ΔP compares P̄ of the row's variant with P̄ of the column's reference at the same learning rate; "
             "pairs count the shared seeds on which the variant's PPL is lower.",)))
    if not tables:
        return omitted(KEY, TITLE, f"No evaluation set holds two or more variants besides {reference!r}; "
                                   "the paired comparison above covers every variant.")
    return Section(KEY, TITLE, tables=tuple(tables))


def _rows(group: GroupAnalysis, reference: str, second: str | None) -> tuple:
    return tuple(row(variant, ppl_text(group.summaries[reference]), ppl_text(group.summaries[variant]),
                     *delta_cells(group.deltas[(reference, variant)]),
                     *([] if second is None else delta_cells(group.deltas[(second, variant)])
                       if second in group.group.arms and variant != second else [MISSING, MISSING]))
                 for variant in other_arms(group.group.arms, reference))
