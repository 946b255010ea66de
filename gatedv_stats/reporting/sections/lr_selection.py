"""Learning-rate selection (paper Table 2): final development PPL per arm × rate, the selected rate in bold."""

from __future__ import annotations

import math

from gatedv_stats.analysis.experiment import ExperimentAnalysis
from gatedv_stats.core.formatting import format_lr, format_ppl
from gatedv_stats.io.runrecords import record_arm
from gatedv_stats.pairing.selection import arm_order
from gatedv_stats.reporting.cells import MISSING
from gatedv_stats.reporting.model import Cell, RowGroup, Section, Table, omitted, row

KEY, TITLE = "lr-selection", "Learning-rate selection"


def lr_selection_section(analysis: ExperimentAnalysis) -> Section:
    """The grid of the selection seed with each arm's parameter count (Table 7 shows sizes beside the grid)."""
    result = analysis.lr_selection
    selection = result.selection
    if selection is None:
        assert result.omitted is not None  # an analysis without a selection says why
        return omitted(KEY, TITLE, " ".join((result.omitted, *result.notes)))
    lrs = list(selection.ppl.columns)
    parameters = {arm: int(info["parameters"]) for info in analysis.inputs.run_infos  # from the run.json records
                  if info.get("parameters") is not None and (arm := record_arm(info))}
    rows = []
    for arm in arm_order(selection.ppl.index, analysis.reference):
        cells = selection.ppl.loc[arm]
        several = int(cells.notna().sum()) > 1  # a rate is only "selected" out of two or more
        size = [f"{parameters[arm] / 1e6:.3f}" if arm in parameters else MISSING] if parameters else []
        rows.append(row(arm, *size, *(Cell(MISSING) if math.isnan(cells[lr]) else
                                      Cell(format_ppl(cells[lr]), bold=several and lr == selection.selected[arm])
                                      for lr in lrs)))
    size_column = ("Parameters (M)",) if parameters else ()
    table = Table(KEY,
                  f"Final development PPL by peak learning rate on selection seed {selection.selection_seed} "
                  f"(from {result.source}); the rate each arm selects from two or more in bold.",
                  ("Variant", *size_column, *(f"LR {format_lr(lr)}" for lr in lrs)),
                  "l" + "r" * (len(size_column) + len(lrs)),
                  (RowGroup(None, tuple(rows)),),
                  ("Each arm selects the rate with the lowest final development NLL on the selection seed; ties "
                   "favour the lower rate.", *result.notes))
    return Section(KEY, TITLE, tables=(table,))
