"""What an experiment shows about training: learning-rate selection (Table 2) and curves (Figures 2 and 3)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from gatedv_stats.core.errors import InputError
from gatedv_stats.core.formatting import format_lr
from gatedv_stats.pairing.selection import EvalGroup, lr_of, other_arms
from gatedv_stats.stats.curves import CurveComparison, curve_delta_p, final_quarter_ppl
from gatedv_stats.stats.lr_selection import LRSelection, final_curve_points, select_lr
from gatedv_stats.stats.metrics import token_nll


@dataclass(frozen=True)
class LRSelectionAnalysis:
    """The selection, where its table came from, or why there is none."""

    selection: LRSelection | None
    source: str | None  # "final development-set loss files" or "the last point of each development curve"
    omitted: str | None  # why there is no selection
    notes: tuple[str, ...] = ()  # curves left out of the selection, with why


@dataclass(frozen=True)
class CurveAnalysis:
    """The curves of one learning rate: ΔP(t) of each variant against the reference, and the final quarter."""

    lr: float
    comparisons: tuple[tuple[str, CurveComparison], ...]  # (variant, ΔP(t))
    notes: tuple[str, ...]  # curves left out, with why
    final_quarter: pd.DataFrame


def analyze_lr_selection(groups: list[EvalGroup], curves: pd.DataFrame) -> LRSelectionAnalysis:
    """Select from the final development-set loss files, else from the last point of each development curve."""
    dev_runs = [run for group in groups if group.eval_set == "dev" and group.lr is not None for run in group.runs]
    table = pd.DataFrame([{"arm": run.arm, "lr": lr_of(run), "seed": run.seed,
                           "dev_nll": float(token_nll(run.docs["loss_sum"].to_numpy(),
                                                      run.docs["n_targets"].to_numpy()))}
                          for run in dev_runs], columns=["arm", "lr", "seed", "dev_nll"])
    source = "final development-set loss files"
    notes: tuple[str, ...] = ()
    if not _several_rates(table) and len(curves):
        # Only a curve that reached its run's final update stands for its final development NLL.
        table, left_out = final_curve_points(curves)
        source = "the last point of each development curve"
        notes = tuple(f"{row.arm} seed {row.seed} at LR {format_lr(row.lr)} is left out of the selection: "
                      f"{row.why}." for row in left_out.itertuples())
    if not _several_rates(table):
        finished = " of finished runs" if notes else ""
        return LRSelectionAnalysis(None, None, "No arm has development-set loss files (eval_set = dev) or curves"
                                               f"{finished} at two or more learning rates, so there is no "
                                               "learning-rate selection to show.", notes)
    try:
        return LRSelectionAnalysis(select_lr(table), source, None, notes)
    except InputError as error:
        return LRSelectionAnalysis(None, None, f"The learning-rate grid cannot be read: {error}.", notes)


def _several_rates(table: pd.DataFrame) -> bool:
    return bool(len(table)) and bool((table.groupby("arm")["lr"].nunique() > 1).any())


def analyze_curves(curves: pd.DataFrame, reference: str | None) -> tuple[CurveAnalysis, ...]:
    """Per learning rate: each variant's ΔP(t) against the reference (when both have curves) and the final quarter."""
    if not len(curves):
        return ()
    analyses = []
    unfinished = final_curve_points(curves)[1]
    for lr in sorted(curves["lr"].unique()):
        at_lr = curves[curves["lr"] == lr]
        arms = set(at_lr["arm"])
        comparisons, notes = [], []
        if reference is not None and reference in arms and len(arms) > 1:
            for variant in other_arms(arms, reference):
                try:
                    comparisons.append((variant, curve_delta_p(at_lr, reference, variant, baseline_lr=lr,
                                                               variant_lr=lr)))
                except InputError as error:
                    notes.append(f"{variant} vs {reference} at LR {format_lr(lr)}: curve left out because {error}.")
        compared = {arm for variant, _ in comparisons for arm in (variant, reference)}
        # A curve that stops short of its run's final update is drawn as far as it goes, and said to be so.
        notes += [f"{row.arm} seed {row.seed} at LR {format_lr(lr)}: {row.why}; it is drawn as far as it goes"
                  + (", and ΔP(t) is shown only at the steps every paired run recorded." if row.arm in compared
                     else ".")
                  for row in unfinished[unfinished["lr"] == lr].itertuples()]
        analyses.append(CurveAnalysis(lr=float(lr), comparisons=tuple(comparisons), notes=tuple(notes),
                                      final_quarter=final_quarter_ppl(at_lr)))
    return tuple(analyses)
