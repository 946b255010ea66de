"""Statistics that only downstream tasks have: McNemar's exact test on one seed pair's 0/1 item scores, and the
macro-average over a suite's tasks with its seeds × items interval.

The macro-average M = Σ_t D_t / T of the tasks' differences D_t is the mean over seed pairs of the per-seed
macro-averages M_s = Σ_t D_ts / T. The tasks are scored by the same trained models, so a seed's effect is shared
across tasks; their items are distinct, so the item terms are independent:

    Var̂(M) = V_M / S + Σ_t Var̂_item,t / T²,

with V_M the variance over seed pairs of M_s (which holds every task's seed and interaction terms and their
covariances across tasks) and Var̂_item,t the item term of task t's own fit (0 where its pre-test pools it), on
Satterthwaite's df under the few-seed guard. The derivation is in docs/verdicts.md ("Downstream tasks").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import special, stats

from gatedv_stats.core.errors import InputError
from gatedv_stats.stats.crossed import interval_df
from gatedv_stats.stats.intervals import ConfidenceInterval
from gatedv_stats.stats.seed_document import SeedDocumentResult


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
class MacroAverage:
    """The macro-average over tasks of variant − baseline, with its seeds × items interval."""

    variant_arm: str
    n_tasks: int
    n_seeds: int
    difference: float  # M
    per_seed: tuple[float, ...]  # M_s
    se: float
    df: float
    confidence_level: float
    confidence_interval: ConfidenceInterval
    p_value: float  # two-sided t test of M = 0
    item_share: float  # the item terms' share of Var̂(M)

    def to_dict(self) -> dict:
        return {**asdict(self), "confidence_interval": list(self.confidence_interval), "per_seed": list(self.per_seed)}


def macro_average(fits: Sequence[SeedDocumentResult], *, variant_arm: str = "variant") -> MacroAverage:
    """Macro-average over tasks from each task's seeds × items fit; the fits must share their seed pairs (rows in
    the same order) and their confidence level."""
    if not fits:
        raise InputError("macro-average: no tasks")
    n_seeds, levels = {fit.n_seeds for fit in fits}, {fit.confidence_level for fit in fits}
    if len(n_seeds) != 1 or len(levels) != 1:
        raise InputError("macro-average: the tasks' fits differ in their seed pairs or confidence level")
    s, t = n_seeds.pop(), len(fits)
    per_seed = np.mean([fit.per_seed for fit in fits], axis=0)
    m = float(per_seed.mean())
    seed_part = float(np.var(per_seed, ddof=1)) / s
    # each task's item term and the noise of its estimate, recovered from the task's own Satterthwaite df
    item_terms = np.array([max(fit.se ** 2 - fit.v_seed / s, 0.0) for fit in fits])
    item_noise = np.array([max(fit.se ** 4 / fit.satterthwaite_df - (fit.v_seed / s) ** 2 / (s - 1), 0.0)
                           if term > 0.0 else 0.0 for fit, term in zip(fits, item_terms)])
    variance = seed_part + item_terms.sum() / t ** 2
    if not variance > 0.0:
        raise InputError("macro-average: the differences do not vary over seeds or items")
    satterthwaite = variance ** 2 / (seed_part ** 2 / (s - 1) + item_noise.sum() / t ** 4)
    df = float(interval_df(satterthwaite, variance, seed_part, s))
    se = math.sqrt(variance)
    level = levels.pop()
    half = float(special.stdtrit(df, 0.5 + level / 2)) * se
    return MacroAverage(variant_arm=variant_arm, n_tasks=t, n_seeds=s, difference=m,
                        per_seed=tuple(float(v) for v in per_seed), se=se, df=df, confidence_level=level,
                        confidence_interval=ConfidenceInterval(m - half, m + half),
                        p_value=float(2.0 * special.stdtr(df, -abs(m) / se)),
                        item_share=float(item_terms.sum() / t ** 2 / variance))
