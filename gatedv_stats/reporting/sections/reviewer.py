"""Beyond the paper: the seed-level and document-level statistics of every comparison with the reference, p-values
adjusted over the arms that share it, and a forest plot of D per document group."""

from __future__ import annotations

import pandas as pd

from gatedv_stats.analysis.experiment import AdjustedPValues, ExperimentAnalysis, PairResult
from gatedv_stats.core.formatting import (
    eval_set_name,
    format_delta_p,
    format_delta_p_interval,
    format_interval,
    format_level,
    format_pairs,
)
from gatedv_stats.reporting import plots
from gatedv_stats.reporting.cells import MISSING, NO_REFERENCE
from gatedv_stats.reporting.model import Figure, RowGroup, Section, Table, omitted, row, slug
from gatedv_stats.reporting.sections.comparison import pair_label

KEY, TITLE = "reviewer", "Beyond the paper: seeds, tests, many arms, breakdowns"


def reviewer_section(analysis: ExperimentAnalysis) -> Section:
    reference, settings = analysis.reference, analysis.settings
    if reference is None:
        return omitted(KEY, TITLE, NO_REFERENCE)
    tables, figures = [], []
    limits: dict[int, tuple[str, ...]] = {}  # the few-seed limits, by number of seed pairs
    level = format_level(settings.confidence_level)
    for eval_set, groups in analysis.by_eval_set():
        groups = [group for group in groups if group.pairs]
        if not groups:
            continue
        forest = []
        for group in groups:
            for pair in group.pairs:
                seed_level = pair.analysis.seed_level
                if seed_level is not None:
                    limits.setdefault(pair.paired.n_pairs, seed_level.limits)
                label = pair_label(pair.variant, reference, group.group.lr)
                forest += [item.to_frame().assign(comparison=label, column=item.column)
                           for item in pair.analysis.breakdowns if item.groups]
        key, name = slug(eval_set), eval_set_name(eval_set)
        tables.append(Table(
            f"reviewer-{key}",
            f"Seed-level and document-level uncertainty on the {name}: ΔP with its {level} two-level "
            f"(seed × document) bootstrap interval; the per-seed PPL ratio with its paired t interval and p-value; "
            f"the one-sided exact sign test on improved pairs; the exact two-sided permutation test over the seed "
            f"pairs; the two-sided sign-flip permutation test on the per-document differences (models fixed); the "
            f"BCa interval for D (models fixed); bits per byte when the files carry n_bytes "
            f"(B = {settings.n_resamples:,}, seed {settings.rng_seed}).",
            ("Variant", "ΔP", "Two-level bootstrap", "PPL ratio (t)", "t interval", "t p", "Sign test",
             "Seed permutation p", "Sign-flip p", "BCa interval for D", "Bits per byte"),
            "lrrrrrrrrrr",
            tuple(RowGroup(group.group.label, tuple(_statistics_row(pair) for pair in group.pairs))
                  for group in groups)))
        adjusted = [RowGroup(group.group.label, _adjusted_rows(group.pairs, group.adjusted))
                    for group in groups if group.adjusted is not None]
        if adjusted:
            tables.append(Table(
                f"reviewer-arms-{key}",
                f"Every arm against {reference} on the {name}, p-values adjusted over the "
                "arms of each learning rate: Holm (family-wise error) and Benjamini–Hochberg (false discovery rate); "
                "p is the seed-and-document test of the verdict, t p the seed-level paired t, the sign-flip test "
                "holds the models fixed.",
                ("Variant", "p", "Holm", "BH", "t p", "Holm", "BH", "Sign-flip p", "Holm", "BH"), "lrrrrrrrrr",
                tuple(adjusted)))
        if forest:
            figures.append(_forest(pd.concat(forest, ignore_index=True), key, name, level))
    if not tables:
        return omitted(KEY, TITLE, f"No evaluation set holds the reference arm {reference!r} with another arm.")
    intro = ("The verdicts above rest on the seed-and-document interval. Beside it: the two-level bootstrap "
             "resamples seed pairs and documents (it covers less than stated with few seeds, docs/statistics.md); "
             "the t interval and the seed tests treat new seeds on these documents; the sign-flip test and the BCa "
             "interval hold the models fixed.",
             *(f"With {n} seed pairs — {'; '.join(lines)}." for n, lines in sorted(limits.items())))
    return Section(KEY, TITLE, intro=intro, tables=tuple(tables), figures=tuple(figures))


def _forest(frame: pd.DataFrame, key: str, name: str, level: str) -> Figure:
    columns = ", ".join(dict.fromkeys(frame["column"]))
    shown = plots.largest_groups(frame)
    capped = (f" Where a comparison has more than {plots.FOREST_MAX_GROUPS} groups, its {plots.FOREST_MAX_GROUPS} "
              f"with the most documents are shown ({len(shown):,} of {len(frame):,} groups in all; "
              f"`gatedv analyze --by {columns}` lists every one)." if len(shown) < len(frame) else "")
    return Figure(
        f"forest-{key}", f"D per document group, {name}",
        f"Mean NLL difference D per group of documents ({columns}) with {level} document-bootstrap "
        f"intervals on the {name}; left of zero the variant is better.{capped}",
        plots.chart_spec(plots.forest_chart(shown, title=f"D per group ({name})")))


def _statistics_row(pair: PairResult):
    result = pair.analysis
    seed_level, bpb = result.seed_level, result.bits_per_byte
    seed_cells = [MISSING] * 6 if seed_level is None else [
        format_delta_p_interval(seed_level.bootstrap.confidence_interval),
        format_delta_p(seed_level.t_interval.ratio_change),
        format_delta_p_interval(seed_level.t_interval.ratio_interval),
        f"{seed_level.t_interval.p_value:.3g}",
        f"{format_pairs(seed_level.sign_test.improved, seed_level.sign_test.n_pairs)}, "
        f"p = {seed_level.sign_test.p_value:.3g}",
        MISSING if seed_level.permutation_test is None else
        f"{seed_level.permutation_test.p_value:.3g} (min {seed_level.permutation_test.min_attainable_p:.3g})"]
    return row(pair.variant, format_delta_p(result.comparison.delta_p), *seed_cells,
               f"{result.permutation.p_value:.3g}",
               MISSING if result.bca_interval is None else format_interval(*result.bca_interval),
               MISSING if bpb is None else f"{bpb.baseline_mean:.4f} → {bpb.variant_mean:.4f}")


def _adjusted_rows(pairs: tuple[PairResult, ...], adjusted: AdjustedPValues) -> tuple:
    """Per variant each test's raw p-value with its Holm and BH adjustments ("—" where the test or its family's
    adjustment is missing)."""
    rows = []
    for k, pair in enumerate(pairs):
        seed_document, seed_level = pair.analysis.comparison.seed_document, pair.analysis.seed_level
        cells = [pair.variant]
        for raw, family in ((None if seed_document is None else seed_document.p_value, adjusted.seed_document),
                            (None if seed_level is None else seed_level.t_interval.p_value, adjusted.t),
                            (pair.analysis.permutation.p_value, adjusted.permutation)):
            cells += ([MISSING] * 3 if raw is None else [f"{raw:.3g}", MISSING, MISSING] if family is None else
                      [f"{raw:.3g}", f"{family['holm'][k]:.3g}", f"{family['bh'][k]:.3g}"])
        rows.append(row(*cells))
    return tuple(rows)
