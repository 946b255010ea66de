"""The verdict on a downstream task from paired item scores: accuracy (or any per-item metric) of two arms.

The per-item differences y_si = variant − baseline of seed pair s on item i go through the same crossed seeds ×
items fit as the perplexity verdict (gatedv_stats.stats.crossed: method of moments, Satterthwaite df, the pooling
pre-test, the few-seed guard), with every item weighted equally: D = Σ_s Σ_i y_si / (S N) is the difference of
the arms' mean scores, in the metric's units (0.01 = one point of accuracy). "Better" follows the metric's
direction (a higher accuracy, a lower loss). Beside it: the exact seed permutation test (sign flips over seed
pairs), item win / loss / tie counts and, with one seed pair of a 0/1 metric, McNemar's exact test (these two
models only). docs/statistics.md ("Downstream tasks") has the derivation and the calibration.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from gatedv_stats.core import formatting as fmt
from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.pairing.items import PairedScores
from gatedv_stats.stats.seed_document import SeedDocumentResult, seed_document_interval
from gatedv_stats.stats.seed_tests import MAX_EXACT_SEEDS, SeedPermutationTest, seed_permutation_test
from gatedv_stats.stats.verdict import Verdict, tost_p_value


@dataclass(frozen=True)
class McNemarTest:
    """McNemar's exact test on one seed pair's 0/1 scores: do the items only one arm gets right favour either?"""

    baseline_only: int  # items the baseline gets right and the variant wrong
    variant_only: int
    statistic: int  # min of the two, as statsmodels reports it
    p_value: float  # two-sided exact binomial test of the discordant items against 1/2

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        return (f"McNemar's exact test (one seed pair, these models only): {self.variant_only} items right for the "
                f"variant only, {self.baseline_only} for the baseline only, p = {self.p_value:.4g}")


def mcnemar_test(baseline: np.ndarray, variant: np.ndarray) -> McNemarTest:
    """McNemar's exact test on the 0/1 scores (N,) of two models on the same items."""
    baseline, variant = np.asarray(baseline, dtype=np.float64), np.asarray(variant, dtype=np.float64)
    if not is_binary(baseline) or not is_binary(variant) or baseline.shape != variant.shape:
        raise InputError("McNemar's test: needs 0/1 scores of both models on the same items")
    b = int(np.sum((baseline == 1.0) & (variant == 0.0)))
    c = int(np.sum((baseline == 0.0) & (variant == 1.0)))
    p_value = 1.0 if b + c == 0 else float(stats.binomtest(min(b, c), b + c, 0.5).pvalue)
    return McNemarTest(baseline_only=b, variant_only=c, statistic=min(b, c), p_value=p_value)


def is_binary(scores: np.ndarray) -> bool:
    return bool(np.all((scores == 0.0) | (scores == 1.0)))


@dataclass(frozen=True)
class ItemScoreResult:
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
            "permutation": None if self.permutation is None else self.permutation.to_dict(),
            "wins": self.wins, "losses": self.losses, "ties": self.ties,
            "mcnemar": None if self.mcnemar is None else self.mcnemar.to_dict(), "notes": list(self.notes),
        }

    def summary(self) -> str:
        lines = [f"{self.task} ({self.metric}, {'higher' if self.higher_is_better else 'lower'} is better): "
                 f"{self.variant_arm} vs {self.baseline_arm}, {self.n_seeds} seed pairs × {self.n_items:,} items",
                 f"  {self.baseline_arm} {format_scores(self.baseline_per_seed, self.proportion)}, "
                 f"{self.variant_arm} {format_scores(self.variant_per_seed, self.proportion)} (mean ± SD over seeds)"]
        if self.verdict is not None:
            lines.append(f"  {self.verdict.summary()}")
        interval = self.interval
        if interval is not None:
            unit = "cluster" if interval.n_clusters is not None else "item"
            components = [f"seed {interval.seed_var:.3g}"]
            if interval.doc_var is not None:
                components += [f"{unit} {interval.doc_var:.3g}", f"interaction {interval.interaction_var:.3g}"]
            lines.append(f"  difference {format_difference(self.difference, self.proportion)} (SE "
                         f"{format_difference(interval.se, self.proportion, signed=False)}, df {interval.df:.1f}); "
                         f"variance components: {', '.join(components)}")
        lines.append(f"  items: the variant better on {self.wins:,}, worse on {self.losses:,}, tied on {self.ties:,} "
                     "(seed-averaged scores)")
        lines += [f"  {test.summary()}" for test in (self.permutation, self.mcnemar) if test is not None]
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


def format_difference(value: float, proportion: bool, *, signed: bool = True) -> str:
    """A difference of scores: in points of a proportion ("+1.23 points"), else with 4 significant digits."""
    sign = "+" if signed else ""
    text = f"{100.0 * value + 0.0:{sign}.2f} points" if proportion else f"{value + 0.0:{sign}.4g}"
    return text.replace("-", fmt.MINUS)


def format_difference_interval(interval: tuple[float, float], proportion: bool) -> str:
    low, high = (format_difference(value, proportion).removesuffix(" points") for value in interval)
    return f"[{low}, {high}]" + (" points" if proportion else "")


def format_scores(per_seed: tuple[float, ...], proportion: bool) -> str:
    """An arm's mean score ± SD over seeds: a proportion in percent ("62.41 ± 0.53%"), else 4 significant digits."""
    values = np.asarray(per_seed) * (100.0 if proportion else 1.0)
    sd = f" ± {np.std(values, ddof=1):.2f}" if values.size > 1 else ""
    return (f"{values.mean():.2f}{sd}%" if proportion else f"{values.mean():.4g}{sd}").replace("-", fmt.MINUS)


