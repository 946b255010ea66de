"""Verdicts, first: for every comparison with the reference, better / worse / no detectable difference /
equivalent in plain words, accounting for training seeds and documents (docs/method.md §10)."""

from __future__ import annotations

from gatedv_stats.analysis.experiment import ExperimentAnalysis
from gatedv_stats.formatting import format_delta_p, format_delta_p_interval, format_level, format_percent
from gatedv_stats.report.cells import MISSING, NO_REFERENCE
from gatedv_stats.report.model import Cell, RowGroup, Section, Table, omitted, row
from gatedv_stats.report.sections.comparison import left_out_notes

KEY, TITLE = "verdicts", "Verdicts"


def verdicts_section(analysis: ExperimentAnalysis) -> Section:
    if analysis.reference is None:
        return omitted(KEY, TITLE, NO_REFERENCE)
    row_groups, notes = [], []
    for _, groups in analysis.by_eval_set():
        for group in groups:
            rows = []
            for pair in group.pairs:
                comparison = pair.analysis.comparison
                interval = comparison.seed_document
                rows.append(row(pair.variant, Cell(comparison.verdict_text, bold=True),
                                format_delta_p(comparison.delta_p),
                                MISSING if interval is None else format_delta_p_interval(interval.delta_p_interval),
                                str(comparison.n_pairs), f"per {comparison.unit}"))
                notes.append(f"{pair.variant} vs {analysis.reference}, {group.group.label}: "
                             f"{comparison.verdict_explanation}")
            if rows:
                row_groups.append(RowGroup(group.group.label, tuple(rows)))
    if not row_groups and left_out_notes(analysis):
        return omitted(KEY, TITLE, f"No verdict: every comparison with the reference arm {analysis.reference!r} was "
                                   "left out (the paired comparison below says why).")
    if not row_groups:
        return omitted(KEY, TITLE, f"No evaluation set holds the reference arm {analysis.reference!r} with another "
                                   "arm, so there is no verdict to give.")
    level = format_level(analysis.settings.confidence_level)
    sesoi = analysis.settings.sesoi
    table = Table(KEY, f"Each variant against {analysis.reference}: the verdict at the {level} level, accounting for "
                       "training seeds and documents (the seed-and-document interval; "
                       + (f"equivalent: within ±{format_percent(sesoi, 2)} by two one-sided tests"
                          if sesoi is not None else "no smallest effect of interest given, so never 'equivalent'")
                       + ").",
                  ("Variant", "Verdict", "ΔP", f"{level} interval for ΔP, seeds and documents", "Seed pairs", "Unit"),
                  "llrrrl", tuple(row_groups), tuple(notes))
    return Section(KEY, TITLE, tables=(table,))
