"""The paired comparison (paper Table 3): each variant against the reference per evaluation set and learning rate,
with D, its document-bootstrap interval and the document win rate; figures of per-document differences and
per-seed PPL."""

from __future__ import annotations

import altair as alt
import pandas as pd

from gatedv_stats.analysis.comparison import Comparison
from gatedv_stats.analysis.experiment import AnalysisSettings, ExperimentAnalysis, GroupAnalysis
from gatedv_stats.core.formatting import (
    eval_set_name,
    format_count,
    format_delta_p,
    format_interval,
    format_level,
    format_lr,
    format_nll_diff,
    format_pairs,
    format_percent,
)
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.pairing.selection import natural_key
from gatedv_stats.reporting import plots
from gatedv_stats.reporting.cells import MISSING, NO_REFERENCE, ppl_text
from gatedv_stats.reporting.model import Cell, Figure, RowGroup, Section, Table, omitted, row, slug
from gatedv_stats.stats.metrics import arm_summary, document_differences
from gatedv_stats.stats.resampling import BootstrapResult

KEY, TITLE = "comparison", "Paired comparison"


def comparison_section(analysis: ExperimentAnalysis) -> Section:
    if analysis.reference is None:
        return omitted(KEY, TITLE, NO_REFERENCE)
    reference, settings = analysis.reference, analysis.settings
    tables, figures, notes = [], [], []
    for eval_set, groups in analysis.by_eval_set():
        row_groups, charted = [], []
        for group in groups:
            notes += _left_out(group, reference, groups)
            for pair in group.pairs:
                label = pair_label(pair.variant, reference, group.group.lr)
                notes += [f"{eval_set_name(eval_set)}, {label}: {warning}" for warning in
                          pair.analysis.comparison.warnings]
                charted.append((label, pair.paired))
            if group.pairs:
                row_groups.append(RowGroup(group.group.label, tuple(
                    comparison_row(pair.variant, pair.analysis.comparison, decided)
                    for pair, decided in zip(group.pairs, group.verdicts))))
        if not row_groups:
            continue
        name, key = eval_set_name(eval_set), slug(eval_set)
        tables.append(comparison_table(f"comparison-{key}", name, reference, settings, tuple(row_groups)))
        differences, seeds = comparison_charts(name, charted)
        figures += [
            Figure(f"doc-differences-{key}", f"Per-document differences, {name}",
                   f"Per-document NLL difference per target (variant − {reference}, averaged over seeds) on the "
                   f"{name}; left of zero the variant is better.", plots.chart_spec(differences)),
            Figure(f"paired-seeds-{key}", f"Per-seed paired PPL, {name}",
                   f"PPL of each seed's {reference} run beside its paired variant run on the {name}.",
                   plots.chart_spec(seeds)),
        ]
    if not tables:
        why = (f"No evaluation set and learning rate holds the reference arm {reference!r} together with "
               "another arm, so there is nothing to compare.")
        return Section(KEY, TITLE, omitted=why, intro=tuple(notes))
    return Section(KEY, TITLE, intro=tuple(notes), tables=tuple(tables), figures=tuple(figures))


def left_out_notes(analysis: ExperimentAnalysis) -> list[str]:
    """Each comparison with the reference arm that the inputs hold but the report leaves out, and why (also
    there is no reference arm at all)."""
    if analysis.reference is None:
        return [NO_REFERENCE]
    return [note for _, groups in analysis.by_eval_set() for group in groups
            for note in _left_out(group, analysis.reference, groups)]


def _left_out(group: GroupAnalysis, reference: str, groups: list[GroupAnalysis]) -> list[str]:
    """Why comparisons of this group (one of its evaluation set's `groups`) are left out; an arm compared with the
    reference at no learning rate of its set is named too (runs pair within one evaluation set and learning rate)."""
    if group.holds_reference and group.mixed:
        return [f"{group.group.label}: left out because {group.mixed}."]
    if reference not in group.group.arms:
        compared = {pair.variant for other in groups for pair in other.pairs}
        return [f"{eval_set_name(group.group.eval_set)}, {arm} at LR {format_lr(group.group.lr)}: left out because "
                f"the reference arm {reference!r} has no runs at this learning rate on this set (compare them with "
                "gatedv bootstrap, which pairs any two arms)."
                for arm in sorted(set(group.group.arms) - compared, key=natural_key)]
    return [f"{eval_set_name(group.group.eval_set)}, {pair_label(variant, reference, group.group.lr)}: "
            f"left out because {why}." for variant, why in group.left_out]


def pair_label(variant: str, reference: str, lr: float | None) -> str:
    return f"{variant} vs {reference}, LR {format_lr(lr)}"


def comparison_table(key: str, name: str, reference: str, bootstrap: AnalysisSettings | BootstrapResult,
                     row_groups: tuple[RowGroup, ...]) -> Table:
    """The paired-comparison table of the evaluation set `name`, of rows from `comparison_row`; `bootstrap`: the
    document bootstrap's level, resamples and seed."""
    level = format_level(bootstrap.confidence_level)
    return Table(
        key,
        f"Paired comparison on the {name}: P̄ ± SD over seeds, ΔP = P̄ variant / P̄ "
        f"{reference} − 1, improved pairs, mean NLL difference D with its {level} interval when seeds and "
        f"documents are sampled (the verdict's) and with the paper's {level} document-bootstrap interval, which "
        f"holds the trained models fixed (B = {bootstrap.n_resamples:,}, seed {bootstrap.rng_seed}), and documents "
        "won.",
        ("Variant", f"{reference} PPL", "Variant PPL", "ΔP", "Improved pairs", "Verdict", "D",
         f"{level} interval, seeds and documents", f"{level} interval, models fixed", "Documents won"),
        "lrrrrlrrrr", row_groups)


def comparison_row(variant: str, result: Comparison, decided: str) -> tuple[Cell, ...]:
    """One variant's row; `decided` is its verdict (its own, or Holm-adjusted over several variants)."""
    return row(
        variant,
        ppl_text(result.baseline),
        ppl_text(result.variant),
        format_delta_p(result.delta_p),
        format_pairs(result.improved_pairs, result.n_pairs),
        decided,
        format_nll_diff(result.estimate),
        MISSING if result.seed_document is None else format_interval(*result.seed_document.confidence_interval),
        format_interval(*result.bootstrap.confidence_interval),
        f"{format_count(result.win.wins)}/{format_count(result.win.n_docs)} ({format_percent(result.win.win_rate)})",
    )


def comparison_charts(name: str, compared: list[tuple[str, Paired]]) -> tuple[alt.FacetChart, ...]:
    """The figures of the labelled comparisons on the evaluation set `name` (Altair charts): per-document
    differences (variant − reference, per target) and per-seed paired PPL."""
    diffs = pd.concat([pd.DataFrame({"comparison": label, "diff": document_differences(pair.baseline, pair.variant)
                                     / pair.n_units}) for label, pair in compared], ignore_index=True)
    per_seed = pd.DataFrame([
        {"comparison": label, "role": role, "arm": summary.arm, "seed": int(seed), "ppl": float(ppl)}
        for label, pair in compared
        for role, summary in (("reference", arm_summary(pair.baseline_arm, pair.seeds, pair.baseline, pair.n_units)),
                              ("variant", arm_summary(pair.variant_arm, pair.seeds, pair.variant, pair.n_units)))
        for seed, ppl in zip(summary.seeds, summary.ppl)])
    return (plots.doc_difference_chart(diffs, title=f"Per-document differences ({name})"),
            plots.paired_seed_chart(per_seed, title=f"Per-seed paired PPL ({name})"))
