"""The figures of a downstream task's comparison around its verdict: the arms' mean scores per seed, the exact seed
permutation test (sign flips over seed pairs), item win / loss / tie counts and, with one seed pair of a 0/1 metric,
McNemar's exact test (these two models only).

The verdict itself is `analysis.compare`'s, on the metric's scale: the per-item differences go through the same
crossed seeds × items fit as the perplexity verdict, every item weighted equally, so D is the difference of the arms'
mean scores in the metric's units (0.01 = one point of accuracy) and "better" follows the metric's direction.
docs/verdicts.md ("Downstream tasks") has the derivation and the calibration.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gatedv_stats.core import formatting as fmt
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.stats.seed_document import SeedDocumentResult
from gatedv_stats.stats.seed_level import MAX_EXACT_SEEDS, SeedPermutationTest, seed_permutation_test
from gatedv_stats.stats.tasks import McNemarTest, is_binary, mcnemar_test
from gatedv_stats.stats.verdict import Verdict


@dataclass(frozen=True)
class TaskComparison:
    """One task's comparison of two arms on one metric (differences are variant − baseline, in metric units)."""

    task: str
    metric: str
    higher_is_better: bool
    baseline_arm: str
    variant_arm: str
    seeds: tuple[int, ...]  # the paired training seeds, row order of the per-seed values
    n_items: int
    proportion: bool  # scores are proportions (accuracy): differences are shown in points
    cluster: str | None  # the grouping column whose values are the sampled units
    baseline_per_seed: tuple[float, ...]  # mean score per seed
    variant_per_seed: tuple[float, ...]
    difference: float  # D: the mean over seeds and items of variant − baseline
    interval: SeedDocumentResult | None  # the crossed seeds × items fit; None with one seed pair
    verdict: Verdict | None  # None with one seed pair
    permutation: SeedPermutationTest | None  # exact sign flips over seed pairs; None with one pair or no difference
    wins: int  # items on which the variant's seed-averaged score is the better one
    losses: int
    ties: int
    mcnemar: McNemarTest | None  # one seed pair of a 0/1 metric
    notes: tuple[str, ...]

    @property
    def n_seeds(self) -> int:
        return len(self.seeds)

    @property
    def verdict_text(self) -> str:
        return self.verdict.verdict if self.verdict is not None else "no verdict over seeds (one seed pair)"

    def to_dict(self) -> dict:
        interval = self.interval
        return {
            "task": self.task, "metric": self.metric, "higher_is_better": self.higher_is_better,
            "baseline_arm": self.baseline_arm, "variant_arm": self.variant_arm, "n_seeds": self.n_seeds,
            "seeds": list(self.seeds), "n_items": self.n_items, "proportion": self.proportion, "cluster": self.cluster,
            "baseline_mean": float(np.mean(self.baseline_per_seed)),
            "variant_mean": float(np.mean(self.variant_per_seed)),
            "baseline_per_seed": list(self.baseline_per_seed), "variant_per_seed": list(self.variant_per_seed),
            "difference": self.difference, "verdict": self.verdict_text,
            "verdict_detail": None if self.verdict is None else self.verdict.to_dict(),
            "difference_ci": None if interval is None else list(interval.confidence_interval),
            "difference_se": None if interval is None else interval.se,
            "difference_df": None if interval is None else interval.df,
            "p_value": None if interval is None else interval.p_value,
            "variance_components": None if interval is None else {
                "seed": interval.seed_var, "item": interval.doc_var, "interaction": interval.interaction_var,
                "item_pretest_p": interval.doc_pretest_p, "item_pooled": interval.doc_pooled},
            "n_clusters": None if interval is None else interval.n_clusters,
            "noise_floor": None if interval is None or interval.floor_use is None else interval.floor_use.to_dict(),
            "permutation": None if self.permutation is None else self.permutation.to_dict(),
            "wins": self.wins, "losses": self.losses, "ties": self.ties,
            "mcnemar": None if self.mcnemar is None else self.mcnemar.to_dict(), "notes": list(self.notes),
        }

    def cells(self, proportion: bool) -> tuple[str, ...]:
        """Seeds, items, both arms' scores, the difference, its interval and the verdict, as a table row shows them
        (in points when every task of the table is a proportion)."""
        interval = "—" if self.interval is None else fmt.format_difference_interval(
            self.interval.confidence_interval, proportion)
        return (str(self.n_seeds), f"{self.n_items:,}", fmt.format_scores(self.baseline_per_seed, proportion),
                fmt.format_scores(self.variant_per_seed, proportion),
                fmt.format_difference(self.difference, proportion), interval, self.verdict_text)

    def summary(self) -> str:
        lines = [f"{self.task} ({self.metric}, {'higher' if self.higher_is_better else 'lower'} is better): "
                 f"{self.variant_arm} vs {self.baseline_arm}, {self.n_seeds} seed pairs × {self.n_items:,} items",
                 f"  {self.baseline_arm} {fmt.format_scores(self.baseline_per_seed, self.proportion)}, "
                 f"{self.variant_arm} {fmt.format_scores(self.variant_per_seed, self.proportion)} "
                 "(mean ± SD over seeds)"]
        if self.verdict is not None:
            lines.append(f"  {self.verdict.summary()}")
        interval = self.interval
        if interval is not None:
            components = interval.components("item")
            lines.append(f"  difference {fmt.format_difference(self.difference, self.proportion)} (SE "
                         f"{fmt.format_difference(interval.se, self.proportion, signed=False)}, df {interval.df:.1f}); "
                         f"variance components: {', '.join(components)}")
        lines.append(f"  items: the variant better on {self.wins:,}, worse on {self.losses:,}, tied on {self.ties:,} "
                     "(seed-averaged scores)")
        lines += [f"  {test.summary()}" for test in (self.permutation, self.mcnemar) if test is not None]
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


