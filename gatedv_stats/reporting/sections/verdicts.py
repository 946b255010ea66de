"""Verdicts, first: for every comparison with the reference, better / worse / no detectable difference /
equivalent in plain words, accounting for training seeds and documents (docs/method-statistics.md §10)."""

from __future__ import annotations

from gatedv_stats.analysis.experiment import ExperimentAnalysis, GroupAnalysis
from gatedv_stats.core.formatting import format_delta_p, format_delta_p_interval, format_level, format_percent
from gatedv_stats.reporting.cells import MISSING, NO_REFERENCE
from gatedv_stats.reporting.model import Cell, RowGroup, Section, Table, omitted, row
from gatedv_stats.reporting.sections.comparison import left_out_notes

KEY, TITLE = "verdicts", "Verdicts"
HOLM = (" Where several variants share the reference within a group, each verdict uses the Holm-adjusted p-values "
        "over them (family-wise error rate, as gatedv arms decides).")


def verdicts_section(analysis: ExperimentAnalysis) -> Section:
    if analysis.reference is None:
        return omitted(KEY, TITLE, NO_REFERENCE)
    groups = [group for _, groups in analysis.by_eval_set() for group in groups if group.pairs]
    row_groups = tuple(RowGroup(group.group.label, tuple(
        verdict_row(pair.variant, decided, pair.analysis.comparison.delta_p,
                    None if (fit := pair.analysis.comparison.seed_document) is None else fit.delta_p_interval,
                    pair.analysis.comparison.n_pairs, pair.analysis.comparison.unit)
        for pair, decided in zip(group.pairs, group.verdicts))) for group in groups)
    notes = tuple(f"{pair.variant} vs {analysis.reference}, {group.group.label}: "
                  f"{pair.analysis.comparison.verdict_explanation}{_holm_note(group, k)}"
                  for group in groups for k, pair in enumerate(group.pairs))
    if not row_groups:
        return omitted(KEY, TITLE, f"No verdict: every comparison with the reference arm {analysis.reference!r} was "
                                   "left out (the paired comparison below says why)." if left_out_notes(analysis) else
                                   f"No evaluation set holds the reference arm {analysis.reference!r} with another "
                                   "arm" + (" in loss files; the scores' verdicts are in their section below."
                                            if analysis.tasks else ", so there is no verdict to give."))
    table = verdicts_table(analysis.reference, analysis.settings.confidence_level, analysis.settings.sesoi,
                           row_groups, notes, any(group.adjusted is not None for group in groups))
    return Section(KEY, TITLE, tables=(table,))


def verdicts_table(reference: str, confidence_level: float, sesoi: float | None, row_groups: tuple[RowGroup, ...],
                   notes: tuple[str, ...] = (), adjusted: bool = False) -> Table:
    """The Verdicts table of rows from `verdict_row`; `adjusted`: some group's verdicts are Holm-adjusted."""
    level = format_level(confidence_level)
    return Table(KEY, f"Each variant against {reference}: the verdict at the {level} level, accounting for "
                      "training seeds and documents (the seed-and-document interval; "
                      + (f"equivalent: within ±{format_percent(sesoi, 2)} by two one-sided tests"
                         if sesoi is not None else "no smallest effect of interest given, so never 'equivalent'")
                      + ")." + (HOLM if adjusted else ""),
                 ("Variant", "Verdict", "ΔP", f"{level} interval for ΔP, seeds and documents", "Seed pairs", "Unit"),
                 "llrrrl", row_groups, notes)


def verdict_row(variant: str, decided: str, delta_p: float, delta_p_interval: tuple[float, float] | None,
                n_pairs: int, unit: str) -> tuple[Cell, ...]:
    """One variant's row: `decided` is its verdict (its own, or Holm-adjusted over several variants)."""
    return row(variant, Cell(decided, bold=True), format_delta_p(delta_p),
               MISSING if delta_p_interval is None else format_delta_p_interval(delta_p_interval), str(n_pairs),
               f"per {unit}")


def _holm_note(group: GroupAnalysis, k: int) -> str:
    """Where several variants share the reference: the Holm-adjusted p that decided the verdict."""
    if group.adjusted is None or group.adjusted.seed_document is None:
        return ""
    own, decided = group.pairs[k].analysis.comparison.verdict_text, group.adjusted.verdicts[k]
    changed = "" if decided == own else f": {decided}, not {own}"
    return (f" Over the {len(group.pairs)} variants of this group the verdict uses the Holm-adjusted p = "
            f"{group.adjusted.seed_document['holm'][k]:.3g}{changed}.")
