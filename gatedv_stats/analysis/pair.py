"""The statistics a reviewer asks for about one paired comparison, assembled in one result (`gatedv analyze`).

Beside the paper's comparison (ΔP, D with its document bootstrap, wins): the BCa interval for D, the
sign-flip permutation test on d_i, the seed-level view (two-level bootstrap, paired t, sign test), bits per
byte when the loss files carry `n_bytes`, and D per group of any document column. `reviewer_section` turns
the same results into a report section (tables and a forest plot) for `gatedv_stats.report_data`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from gatedv_stats import formatting as fmt
from gatedv_stats.stats import metrics
from gatedv_stats.stats.breakdowns import Breakdown, breakdown
from gatedv_stats.stats.comparison import Comparison, compare
from gatedv_stats.errors import InputError
from gatedv_stats.pairing import PairedLosses
from gatedv_stats.stats.permutation import SignFlipTest, sign_flip_test
from gatedv_stats.stats.resampling import interval_from_distribution
from gatedv_stats.stats.seed_uncertainty import SeedUncertainty, seed_uncertainty

if TYPE_CHECKING:  # the report layer imports this module; the statistics never import it at run time
    from gatedv_stats.report_data import ReportContext, Section


@dataclass(frozen=True)
class BitsPerByte:
    """Bits per UTF-8 byte of both arms: comparable across tokenizers, unlike PPL."""

    baseline: tuple[float, ...]  # per seed
    variant: tuple[float, ...]
    baseline_mean: float
    variant_mean: float
    relative_change: float  # mean_variant / mean_baseline − 1

    def to_dict(self) -> dict:
        return {"baseline": list(self.baseline), "variant": list(self.variant), "baseline_mean": self.baseline_mean,
                "variant_mean": self.variant_mean, "relative_change": self.relative_change}


@dataclass(frozen=True)
class ReviewerAnalysis:
    """One paired comparison with every reviewer statistic; `seed` and resample counts are recorded inside."""

    comparison: Comparison
    bca_interval: tuple[float, float] | None  # BCa interval for D from the comparison's own bootstrap distribution
    permutation: SignFlipTest
    seed_level: SeedUncertainty | None  # None with a single seed pair or no spread over seeds
    bits_per_byte: BitsPerByte | None  # None without n_bytes
    breakdowns: tuple[Breakdown, ...]
    notes: tuple[str, ...]

    def to_dict(self) -> dict:
        """`comparison` is exactly the `gatedv bootstrap --json` object; everything else sits under new keys."""
        return {
            "comparison": self.comparison.to_dict(),
            "bca_interval": None if self.bca_interval is None else list(self.bca_interval),
            "permutation_test": self.permutation.to_dict(),
            "seed_uncertainty": None if self.seed_level is None else self.seed_level.to_dict(),
            "bits_per_byte": None if self.bits_per_byte is None else self.bits_per_byte.to_dict(),
            "breakdowns": [item.to_dict() for item in self.breakdowns],
            "notes": list(self.notes),
            "inputs": self.comparison.sources,
        }

    def summary(self) -> str:
        level = self.comparison.bootstrap.level
        lines = [self.comparison.summary(), "", "reviewer statistics:"]
        if self.bca_interval is not None:
            lines.append(f"{fmt.format_percent(level, 0)} BCa interval for D: "
                         f"{fmt.format_interval(*self.bca_interval)} (same resamples as above)")
        lines.append(self.permutation.summary())
        if self.seed_level is not None:
            lines.append(self.seed_level.summary())
        if self.bits_per_byte is not None:
            bpb = self.bits_per_byte
            lines.append(f"bits per byte: {bpb.baseline_mean:.4f} vs {bpb.variant_mean:.4f} "
                         f"({fmt.format_delta_p(bpb.relative_change)}, mean over seeds)")
        for item in self.breakdowns:
            lines += ["", item.summary()]
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)


def analyze(paired: PairedLosses, *, samples: int = 2000, level: float = 0.95, seed: int = 0,
            permutation_resamples: int = 10_000, by: tuple[str, ...] = (), bins: int = 4, min_docs: int = 5,
            progress: bool | None = False) -> ReviewerAnalysis:
    """Every reviewer statistic for one pair of arms; all resampling is seeded from `seed`."""
    comparison = compare(paired, samples=samples, level=level, seed=seed, progress=progress)
    differences = metrics.document_differences(paired.baseline, paired.variant)
    notes = []
    try:
        bca = interval_from_distribution(differences, paired.n_targets, comparison.bootstrap.bootstrap_distribution,
                                         level=level, method="bca")
    except ValueError as error:  # resampling's message for a degenerate sample (e.g. one document)
        bca = None
        notes.append(f"no BCa interval: {error}")
    seed_level = None
    if paired.n_pairs < 2:
        notes.append("one seed pair: no seed-level interval, t interval or sign test (they need at least 2 pairs)")
    else:
        try:
            seed_level = seed_uncertainty(paired, samples=samples, confidence=level, seed=seed, progress=progress)
        except InputError as error:  # e.g. identical arms: no spread over seeds, every pair tied
            notes.append(f"no seed-level statistics: {error}")
    return ReviewerAnalysis(
        comparison=comparison,
        bca_interval=bca,
        permutation=sign_flip_test(differences, paired.n_targets, resamples=permutation_resamples, seed=seed,
                                   progress=progress),
        seed_level=seed_level,
        bits_per_byte=_bits_per_byte(comparison),
        breakdowns=tuple(breakdown(paired, column, bins=bins, min_docs=min_docs, samples=samples, level=level,
                                   seed=seed) for column in by),
        notes=tuple(notes),
    )


def _bits_per_byte(comparison: Comparison) -> BitsPerByte | None:
    baseline, variant = comparison.baseline.bits_per_byte, comparison.variant.bits_per_byte
    if baseline is None or variant is None:
        return None
    return BitsPerByte(baseline=tuple(float(v) for v in baseline), variant=tuple(float(v) for v in variant),
                       baseline_mean=float(np.mean(baseline)), variant_mean=float(np.mean(variant)),
                       relative_change=float(np.mean(variant) / np.mean(baseline) - 1.0))


# --- report section (gatedv report) ------------------------------------------------------------------------

REPORT_LEVEL = 0.95


def reviewer_section(ctx: ReportContext) -> Section:
    """Report section "Beyond the paper": the reviewer statistics of every comparison with the reference,
    adjusted p-values when several arms share it, and a forest plot of D per document group.

    `ctx` is a `gatedv_stats.report_data.ReportContext`; the report layer is imported here, not above, so the
    statistics never depend on it.
    """
    from gatedv_stats.report import plots
    from gatedv_stats.pairing import pair_runs
    from gatedv_stats.report_data import (Figure, RowGroup, Section, Table, _slug, eval_set_name, format_lr,
                                          mixed_eval_set, omitted, other_arms)

    key, title = "reviewer", "Beyond the paper: seeds, tests, many arms, breakdowns"
    if ctx.reference is None:
        return omitted(key, title, "No reference arm: no loss file has arm 'baseline'; choose one with --reference.")
    tables, figures, limits = [], [], {}
    for eval_set in dict.fromkeys(group.eval_set for group in ctx.groups):
        groups = [group for group in ctx.groups if group.eval_set == eval_set and ctx.reference in group.arms
                  and len(group.arms) > 1 and not mixed_eval_set([r for runs in group.arms.values() for r in runs])]
        stats_groups, adjusted_groups, forest = [], [], []
        for group in groups:
            analyses = []
            for variant in other_arms(group.arms, ctx.reference):
                try:
                    paired = pair_runs(group.arms[ctx.reference], group.arms[variant])
                except InputError:
                    continue  # the comparison section already says why this pair is left out
                column = _breakdown_column(paired)
                result = analyze(paired, samples=ctx.settings.samples, level=REPORT_LEVEL, seed=ctx.settings.seed,
                                 by=(column,) if column else ())
                analyses.append((variant, result))
                if result.seed_level is not None:
                    limits.setdefault(paired.n_pairs, result.seed_level.limits)
                for item in result.breakdowns:
                    label = f"{variant} vs {ctx.reference}, LR {format_lr(group.lr)}"
                    forest.append(item.to_frame().assign(comparison=label, column=item.column))
            if not analyses:
                continue
            stats_groups.append(RowGroup(group.label, tuple(_reviewer_row(variant, result)
                                                            for variant, result in analyses)))
            if len(analyses) > 1:
                adjusted_groups.append(RowGroup(group.label, _adjusted_rows(analyses)))
        if not stats_groups:
            continue
        slug = _slug(eval_set)
        level = fmt.format_percent(REPORT_LEVEL, 0)
        tables.append(Table(
            f"reviewer-{slug}",
            f"Seed-level and document-level uncertainty on the {eval_set_name(eval_set)}: ΔP with its {level} "
            f"seed × document bootstrap interval; the per-seed PPL ratio with its paired t interval and p-value; "
            f"the one-sided exact sign test on improved pairs; the two-sided sign-flip permutation test on the "
            f"per-document differences; the BCa interval for D; bits per byte when the files carry n_bytes "
            f"(B = {ctx.settings.samples:,}, seed {ctx.settings.seed}).",
            ("Variant", "ΔP", "Seed × doc interval", "PPL ratio (t)", "t interval", "t p", "Sign test",
             "Sign-flip p", "BCa interval for D", "Bits per byte"),
            "lrrrrrrrrr", tuple(stats_groups)))
        if adjusted_groups:
            tables.append(Table(
                f"reviewer-arms-{slug}",
                f"Every arm against {ctx.reference} on the {eval_set_name(eval_set)}, p-values adjusted over the "
                "arms of each learning rate: Holm (family-wise error) and Benjamini–Hochberg (false discovery rate).",
                ("Variant", "t p", "Holm", "BH", "Sign-flip p", "Holm", "BH"), "lrrrrrr", tuple(adjusted_groups)))
        if forest:
            frame = pd.concat(forest, ignore_index=True)
            columns = ", ".join(dict.fromkeys(frame["column"]))
            figures.append(Figure(
                f"forest-{slug}", f"D per document group, {eval_set_name(eval_set)}",
                f"Mean NLL difference D per group of documents ({columns}) with {level} document-bootstrap "
                f"intervals on the {eval_set_name(eval_set)}; left of zero the variant is better.",
                plots.chart_spec(plots.forest_chart(frame, title=f"D per group ({eval_set_name(eval_set)})"))))
    if not tables:
        return omitted(key, title, f"No evaluation set holds the reference arm {ctx.reference!r} with another arm.")
    intro = ("The paper's interval holds the trained models fixed. Here seeds are sampled too: the seed × document "
             "bootstrap resamples seed pairs and documents; the t interval treats new seeds on these documents; "
             "the sign-flip test and the BCa interval hold the models fixed.",
             *(f"With {n} seed pairs — {'; '.join(lines)}." for n, lines in sorted(limits.items())))
    return Section(key, title, intro=intro, tables=tuple(tables), figures=tuple(figures))


def _breakdown_column(paired: PairedLosses, min_docs: int = 5) -> str | None:
    """Domain when at least two domains are large enough to stand alone, else length bins of n_bytes."""
    if "domain" in paired.doc_columns:
        sizes = paired.doc_columns["domain"].value_counts()
        if int((sizes >= min_docs).sum()) >= 2:
            return "domain"
    return "n_bytes" if "n_bytes" in paired.doc_columns else None


def _reviewer_row(variant: str, result: ReviewerAnalysis):
    from gatedv_stats.report_data import row

    seed_level, bpb = result.seed_level, result.bits_per_byte
    missing = "—"
    return row(
        variant,
        fmt.format_delta_p(result.comparison.delta_p),
        missing if seed_level is None else
        f"[{fmt.format_delta_p(seed_level.bootstrap.low)}, {fmt.format_delta_p(seed_level.bootstrap.high)}]",
        missing if seed_level is None else fmt.format_delta_p(seed_level.t_interval.ratio_change),
        missing if seed_level is None else
        f"[{fmt.format_delta_p(seed_level.t_interval.ratio_low)}, "
        f"{fmt.format_delta_p(seed_level.t_interval.ratio_high)}]",
        missing if seed_level is None else f"{seed_level.t_interval.p_value:.3g}",
        missing if seed_level is None else
        f"{fmt.format_pairs(seed_level.sign_test.improved, seed_level.sign_test.n_pairs)}, "
        f"p = {seed_level.sign_test.p_value:.3g}",
        f"{result.permutation.p_value:.3g}",
        missing if result.bca_interval is None else fmt.format_interval(*result.bca_interval),
        missing if bpb is None else f"{bpb.baseline_mean:.4f} → {bpb.variant_mean:.4f}",
    )


def _adjusted_rows(analyses: list[tuple[str, ReviewerAnalysis]]):
    from gatedv_stats.stats.multiple import adjust_p_values
    from gatedv_stats.report_data import row

    missing = "—"
    t_values = [None if result.seed_level is None else result.seed_level.t_interval.p_value for _, result in analyses]
    t_adjusted = None if None in t_values else adjust_p_values(t_values)
    permutation = adjust_p_values([result.permutation.p_value for _, result in analyses])
    return tuple(
        row(variant,
            missing if t_values[k] is None else f"{t_values[k]:.3g}",
            missing if t_adjusted is None else f"{t_adjusted['holm'][k]:.3g}",
            missing if t_adjusted is None else f"{t_adjusted['bh'][k]:.3g}",
            f"{result.permutation.p_value:.3g}", f"{permutation['holm'][k]:.3g}", f"{permutation['bh'][k]:.3g}")
        for k, (variant, result) in enumerate(analyses))