def task_comparison(paired: Paired, fit: SeedDocumentResult | None, decided: Verdict | None, *,
                    cluster: str | None, confidence_level: float) -> TaskComparison:
    """One task's comparison from its paired item scores, its seeds × items fit and its verdict."""
    y = paired.variant - paired.baseline
    favoured = y.mean(axis=0) * (1.0 if paired.higher_is_better else -1.0)
    notes = list(paired.notes)
    if fit is not None:
        notes += list(fit.notes)
    elif paired.n_pairs >= 2:
        notes.append("seed-and-document interval: the score differences do not vary over seeds or items, so there is "
                     "no spread to form an interval from")
    per_seed = y.mean(axis=1)
    permutation = (seed_permutation_test(per_seed, alpha=1.0 - confidence_level)
                   if 2 <= paired.n_pairs <= MAX_EXACT_SEEDS and np.any(per_seed) else None)
    binary = is_binary(paired.baseline) and is_binary(paired.variant)
    assert paired.task is not None  # item scores are of one task
    return TaskComparison(
        task=paired.task, metric=paired.metric, higher_is_better=paired.higher_is_better,
        baseline_arm=paired.baseline_arm, variant_arm=paired.variant_arm,
        seeds=tuple(int(seed) for seed in paired.seeds), n_items=paired.n_docs, proportion=paired.proportion,
        cluster=cluster,
        baseline_per_seed=tuple(float(v) for v in paired.baseline.mean(axis=1)),
        variant_per_seed=tuple(float(v) for v in paired.variant.mean(axis=1)), difference=float(y.mean()),
        interval=fit, verdict=decided, permutation=permutation, wins=int(np.sum(favoured > 0)),
        losses=int(np.sum(favoured < 0)), ties=int(np.sum(favoured == 0)),
        mcnemar=mcnemar_test(paired.baseline[0], paired.variant[0]) if binary and paired.n_pairs == 1 else None,
        notes=tuple(dict.fromkeys(notes)))