def compare_items(paired: PairedScores, *, confidence_level: float = 0.95, sesoi: float | None = None,
                  cluster: str | None = None) -> ItemScoreResult:
    """The verdict on one task from paired item scores; `sesoi` in the metric's units (absolute: 0.01 = one point
    of accuracy), `cluster` a grouping column (e.g. subtask) whose values are the sampled units."""
    if sesoi is not None and not (math.isfinite(sesoi) and sesoi > 0.0):
        raise ParameterError("sesoi", f"a smallest effect of interest must be a positive difference in the metric's "
                             f"units (0.01 = one point of accuracy), got {sesoi}")
    labels = None
    if cluster is not None:
        if cluster not in paired.groups.columns:
            raise InputError(f"--cluster {cluster}: not a grouping column of task {paired.task} (columns: "
                             f"{', '.join(paired.groups.columns) or 'none'})")
        labels = paired.groups[cluster].astype(str).to_numpy()
    y = paired.variant - paired.baseline
    favoured = y.mean(axis=0) * (1.0 if paired.higher_is_better else -1.0)
    interval = fitted_verdict = permutation = None
    notes = list(paired.notes)
    if paired.n_seeds >= 2:
        try:
            interval = seed_document_interval(paired.baseline, paired.variant, np.ones(paired.n_items),
                                              clusters=labels, confidence_level=confidence_level)
        except InputError as error:  # no spread over seeds or items: say so instead of an interval
            notes.append(str(error).replace("loss differences", "score differences"))
    if interval is not None:
        fitted_verdict = item_verdict(interval, paired, sesoi)
        notes += [note.replace("document", "item") for note in interval.notes]
    per_seed = y.mean(axis=1)
    if 2 <= paired.n_seeds <= MAX_EXACT_SEEDS and np.any(per_seed):
        permutation = seed_permutation_test(per_seed, alpha=1.0 - confidence_level)
    binary = is_binary(paired.baseline) and is_binary(paired.variant)
    return ItemScoreResult(
        task=paired.task, metric=paired.metric, higher_is_better=paired.higher_is_better,
        baseline_arm=paired.baseline_arm, variant_arm=paired.variant_arm,
        seeds=tuple(int(seed) for seed in paired.seeds), n_items=paired.n_items, proportion=paired.proportion,
        cluster=cluster,
        baseline_per_seed=tuple(float(v) for v in paired.baseline.mean(axis=1)),
        variant_per_seed=tuple(float(v) for v in paired.variant.mean(axis=1)), difference=float(y.mean()),
        interval=interval, verdict=fitted_verdict, permutation=permutation, wins=int(np.sum(favoured > 0)),
        losses=int(np.sum(favoured < 0)), ties=int(np.sum(favoured == 0)),
        mcnemar=mcnemar_test(paired.baseline[0], paired.variant[0]) if binary and paired.n_seeds == 1 else None,
        notes=tuple(dict.fromkeys(notes)))


def item_verdict(interval: SeedDocumentResult, paired: PairedScores, sesoi: float | None = None,
                 *, p_value: float | None = None, tost_p: float | None = None) -> Verdict:
    """Better / worse / no detectable difference / equivalent (within ±sesoi, two one-sided tests) from the
    interval for D = variant − baseline, in the metric's direction. `p_value` and `tost_p` replace the raw
    p-values (e.g. by Holm-adjusted ones across tasks)."""
    alpha = interval.alpha
    bounds = None if sesoi is None else (-sesoi, sesoi)
    if bounds is not None and tost_p is None:
        tost_p = tost_p_value(interval.nll_diff_mean, interval.se, interval.df, bounds)
    p = interval.p_value if p_value is None else p_value
    direction = None
    if p < alpha:  # raw: the interval excludes 0
        direction = "better" if (interval.nll_diff_mean > 0) == paired.higher_is_better else "worse"
    outcome = "equivalent" if tost_p is not None and tost_p < alpha else direction or "no detectable difference"
    return Verdict(verdict=outcome, alpha=alpha, p_value=p, sesoi=sesoi, equivalence_bounds=bounds,
                   tost_p_value=tost_p, explanation=_explain(outcome, direction, interval, paired, p, sesoi, tost_p))


def _explain(outcome: str, direction: str | None, interval: SeedDocumentResult, paired: PairedScores, p: float,
             sesoi: float | None, tost_p: float | None) -> str:
    proportion = paired.proportion
    scope = "accounting for training seeds and items"
    if interval.doc_var is None:
        scope = "accounting for training seeds, on this one item or cluster"
    elif interval.n_clusters is not None:
        scope += f" (items grouped into {interval.n_clusters:,} clusters)"
    pct = fmt.format_level(interval.confidence_level)
    ci = format_difference_interval(interval.confidence_interval, proportion)
    size = format_difference(abs(interval.nll_diff_mean), proportion, signed=False)
    if outcome == "equivalent":
        assert sesoi is not None
        text = (f"The arms are equivalent within ±{format_difference(sesoi, proportion, signed=False)} of "
                f"{paired.metric}: both one-sided tests reject a larger difference (TOST p = {tost_p:.3g}), {scope}")
        if direction is not None:
            text += f"; the variant is slightly {direction} ({pct} interval {ci} excludes 0)"
        return text + "."
    if direction is not None:
        higher = interval.nll_diff_mean > 0
        return (f"The variant is {direction}: its {paired.metric} is {'higher' if higher else 'lower'} by {size} "
                f"({pct} interval {ci}, p = {p:.3g}), {scope}.")
    text = f"No detectable difference: the {pct} interval {ci} includes 0 (p = {p:.3g}), {scope}"
    if sesoi is not None:
        text += (f", and equivalence within ±{format_difference(sesoi, proportion, signed=False)} is not shown "
                 f"either (TOST p = {tost_p:.3g})")
    return text + "."
