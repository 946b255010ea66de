"""A suite of downstream tasks: a verdict per task, Holm-adjusted across the suite, and the macro-average over tasks.

The macro-average M = Σ_t D_t / T of the tasks' differences D_t is the mean over seed pairs of the per-seed
macro-averages M_s = Σ_t D_ts / T. The tasks are scored by the same trained models, so a seed's effect is shared
across tasks; their items are distinct, so the item terms are independent:

    Var̂(M) = V_M / S + Σ_t Var̂_item,t / T²,

with V_M the variance over seed pairs of M_s (which holds every task's seed and interaction terms and their
covariances across tasks) and Var̂_item,t the item term of task t's own fit (0 where its pre-test pools it), on
Satterthwaite's df under the few-seed guard. The derivation is in docs/statistics.md ("Downstream tasks").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np
from scipy import special

from gatedv_stats.core import formatting as fmt
from gatedv_stats.core.errors import InputError
from gatedv_stats.core.validation import check_confidence_level
from gatedv_stats.pairing.items import PairedScores
from gatedv_stats.stats.intervals import ConfidenceInterval
from gatedv_stats.stats.item_scores import (
    ItemScoreResult,
    compare_items,
    format_difference,
    format_difference_interval,
    format_scores,
    item_verdict,
)
from gatedv_stats.stats.multiple import adjust_p_values
from gatedv_stats.stats.seed_document import SeedDocumentResult


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
        data = asdict(self)
        data["confidence_interval"] = list(self.confidence_interval)
        data["per_seed"] = list(self.per_seed)
        return data


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
    df = min(satterthwaite, (s - 1) * variance / seed_part) if seed_part > 0.0 else satterthwaite
    se = math.sqrt(variance)
    level = levels.pop()
    half = float(special.stdtrit(df, 0.5 + level / 2)) * se
    return MacroAverage(variant_arm=variant_arm, n_tasks=t, n_seeds=s, difference=m,
                        per_seed=tuple(float(v) for v in per_seed), se=se, df=df, confidence_level=level,
                        confidence_interval=ConfidenceInterval(m - half, m + half),
                        p_value=float(2.0 * special.stdtr(df, -abs(m) / se)),
                        item_share=float(item_terms.sum() / t ** 2 / variance))


@dataclass(frozen=True)
class TaskSuite:
    """Every (arm, task) comparison of a suite, verdicts Holm-adjusted across all of them, and a macro-average per
    variant arm (None where a task has no interval or the tasks' seeds differ)."""

    reference: str
    metric: str
    results: tuple[ItemScoreResult, ...]  # verdicts after Holm's adjustment across the suite
    p_values: tuple[float | None, ...]  # raw two-sided, per result
    p_holm: tuple[float | None, ...]
    macro: tuple[MacroAverage, ...]
    alpha: float
    notes: tuple[str, ...]

    def to_dict(self) -> dict:
        return {"reference": self.reference, "metric": self.metric, "alpha": self.alpha, "adjustment": "holm",
                "tasks": [{**result.to_dict(), "p_holm": holm} for result, holm in zip(self.results, self.p_holm)],
                "macro_average": [macro.to_dict() for macro in self.macro], "notes": list(self.notes)}

    def summary(self) -> str:
        proportion = all(result.proportion for result in self.results)
        what = "accuracy" if proportion else "mean score"
        lines = [f"{self.metric}: every task against {self.reference} ({len(self.results)} comparisons; verdicts use "
                 f"Holm-adjusted p across them; intervals generalise over training seeds and items)"]
        header = ("arm", "task", "seeds", "items", f"{self.reference} {what}", f"variant {what}", "difference",
                  f"{fmt.format_level(1 - self.alpha)} interval", "verdict", "p", "Holm")
        rows = [self._row(result, p, holm, proportion) for result, p, holm
                in zip(self.results, self.p_values, self.p_holm)]
        lines += ["", *fmt.text_table(header, rows, "llrrrrrllrr")]
        for macro in self.macro:
            lines.append(f"macro-average over {macro.n_tasks} tasks ({macro.variant_arm}): "
                         f"{format_difference(macro.difference, proportion)}, "
                         f"{fmt.format_level(macro.confidence_level)} interval "
                         f"{format_difference_interval(macro.confidence_interval, proportion)} "
                         f"(SE {format_difference(macro.se, proportion, signed=False)}, df {macro.df:.1f}), "
                         f"p = {macro.p_value:.3g}")
        return "\n".join(lines + [f"note: {note}" for note in self.notes])

    @staticmethod
    def _row(result: ItemScoreResult, p: float | None, holm: float | None, proportion: bool) -> tuple[str, ...]:
        interval = "—" if result.interval is None else format_difference_interval(
            result.interval.confidence_interval, proportion)
        return (result.variant_arm, result.task, str(result.n_seeds), f"{result.n_items:,}",
                format_scores(result.baseline_per_seed, proportion), format_scores(result.variant_per_seed, proportion),
                format_difference(result.difference, proportion), interval, result.verdict_text,
                "n/a" if p is None else f"{p:.3g}", "n/a" if holm is None else f"{holm:.3g}")


def compare_tasks(pairs: Sequence[PairedScores], *, confidence_level: float = 0.95, sesoi: float | None = None,
                  cluster: str | None = None) -> TaskSuite:
    """Each pair (one arm against the shared reference on one task) compared, verdicts adjusted with Holm across
    the whole suite (and, with `sesoi`, equivalence p-values likewise); a macro-average per variant arm."""
    confidence_level = check_confidence_level(confidence_level)
    if not pairs:
        raise InputError("no tasks to compare")
    references, metrics = {pair.baseline_arm for pair in pairs}, {pair.metric for pair in pairs}
    if len(references) != 1 or len(metrics) != 1:
        raise InputError("the tasks must share one reference arm and one metric")
    results = [compare_items(pair, confidence_level=confidence_level, sesoi=sesoi,
                             cluster=cluster if cluster in pair.groups.columns else None) for pair in pairs]
    raw = [None if result.interval is None else result.interval.p_value for result in results]
    holm = _holm(raw)
    tost_holm = _holm([None if result.verdict is None else result.verdict.tost_p_value for result in results])
    adjusted_results = []
    for pair, result, p, tost_p in zip(pairs, results, holm, tost_holm):
        if result.interval is not None:
            result = replace(result, verdict=item_verdict(result.interval, pair, sesoi, p_value=p, tost_p=tost_p))
        adjusted_results.append(result)
    macros, notes = _macros(adjusted_results)
    if cluster is not None:
        notes += [f"{pair.task}: no {cluster} column; its items are the sampled units" for pair in pairs
                  if cluster not in pair.groups.columns]
    notes += [note for result in adjusted_results for note in (f"{result.task}: {text}" for text in result.notes)]
    return TaskSuite(reference=pairs[0].baseline_arm, metric=pairs[0].metric, results=tuple(adjusted_results),
                     p_values=tuple(raw), p_holm=tuple(holm), macro=tuple(macros), alpha=1.0 - confidence_level,
                     notes=tuple(dict.fromkeys(notes)))


def _holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm-adjusted p-values over those given; None stays None."""
    given = [p for p in p_values if p is not None]
    adjusted = iter(adjust_p_values(given)["holm"] if given else [])
    return [None if p is None else next(adjusted) for p in p_values]


def _macros(results: Sequence[ItemScoreResult]) -> tuple[list[MacroAverage], list[str]]:
    macros, notes = [], []
    for arm in dict.fromkeys(result.variant_arm for result in results):
        mine = [result for result in results if result.variant_arm == arm]
        if len(mine) < 2:
            continue
        if len({result.seeds for result in mine}) != 1 or any(result.interval is None for result in mine):
            notes.append(f"{arm}: no macro-average interval: the tasks need the same paired seeds (2 or more)")
            continue
        macros.append(macro_average([result.interval for result in mine if result.interval is not None],
                                    variant_arm=arm))
    return macros, notes


def compare_task_pairs(pairs: Sequence[PairedScores], *, confidence_level: float = 0.95, sesoi: float | None = None,
                       cluster: str | None = None) -> ItemScoreResult | TaskSuite:
    """One task: its full comparison; several: the suite."""
    if len(pairs) == 1:
        return compare_items(pairs[0], confidence_level=confidence_level, sesoi=sesoi, cluster=cluster)
    return compare_tasks(pairs, confidence_level=confidence_level, sesoi=sesoi, cluster=cluster)
