"""The analysis of a whole experiment, run once: every comparison, test and adjustment a report shows.

`analyze_experiment` groups the evaluated runs (`gatedv_stats.pairing.selection`), summarises every arm of every
group, pairs each variant with the reference and runs `analyze` on it exactly once, adjusts the p-values of the
arms that share a reference, selects learning rates, compares training curves and tabulates the inference-time
swaps. The report sections only format what it returns.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm import tqdm

from gatedv_stats.analysis.arms import adjust_if_all, compare_arms, holm_verdicts
from gatedv_stats.analysis.comparison import NO_DIFFERENCE, ArmsComparison
from gatedv_stats.analysis.noise_floor import NoiseFloor
from gatedv_stats.analysis.pair import PairAnalysis, analyze
from gatedv_stats.analysis.training import CurveAnalysis, LRSelectionAnalysis, analyze_curves, analyze_lr_selection
from gatedv_stats.core.defaults import DEFAULTS
from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.core.validation import check_confidence_level, check_n_resamples, check_open_unit, check_seed
from gatedv_stats.core.workers import spawn_pool
from gatedv_stats.io.discovery import ExperimentInputs
from gatedv_stats.io.runfiles import Run
from gatedv_stats.pairing.pair import pair_runs, pair_with_reference
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.pairing.selection import (
    GATEDV,
    EvalGroup,
    add_unique,
    arm_order,
    choose_reference,
    eval_groups,
    group_sort_key,
    is_override,
    lr_of,
    mixed_eval_set,
    native_act,
    other_arms,
)
from gatedv_stats.stats.metrics import ArmSummary, paired_delta, perplexity, sample_sd, token_nll
from gatedv_stats.stats.multiple import adjust_p_values
from gatedv_stats.stats.scale import SCALES

BREAKDOWN_MIN_DOCS = 5
# Below this many loss sums (seeds × documents of the reference, summed over pairs) starting worker processes
# costs more than it saves.
PARALLEL_MIN_LOSS_SUMS = 1 << 20


@dataclass(frozen=True)
class AnalysisSettings:
    """The user's choices, one object for every entry point: the report, the statistics commands, the Python API.

    Parameters
    ----------
    reference : str or None
        The reference arm (None: "baseline" when present).
    n_resamples : int
        Document-bootstrap resamples.
    rng_seed : int
        The seed of every resampling.
    confidence_level : float
        Of every interval; α = 1 − it for the verdicts and their Holm adjustment.
    sesoi : float or None
        The smallest effect of interest (a relative ΔP; a difference in a score's units).
    cluster : str or None
        The unit column whose values are the sampled clusters.
    allow_mismatch : tuple of str
        Provenance fields that may differ between paired runs.
    unit : str
        "auto", "token" or "byte", as in `gatedv_stats.pairing.pair.pair_runs`.
    allow_unpaired : bool
        Drop seeds found in one arm only.
    metric : str or None
        The metric of item scores or score tables (None: acc_norm, acc, exact_match, whichever every file has).
    higher_is_better : bool or None
        A score table's direction, where its file records none.
    noise_floor : NoiseFloor or None
        The setup's seed variance, for verdicts from few seeds.

    Examples
    --------
    >>> settings = gv.AnalysisSettings(reference="baseline", n_resamples=200, sesoi=0.01)
    >>> settings.confidence_level, settings.unit
    (0.95, 'auto')
    """

    reference: str | None = None
    n_resamples: int = DEFAULTS.n_resamples
    rng_seed: int = DEFAULTS.rng_seed
    confidence_level: float = DEFAULTS.confidence_level
    sesoi: float | None = None
    cluster: str | None = None
    allow_mismatch: tuple[str, ...] = ()
    unit: str = "auto"
    allow_unpaired: bool = False
    metric: str | None = None  # the downstream tasks' metric (item-score files; None: acc_norm, acc, exact_match)
    higher_is_better: bool | None = None  # a score table's direction, where its file records none
    noise_floor: NoiseFloor | None = None  # the setup's seed variance, for verdicts from few seeds

    def __post_init__(self) -> None:
        check_n_resamples(self.n_resamples)
        check_seed(self.rng_seed, "rng_seed")
        check_confidence_level(self.confidence_level)
        if self.sesoi is not None:
            check_open_unit("sesoi", self.sesoi)


@dataclass(frozen=True)
class PairResult:
    """One variant against the reference within a group: its paired arrays and its analysis."""

    variant: str
    paired: Paired
    analysis: PairAnalysis


@dataclass(frozen=True)
class AdjustedPValues:
    """Holm and Benjamini–Hochberg adjusted p-values over the pairs of one group, in the pairs' order."""

    seed_document: dict | None  # {"holm": [...], "bh": [...]}; None when a pair has no seed-and-document test
    t: dict | None  # None when a pair has no seed-level t test
    permutation: dict
    verdicts: tuple[str, ...]  # each pair's verdict from its Holm-adjusted p-values, as `gatedv arms` decides


@dataclass(frozen=True)
class GroupAnalysis:
    """One evaluation set at one learning rate: every arm summarised, every variant against the reference."""

    group: EvalGroup
    summaries: dict  # arm -> ArmSummary
    deltas: dict  # (reference arm, arm) -> PairedDelta, against the reference and against gatedv
    pairs: tuple[PairResult, ...]
    left_out: tuple[tuple[str, str], ...]  # (variant, why it could not be paired)
    mixed: str | None  # why the group's runs are not one evaluation set
    adjusted: AdjustedPValues | None  # when two or more variants share the reference
    holds_reference: bool  # the reference arm and at least one other arm

    @property
    def compared(self) -> bool:
        """True when the group holds the reference with another arm and its runs are one evaluation set."""
        return self.holds_reference and self.mixed is None

    @property
    def verdicts(self) -> tuple[str, ...]:
        """Each pair's verdict: its own with one variant, else from the Holm-adjusted p-values over the group's
        variants (`analysis.arms.holm_verdicts`), so that every entry point gives the same answer."""
        if self.adjusted is None:
            return tuple(pair.analysis.comparison.verdict_text for pair in self.pairs)
        return self.adjusted.verdicts


@dataclass(frozen=True)
class SwapTable:
    """Inference-time swap (Table 9) on one evaluation set and rate: P̄ ± SD per trained arm × activation."""

    eval_set: str | None
    lr: float | None
    arms: tuple[str, ...]
    trained: dict  # arm -> the value activation it was trained with
    summaries: dict  # (arm, activation at inference) -> ArmSummary


@dataclass(frozen=True)
class ExperimentAnalysis:
    """Everything a report shows, computed once."""

    inputs: ExperimentInputs
    settings: AnalysisSettings
    reference: str | None
    groups: tuple[GroupAnalysis, ...]
    lr_selection: LRSelectionAnalysis
    curves: tuple[CurveAnalysis, ...]
    swaps: tuple[SwapTable, ...]
    tasks: ArmsComparison | None = None  # item scores or score tables, every arm against the reference

    def by_eval_set(self) -> list[tuple[str | None, list[GroupAnalysis]]]:
        """The groups of each evaluation set, sets in report order."""
        sets = dict.fromkeys(group.group.eval_set for group in self.groups)
        return [(eval_set, [g for g in self.groups if g.group.eval_set == eval_set]) for eval_set in sets]


def run_summary(arm: str, runs: list[Run]) -> ArmSummary:
    """P̄ and SD over the seeds of one arm, each run's NLL token-averaged over its own documents."""
    ordered = sorted(runs, key=lambda run: run.seed)
    nll = np.array([token_nll(run.docs["loss_sum"].to_numpy(), run.docs["n_targets"].to_numpy()) for run in ordered])
    ppl = perplexity(nll)
    return ArmSummary(arm=arm, seeds=np.array([run.seed for run in ordered], dtype=np.int64), nll=nll, ppl=ppl,
                      ppl_mean=float(ppl.mean()), ppl_sd=sample_sd(ppl))


def breakdown_column(paired: Paired) -> str | None:
    """Domain when at least two domains are large enough to stand alone, else length bins of n_bytes."""
    domains = paired.doc_columns.get("domain")
    if domains is not None and int((domains.value_counts() >= BREAKDOWN_MIN_DOCS).sum()) >= 2:
        return "domain"
    return "n_bytes" if "n_bytes" in paired.doc_columns else None


def analyze_experiment(inputs: ExperimentInputs, settings: AnalysisSettings = AnalysisSettings(), *,
                       progress: bool | None = None, workers: int | None = 1) -> ExperimentAnalysis:
    """Group, pair and analyze every comparison of the experiment once.

    `workers` > 1 (None: one per CPU) analyzes a large experiment's pairs on that many worker processes; each
    analysis depends on its pair and the settings alone, so where it runs changes no bit of the result. The
    workers are fresh interpreters (multiprocessing's "spawn"), so a script calling this must guard its entry
    point with `if __name__ == "__main__":`; where they cannot start, the pairs are analyzed here."""
    reference = choose_reference({run.arm for run in (*inputs.runs, *inputs.metric_runs)}, settings.reference)
    groups = eval_groups(inputs.runs)
    found = [_pair_group(group, reference, settings) for group in groups]
    pairs = [paired for group_pairs, _ in found for paired in group_pairs]
    with tqdm(total=len(pairs), desc="comparisons", unit="comparison", file=sys.stderr,
              disable=None if progress is None else not progress, leave=False) as bar:
        analyses = iter(_analyze_pairs(pairs, settings, workers, bar))
    analyzed = tuple(_group_analysis(group, reference, settings, group_pairs, left_out, analyses)
                     for group, (group_pairs, left_out) in zip(groups, found))
    return ExperimentAnalysis(inputs=inputs, settings=settings, reference=reference, groups=analyzed,
                              lr_selection=analyze_lr_selection(groups, inputs.curves),
                              curves=analyze_curves(inputs.curves, reference),
                              swaps=_swap_tables(inputs.runs, reference),
                              tasks=experiment_tasks(inputs.metric_runs, reference, metric=settings.metric,
                                                     confidence_level=settings.confidence_level))


def analyze_pair(paired: Paired, settings: AnalysisSettings,
                 errors: Mapping[str, Any] | None = None) -> PairAnalysis:
    """A report's analysis of one pair: `analyze` with the settings, D broken down by `breakdown_column`; under
    NumPy's floating-point error settings `errors` (the caller's `np.geterr()`) when given."""
    column = breakdown_column(paired)
    with np.errstate(**(errors or {})):
        return analyze(paired, n_resamples=settings.n_resamples, confidence_level=settings.confidence_level,
                       rng_seed=settings.rng_seed, by=(column,) if column else (), cluster=settings.cluster,
                       sesoi=settings.sesoi, floor=settings.noise_floor, allow_mismatch=settings.allow_mismatch)


def _analyze_pairs(pairs: list[Paired], settings: AnalysisSettings, workers: int | None,
                   bar: tqdm) -> list[PairAnalysis]:
    """Each pair's analysis, in order: on worker processes when asked to and the pairs are several and large
    (`analyze_pair` on fresh interpreters, under this process's floating-point error settings), else (or when the
    workers cannot start) in this process."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    workers = min(cpus if workers is None else workers, len(pairs))
    if workers >= 2 and sum(paired.baseline.size for paired in pairs) >= PARALLEL_MIN_LOSS_SUMS:
        try:
            with spawn_pool(workers) as pool:
                futures = [pool.submit(analyze_pair, paired, settings, np.geterr()) for paired in pairs]
                for _ in as_completed(futures):
                    bar.update()
                return [future.result() for future in futures]
        except BrokenProcessPool as error:
            warnings.warn(f"worker processes could not analyze the comparisons ({error}); analyzing them here")
            bar.reset()
    analyses = []
    for paired in pairs:
        analyses.append(analyze_pair(paired, settings))
        bar.update()
    return analyses


def _pair_group(group: EvalGroup, reference: str | None,
                settings: AnalysisSettings) -> tuple[list[Paired], list[tuple[str, str]]]:
    """Each variant of the group paired with the reference (when the group holds it and is one evaluation set),
    and the variants that could not be paired, with why."""
    pairs, left_out = [], []
    if reference in group.arms and len(group.arms) > 1 and _mixed(group, settings) is None:
        for variant in other_arms(group.arms, reference):
            try:
                pairs.append(pair_runs(group.arms[reference], group.arms[variant], unit=settings.unit,
                                       allow_unpaired=settings.allow_unpaired, allow_mismatch=settings.allow_mismatch))
            except InputError as error:
                left_out.append((variant, str(error)))
    return pairs, left_out


def _mixed(group: EvalGroup, settings: AnalysisSettings) -> str | None:
    """Why the group's runs are not one evaluation set, unless the user accepted differing eval-set hashes."""
    return None if "eval_set_sha256" in settings.allow_mismatch else mixed_eval_set(group.runs)


def _group_analysis(group: EvalGroup, reference: str | None, settings: AnalysisSettings, group_pairs: list[Paired],
                    left_out: list[tuple[str, str]], analyses: Iterator[PairAnalysis]) -> GroupAnalysis:
    summaries = {arm: run_summary(arm, runs) for arm, runs in group.arms.items()}
    deltas = {(ref, arm): paired_delta(summaries[ref], summaries[arm])
              for ref in (reference, GATEDV) if ref in summaries for arm in summaries if arm != ref}
    pairs = [PairResult(paired.variant_arm, paired, next(analyses)) for paired in group_pairs]
    return GroupAnalysis(group=group, summaries=summaries, deltas=deltas, pairs=tuple(pairs),
                         left_out=tuple(left_out), mixed=_mixed(group, settings),
                         adjusted=_adjust(pairs, settings.sesoi) if len(pairs) > 1 else None,
                         holds_reference=reference in group.arms and len(group.arms) > 1)


def _adjust(pairs: list[PairResult], sesoi: float | None) -> AdjustedPValues:
    analyses = [pair.analysis for pair in pairs]
    fits = [analysis.comparison.seed_document for analysis in analyses]
    decided = holm_verdicts([pair.paired for pair in pairs], fits, sesoi)
    return AdjustedPValues(
        seed_document=adjust_if_all([None if fit is None else fit.p_value for fit in fits]),
        t=adjust_if_all([None if analysis.seed_level is None else analysis.seed_level.t_interval.p_value
                         for analysis in analyses]),
        permutation=adjust_p_values([analysis.permutation.p_value for analysis in analyses]),
        verdicts=tuple(NO_DIFFERENCE if verdict is None else verdict.verdict for verdict in decided))


def _swap_tables(runs: tuple[Run, ...], reference: str | None) -> tuple[SwapTable, ...]:
    overrides = [run for run in runs if is_override(run)]
    keys = sorted({(run.eval_set, lr_of(run)) for run in overrides}, key=lambda key: group_sort_key(*key))
    tables = []
    for eval_set, lr in keys:
        swapped = [run for run in overrides if run.eval_set == eval_set and lr_of(run) == lr]
        arms = arm_order({run.arm for run in swapped}, reference)
        cells: dict = defaultdict(list)  # (arm, activation at inference) -> runs
        for run in runs:
            if run.eval_set == eval_set and lr_of(run) == lr and run.arm in arms:
                act = run.meta.get("value_act") or native_act(run.arm, run.meta)
                add_unique(cells[(run.arm, act)], run, f"evaluated with {run.meta.get('value_act')} values")
        tables.append(SwapTable(eval_set=eval_set, lr=lr, arms=tuple(arms),
                                trained={run.arm: native_act(run.arm, run.meta) or "unknown" for run in swapped},
                                summaries={key: run_summary(key[0], cell) for key, cell in cells.items()}))
    return tuple(tables)


PREFERRED_METRICS = ("acc_norm", "acc", "exact_match")  # a report's metric: the first of these every run has


def experiment_tasks(metric_runs: Sequence[Run], reference: str | None, *, metric: str | None = None,
                     confidence_level: float = DEFAULTS.confidence_level) -> ArmsComparison | None:
    """The report's scores: every arm against the reference on every task (or score table), on `metric` (default:
    the first of PREFERRED_METRICS that every run has, else the first they share); None without item scores or
    score tables."""
    if not metric_runs:
        if metric:
            raise ParameterError("metric", f"{metric!r} given, but the inputs hold no item-score files")
        return None
    shared = [name for name in metric_runs[0].meta["metrics"]
              if all(name in run.meta["metrics"] for run in metric_runs)]
    if not shared:
        raise InputError("the item-score files share no metric, so the report cannot compare their tasks")
    if metric and metric not in shared:
        raise ParameterError("metric", f"{metric!r} is not a metric of every item-score file (shared: "
                             f"{', '.join(shared)})")
    metric = metric or next((name for name in PREFERRED_METRICS if name in shared), shared[0])
    if reference is None or reference not in {run.arm for run in metric_runs}:
        raise InputError(f"the item-score files hold no runs of the reference arm {reference!r} (arms: "
                         f"{', '.join(sorted({run.arm for run in metric_runs}))})")
    kinds = sorted({run.schema for run in metric_runs})
    if len(kinds) > 1:
        raise InputError("the inputs hold item-score files and score tables: a report compares one kind of score")
    scale = SCALES[kinds[0]](metric=metric)
    return compare_arms(pair_with_reference(metric_runs, reference, scale), alpha=1.0 - confidence_level)
