"""The figures of a score's comparison around its verdict (a downstream task's metric, or any per-unit score): the
arms' mean scores per seed, the exact seed permutation test (sign flips over seed pairs), unit win / loss / tie
counts and, with one seed pair of a 0/1 score, McNemar's exact test (these two models only).

The verdict itself is `analysis.compare`'s, on the metric's scale: the per-unit differences go through the same
crossed seeds × units fit as the perplexity verdict, every unit weighted equally, so D is the difference of the
arms' mean scores in the metric's units (0.01 = one point of accuracy) and "better" follows the metric's direction.
docs/verdicts.md ("Downstream tasks") has the derivation and the calibration.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gatedv_stats.analysis.comparison import Comparison
from gatedv_stats.analysis.figures.perplexity import variance_components
from gatedv_stats.core import formatting as fmt
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.stats.seed_level import MAX_EXACT_SEEDS, SeedPermutationTest, seed_permutation_test
from gatedv_stats.stats.tasks import McNemarTest, is_binary, mcnemar_test


@dataclass(frozen=True)
class ScoreFigures:
    """The figures of one comparison of two arms' scores (differences are variant − baseline, in metric units)."""

    baseline_per_seed: tuple[float, ...]  # mean score per seed, in the order of the seeds
    variant_per_seed: tuple[float, ...]
    permutation: SeedPermutationTest | None  # exact sign flips over seed pairs; None with one pair or no difference
    wins: int  # units on which the variant's seed-averaged score is the better one
    losses: int
    ties: int
    mcnemar: McNemarTest | None  # one seed pair of a 0/1 metric

    @classmethod
    def of(cls, paired: Paired, *, confidence_level: float, **_resampling: object) -> ScoreFigures:
        """The figures of a pair of scores (they resample nothing: the document bootstrap's settings are not
        theirs)."""
        y = paired.variant - paired.baseline
        favoured = y.mean(axis=0) * (1.0 if paired.higher_is_better else -1.0)
        per_seed = y.mean(axis=1)
        return cls(baseline_per_seed=tuple(float(v) for v in paired.baseline.mean(axis=1)),
                   variant_per_seed=tuple(float(v) for v in paired.variant.mean(axis=1)),
                   permutation=(seed_permutation_test(per_seed, alpha=1.0 - confidence_level)
                                if 2 <= paired.n_pairs <= MAX_EXACT_SEEDS and np.any(per_seed) else None),
                   wins=int(np.sum(favoured > 0)), losses=int(np.sum(favoured < 0)), ties=int(np.sum(favoured == 0)),
                   mcnemar=mcnemar_test(paired.baseline[0], paired.variant[0]) if paired.n_pairs == 1
                   and is_binary(paired.baseline) and is_binary(paired.variant) else None)

    @staticmethod
    def estimate(paired: Paired) -> float:
        """D: the mean over seeds and units of variant − baseline."""
        return float((paired.variant - paired.baseline).mean())

    def headline_estimate(self, comparison: Comparison) -> str:
        scale, fit = comparison.scale, comparison.seed_document
        interval = "" if fit is None else " " + scale.format_interval(fit.confidence_interval)
        return f"difference {scale.format_estimate(comparison.estimate)}{interval}"

    def warnings(self, comparison: Comparison) -> tuple[str, ...]:
        """What the pairing dropped or accepted, and a missing interval's reason."""
        if comparison.seed_document is None and comparison.n_pairs >= 2:
            return comparison.pairing_notes + (
                f"seed-and-document interval: the score differences do not vary over seeds or "
                f"{comparison.scale.noun}s, so there is no spread to form an interval from",)
        return comparison.pairing_notes

    def to_dict(self, comparison: Comparison) -> dict:
        fit, scale = comparison.seed_document, comparison.scale
        return {
            "task": comparison.task, "metric": scale.metric, "higher_is_better": scale.higher_is_better,
            "baseline_arm": comparison.baseline_arm, "variant_arm": comparison.variant_arm,
            "n_seeds": comparison.n_pairs, "seeds": list(comparison.seeds),
            f"n_{scale.noun}s": comparison.n_units, "unit": comparison.unit, "proportion": scale.proportion,
            "cluster": comparison.cluster, "baseline_mean": float(np.mean(self.baseline_per_seed)),
            "variant_mean": float(np.mean(self.variant_per_seed)),
            "baseline_per_seed": list(self.baseline_per_seed), "variant_per_seed": list(self.variant_per_seed),
            "difference": comparison.estimate, **comparison.verdict_keys(),
            "difference_ci": None if fit is None else list(fit.confidence_interval),
            "difference_se": None if fit is None else fit.se, "difference_df": None if fit is None else fit.df,
            "p_value": None if fit is None else fit.p_value,
            "variance_components": variance_components(fit, scale.noun),
            "n_clusters": None if fit is None else fit.n_clusters,
            "noise_floor": None if fit is None or fit.floor_use is None else fit.floor_use.to_dict(),
            "permutation": None if self.permutation is None else self.permutation.to_dict(),
            "wins": self.wins, "losses": self.losses, "ties": self.ties,
            "mcnemar": None if self.mcnemar is None else self.mcnemar.to_dict(), "notes": list(comparison.notes),
        }

    def columns(self, comparison: Comparison) -> dict:
        """The columns of a table of comparisons after the leading ones."""
        return {"baseline_arm": comparison.baseline_arm, "variant_arm": comparison.variant_arm,
                "task": comparison.task, "metric": comparison.scale.metric, "n_seeds": comparison.n_pairs,
                f"n_{comparison.scale.noun}s": comparison.n_units}

    def cells(self, comparison: Comparison, proportion: bool) -> tuple[str, ...]:
        """Seeds, units, both arms' scores, the difference, its interval and the verdict, as a table row shows them
        (in points when every comparison of the table is a proportion)."""
        fit = comparison.seed_document
        interval = "—" if fit is None else fmt.format_difference_interval(fit.confidence_interval, proportion)
        return (str(comparison.n_pairs), f"{comparison.n_units:,}",
                *(fmt.format_scores(scores, proportion) for scores in (self.baseline_per_seed, self.variant_per_seed)),
                fmt.format_difference(comparison.estimate, proportion), interval, comparison.verdict_text)

    def summary(self, comparison: Comparison) -> str:
        scale, fit, noun = comparison.scale, comparison.seed_document, comparison.scale.noun
        direction = f"{'higher' if scale.higher_is_better else 'lower'} is better"
        head = (f"{comparison.task} ({scale.metric}, {direction})" if comparison.task is not None
                else f"{scale.metric} ({direction})")
        lines = [f"{head}: {comparison.variant_arm} vs {comparison.baseline_arm}, {comparison.n_pairs} seed pairs × "
                 f"{comparison.n_units:,} {noun}s",
                 f"  {comparison.baseline_arm} {fmt.format_scores(self.baseline_per_seed, scale.proportion)}, "
                 f"{comparison.variant_arm} {fmt.format_scores(self.variant_per_seed, scale.proportion)} "
                 "(mean ± SD over seeds)",
                 f"  verdict: {comparison.verdict_text} — {comparison.verdict_explanation}"]
        if fit is not None:
            lines.append(f"  difference {fmt.format_difference(comparison.estimate, scale.proportion)} (SE "
                         f"{fmt.format_difference(fit.se, scale.proportion, signed=False)}, df {fit.df:.1f}); "
                         f"variance components: {', '.join(fit.components(noun))}")
        lines.append(f"  {noun}s: the variant better on {self.wins:,}, worse on {self.losses:,}, tied on "
                     f"{self.ties:,} (seed-averaged scores)")
        lines += [f"  {test.summary()}" for test in (self.permutation, self.mcnemar) if test is not None]
        return "\n".join(lines + [f"  note: {note}" for note in comparison.notes])
