"""Value activation at inference (paper Table 9): mean ± SD PPL, trained activation × evaluated activation."""

from __future__ import annotations

from gatedv_stats.analysis.experiment import ExperimentAnalysis
from gatedv_stats.core.formatting import eval_set_name, format_lr
from gatedv_stats.reporting.cells import MISSING, ppl_text
from gatedv_stats.reporting.model import RowGroup, Section, Table, omitted, row, slug

KEY, TITLE = "inference-swap", "Value activation at inference"
ACTIVATIONS = ("linear", "silu")


def inference_swap_section(analysis: ExperimentAnalysis) -> Section:
    if not analysis.swaps:
        return omitted(KEY, TITLE, "No loss file was evaluated with an overridden value activation (value_act "
                                   "metadata), so there is no inference-swap table.")
    tables = []
    for swap in analysis.swaps:
        rows = [row(f"{arm} (trained {swap.trained[arm]})",
                    *(ppl_text(swap.summaries[(arm, act)]) if (arm, act) in swap.summaries else MISSING
                      for act in ACTIVATIONS))
                for arm in swap.arms]
        lr = format_lr(swap.lr)
        tables.append(Table(f"inference-swap-{slug(swap.eval_set)}-lr-{slug(lr)}",
                            f"P̄ ± SD over seeds on the {eval_set_name(swap.eval_set)} (LR {lr}) with the value "
                            "activation of every layer set at inference.",
                            ("Trained arm", "Linear at inference", "SiLU at inference"), "lrr",
                            (RowGroup(None, tuple(rows)),)))
    return Section(KEY, TITLE, tables=tuple(tables))
