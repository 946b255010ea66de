"""Many arms (or tasks) against one reference, for every metric: each comparison's verdict from Holm-adjusted
p-values across the family, so that "better" over many comparisons keeps its family-wise meaning.

One routine serves both kinds. Loss files: each evaluation set is its own family, and beside the verdict's
seed-and-document test two more families are adjusted separately, the seed-level paired t test on the per-seed
log PPL ratios (new seeds, these documents) and the document-level sign-flip test on d_i (models held fixed), each
with Holm (family-wise error) and Benjamini–Hochberg (false discovery rate). Item scores: every (arm, task)
comparison of a suite is one family, with a macro-average over the tasks per arm (`stats.tasks.macro_average`).
A comparison without a test (one seed pair, no spread) has no verdict from it and is left out of its family's
adjustment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from gatedv_stats.analysis.compare import decide, seed_document_fit, with_floor
from gatedv_stats.analysis.noise_floor import NoiseFloor
from gatedv_stats.analysis.perplexity import paired_group_effects, resampled_units
from gatedv_stats.analysis.task_scores import TaskComparison, task_comparison
from gatedv_stats.core import formatting as fmt
from gatedv_stats.core.defaults import DEFAULTS
from gatedv_stats.core.errors import InputError
from gatedv_stats.core.validation import check_n_resamples, check_open_unit
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.stats import metrics
from gatedv_stats.stats.multiple import adjust_p_values, holm
from gatedv_stats.stats.permutation import sign_flip_test
from gatedv_stats.stats.seed_document import SeedDocumentResult
from gatedv_stats.stats.seed_level import paired_t_interval
from gatedv_stats.stats.tasks import MacroAverage, macro_average
from gatedv_stats.stats.verdict import Verdict

# the p-value fields of a loss-file comparison adjusted, each within an evaluation set, and what their tests are called
FAMILIES = {"seed_document": "seed-and-document t test", "t": "seed-level t test", "permutation": "sign-flip test"}


@dataclass(frozen=True)
class ArmTest:
    """One arm against the reference, with raw and adjusted p-values (None where a test is undefined)."""

    arm: str
    eval_set: str | None
    unit: str  # "token" or "byte"
    n_pairs: int
    n_docs: int
    ppl_mean: float
    reference_ppl_mean: float
    delta_p: float
    improved_pairs: int
    nll_diff_mean: float  # D
    verdict: str  # better / worse / no detectable difference / equivalent, after Holm's adjustment
    nll_diff_seed_document_ci: list | None  # [low, high], unadjusted
    delta_p_seed_document_ci: list | None
    seed_document_p_value: float | None  # two-sided; None with fewer than 2 seed pairs
    seed_document_p_holm: float | None
    seed_document_p_bh: float | None
    tost_p_value: float | None  # with a smallest effect of interest
    t_p_value: float | None  # paired t on r_s, two-sided; None with fewer than 2 seed pairs
    t_p_holm: float | None
    t_p_bh: float | None
    permutation_p_value: float  # sign-flip on d_i, two-sided, models fixed
    permutation_p_holm: float
    permutation_p_bh: float


@dataclass(frozen=True)
class ArmsComparison:
    reference: str
    arms: tuple[ArmTest, ...]
    alpha: float
    sesoi: float | None
    n_resamples: int  # sign vectors per permutation test
    rng_seed: int  # of every permutation test
    notes: tuple[str, ...]  # the warnings among them
    warnings: tuple[str, ...] = ()  # arms whose documents' groups differ far beyond what they explain

    def to_dict(self) -> dict:
        return {"reference": self.reference, "alpha": self.alpha, "sesoi": self.sesoi,
                "permutation_resamples": self.n_resamples, "permutation_seed": self.rng_seed,
                "arms": [asdict(arm) for arm in self.arms], "notes": list(self.notes),
                "warnings": list(self.warnings)}

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([asdict(arm) for arm in self.arms])

    def summary(self) -> str:
        lines = [f"every arm against {self.reference} ({len(self.arms)} comparisons; p-values two-sided, adjusted "
                 f"within each evaluation set with Holm (FWER) and Benjamini–Hochberg (FDR); * marks adjusted "
                 f"p ≤ {self.alpha:g}; verdicts use the Holm-adjusted seed-and-document p)"]
        header = ("arm", "pairs", "PPL", "ΔP", "improved", "ΔP interval (seeds, docs)", "verdict", "p", "Holm", "BH",
                  "t p", "Holm", "perm p", "Holm")
        for eval_set in dict.fromkeys(arm.eval_set for arm in self.arms):
            rows = [self._row(arm) for arm in self.arms if arm.eval_set == eval_set]
            lines += ["", f"{fmt.eval_set_name(eval_set)}:", *fmt.text_table(header, rows, "lrrrrllrrrrrrr")]
        lines += ["", "p: seeds and documents sampled; t p: new seeds on these documents; perm p: models fixed"]
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)

    def _row(self, arm: ArmTest) -> tuple[str, ...]:
        ci = arm.delta_p_seed_document_ci
        interval = "—" if ci is None else fmt.format_delta_p_interval((ci[0], ci[1]))
        return (arm.arm, str(arm.n_pairs), fmt.format_ppl(arm.ppl_mean), fmt.format_delta_p(arm.delta_p),
                fmt.format_pairs(arm.improved_pairs, arm.n_pairs), interval, arm.verdict,
                self._p(arm.seed_document_p_value), self._p(arm.seed_document_p_holm, True),
                self._p(arm.seed_document_p_bh, True), self._p(arm.t_p_value), self._p(arm.t_p_holm, True),
                self._p(arm.permutation_p_value), self._p(arm.permutation_p_holm, True))

    def _p(self, value: float | None, mark: bool = False) -> str:
        """A p-value, "*" after an adjusted one at most alpha (a space keeps the digits aligned)."""
        if value is None:
            return "n/a "
        return f"{value:.3g}{'*' if mark and value <= self.alpha else ' '}"


@dataclass(frozen=True)
class TaskSuite:
    """Every (arm, task) comparison of a suite, verdicts Holm-adjusted across all of them, and a macro-average per
    variant arm (None where a task has no interval or the tasks' seeds differ)."""

    reference: str
    metric: str
    results: tuple[TaskComparison, ...]  # verdicts after Holm's adjustment across the suite
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
        rows = [(result.variant_arm, result.task, *result.cells(proportion), "n/a" if p is None else f"{p:.3g}",
                 "n/a" if holm is None else f"{holm:.3g}")
                for result, p, holm in zip(self.results, self.p_values, self.p_holm)]
        lines += ["", *fmt.text_table(header, rows, "llrrrrrllrr")]
        for macro in self.macro:
            lines.append(f"macro-average over {macro.n_tasks} tasks ({macro.variant_arm}): "
                         f"{fmt.format_difference(macro.difference, proportion)}, "
                         f"{fmt.format_level(macro.confidence_level)} interval "
                         f"{fmt.format_difference_interval(macro.confidence_interval, proportion)} "
                         f"(SE {fmt.format_difference(macro.se, proportion, signed=False)}, df {macro.df:.1f}), "
                         f"p = {macro.p_value:.3g}")
        return "\n".join(lines + [f"note: {note}" for note in self.notes])


def compare_arms(pairs: Sequence[Paired], *, alpha: float = DEFAULTS.alpha, sesoi: float | None = None,
                 cluster: str | None = None, n_permutations: int = DEFAULTS.n_permutations,
                 rng_seed: int = DEFAULTS.rng_seed, floor: NoiseFloor | None = None,
                 allow_mismatch: Sequence[str] = ()) -> ArmsComparison | TaskSuite:
    """Each pair's variant against its baseline (the shared reference), verdicts adjusted with Holm over each
    family: the arms of an evaluation set for loss files, every (arm, task) comparison for item scores. `sesoi`
    and `cluster` as in `compare`; `n_permutations` sign vectors per sign-flip test of a loss-file comparison;
    `floor` and `allow_mismatch` as in `compare`, for every comparison."""
    check_open_unit("alpha", alpha)
    check_n_resamples(n_permutations, minimum=1, parameter="n_permutations")
    if not pairs:
        raise InputError("no arms to compare")
    references, scales = {pair.baseline_arm for pair in pairs}, {pair.scale.metric for pair in pairs}
    if len(references) != 1 or len(scales) != 1:
        raise InputError("the comparisons must share one reference arm and one metric")
    if sesoi is not None:
        pairs[0].scale.check_sesoi(sesoi)
    pairs = [with_floor(pair, floor, allow_mismatch) for pair in pairs]
    # a task without the cluster column has its items as the sampled units; loss files must all have it
    clusters = [cluster if pair.scale.log_ratio or cluster in pair.doc_columns else None for pair in pairs]
    fits = [seed_document_fit(pair, pair.labels(column), 1.0 - alpha, floor=floor)
            for pair, column in zip(pairs, clusters)]
    if pairs[0].scale.log_ratio:
        return _arms(pairs, fits, alpha=alpha, sesoi=sesoi, cluster=cluster, n_permutations=n_permutations,
                     rng_seed=rng_seed)
    return _suite(pairs, fits, alpha=alpha, sesoi=sesoi, cluster=cluster)


def holm_verdicts(pairs: Sequence[Paired], fits: Sequence[SeedDocumentResult | None],
                  sesoi: float | None = None) -> list[Verdict | None]:
    """The verdict of each of several comparisons with one reference, from its Holm-adjusted seed-and-document p
    (and, with a smallest effect of interest, its Holm-adjusted equivalence p) over those that have a test; None
    where a comparison has none."""
    raw = [None if fit is None else decide(fit, pair, sesoi) for pair, fit in zip(pairs, fits)]
    p_holm = holm([None if decided is None else decided.p_value for decided in raw])
    tost_holm = holm([None if decided is None else decided.tost_p_value for decided in raw])
    return [None if fit is None else decide(fit, pair, sesoi, p_value=p, tost_p_value=tost)
            for pair, fit, p, tost in zip(pairs, fits, p_holm, tost_holm)]


def _arms(pairs: Sequence[Paired], fits: list[SeedDocumentResult | None], *, alpha: float, sesoi: float | None,
          cluster: str | None, n_permutations: int, rng_seed: int) -> ArmsComparison:
    rows = [_raw_test(pair, fit, sesoi=sesoi, cluster=cluster, n_permutations=n_permutations, rng_seed=rng_seed)
            for pair, fit in zip(pairs, fits)]
    notes = []
    for eval_set in dict.fromkeys(row["eval_set"] for row in rows):
        family = [k for k, row in enumerate(rows) if row["eval_set"] == eval_set]
        notes += _adjust_family([rows[k] for k in family])
        verdicts = holm_verdicts([pairs[k] for k in family], [fits[k] for k in family], sesoi)
        for k, decided in zip(family, verdicts):
            rows[k]["verdict"] = "no detectable difference" if decided is None else decided.verdict
    notes += [f"{pair.variant_arm}: {note}" for pair in pairs for note in pair.notes]
    warnings = [f"{pair.variant_arm}: {test.warning()}" for pair in pairs
                for test in paired_group_effects(pair, cluster) if test.flagged]
    return ArmsComparison(reference=pairs[0].baseline_arm, arms=tuple(ArmTest(**row) for row in rows),
                          alpha=alpha, sesoi=sesoi, n_resamples=n_permutations, rng_seed=rng_seed,
                          notes=tuple(dict.fromkeys(notes + warnings)), warnings=tuple(warnings))


def adjust_if_all(p_values: Sequence[float | None]) -> dict[str, list[float]] | None:
    """The Holm and BH adjusted p-values (`stats.multiple.adjust_p_values`), or None when a comparison lacks the
    test."""
    present = [value for value in p_values if value is not None]
    return adjust_p_values(present) if len(present) == len(p_values) else None


def _adjust_family(rows: list[dict]) -> list[str]:
    """Fill the Holm and BH adjusted p-values of the rows of one evaluation set (in place); notes."""
    notes = []
    for family in FAMILIES:
        adjusted = adjust_if_all([row[f"{family}_p_value"] for row in rows])
        if adjusted is None:
            missing = [row["arm"] for row in rows if row[f"{family}_p_value"] is None]
            notes.append(f"no {FAMILIES[family]} for {', '.join(missing)} (fewer than 2 seed pairs, or no spread); "
                         "its family is not adjusted")
        for k, row in enumerate(rows):
            row[f"{family}_p_holm"] = None if adjusted is None else adjusted["holm"][k]
            row[f"{family}_p_bh"] = None if adjusted is None else adjusted["bh"][k]
    return notes


def _raw_test(pair: Paired, fit: SeedDocumentResult | None, *, sesoi: float | None, cluster: str | None,
              n_permutations: int, rng_seed: int) -> dict:
    baseline = metrics.arm_summary(pair.baseline_arm, pair.seeds, pair.baseline, pair.n_units)
    variant = metrics.arm_summary(pair.variant_arm, pair.seeds, pair.variant, pair.n_units)
    log_ratios = variant.nll - baseline.nll
    tested = None if fit is None else decide(fit, pair, sesoi)
    units, units_n = resampled_units(pair, pair.labels(cluster))
    return {
        "arm": pair.variant_arm, "eval_set": pair.eval_set, "unit": pair.unit, "n_pairs": pair.n_pairs,
        "n_docs": pair.n_docs, "ppl_mean": variant.ppl_mean, "reference_ppl_mean": baseline.ppl_mean,
        "delta_p": metrics.delta_p(baseline.ppl_mean, variant.ppl_mean),
        "improved_pairs": metrics.improved_pairs(baseline.ppl, variant.ppl),
        "nll_diff_mean": metrics.nll_diff_mean(baseline.nll, variant.nll),
        "nll_diff_seed_document_ci": None if fit is None else list(fit.confidence_interval),
        "delta_p_seed_document_ci": None if fit is None else list(fit.delta_p_interval),
        "seed_document_p_value": None if fit is None else fit.p_value,
        "tost_p_value": None if tested is None else tested.tost_p_value,
        "t_p_value": (paired_t_interval(log_ratios).p_value
                      if log_ratios.size >= 2 and np.ptp(log_ratios) > 0 else None),
        "permutation_p_value": sign_flip_test(units, units_n, n_permutations=n_permutations,
                                              rng_seed=rng_seed).p_value,
    }


def _suite(pairs: Sequence[Paired], fits: list[SeedDocumentResult | None], *, alpha: float, sesoi: float | None,
           cluster: str | None) -> TaskSuite:
    verdicts = holm_verdicts(pairs, fits, sesoi)
    results = [task_comparison(pair, fit, decided, cluster=cluster if cluster in pair.doc_columns else None,
                               confidence_level=1.0 - alpha)
               for pair, fit, decided in zip(pairs, fits, verdicts)]
    raw = [None if fit is None else fit.p_value for fit in fits]
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
    if cluster is not None:
        notes += [f"{pair.task}: no {cluster} column; its items are the sampled units" for pair in pairs
                  if cluster not in pair.doc_columns]
    notes += [note for result in results for note in (f"{result.task}: {text}" for text in result.notes)]
    return TaskSuite(reference=pairs[0].baseline_arm, metric=pairs[0].metric, results=tuple(results),
                     p_values=tuple(raw), p_holm=tuple(holm(raw)), macro=tuple(macros), alpha=alpha,
                     notes=tuple(dict.fromkeys(notes)))
