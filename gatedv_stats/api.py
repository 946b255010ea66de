"""The Python API (`import gatedv_stats as gv`): the same computations as the command line, for notebooks.

Every command that computes something is one call of these functions, so the same files and settings give the same
answer everywhere. Each serves loss files (perplexity) and, with `metric=`, the item-score files of downstream tasks
or the score tables of any pipeline through the same pairing, verdict, adjustment and plan; `pair` says the forms
the data of a comparison can take. A bad argument raises `ParameterError` naming the parameter (`baseline_arm`), bad
input an `InputError` naming the file, row or field.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np

from gatedv_stats.analysis.arms import compare_arms
from gatedv_stats.analysis.compare import compare as compare_pair
from gatedv_stats.analysis.experiment import AnalysisSettings
from gatedv_stats.analysis.ledger import LedgerSettings
from gatedv_stats.analysis.ledger_entries import next_ledger_level
from gatedv_stats.analysis.noise_floor import NoiseFloor, floor_from_runs, floor_from_studies
from gatedv_stats.analysis.pair import analyze as analyze_pair
from gatedv_stats.analysis.plan import floor_plan
from gatedv_stats.analysis.plan import plan as plan_pair
from gatedv_stats.analysis.sequential import check_ledger_of, check_unchanged, load_design, record_look
from gatedv_stats.analysis.sequential_design import SequentialDesign
from gatedv_stats.core.defaults import DEFAULTS
from gatedv_stats.core.errors import ParameterError
from gatedv_stats.core.validation import check_open_unit, renamed_keyword
from gatedv_stats.io.floorfiles import read_floor_file, write_floor_file
from gatedv_stats.io.runfiles import SkippedFile
from gatedv_stats.pairing.inputs import (
    Inputs,
    PathLike,
    Side,
    pairs_of,
    path_list,
    pilot_of,
    read_inputs,
    refuse_unused,
    runs_of,
    schemas_for,
)
from gatedv_stats.pairing.pair import pair_with_reference
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.pairing.selection import choose_reference, select_runs
from gatedv_stats.results import (
    FloorPlanResult,
    NoiseFloorResult,
    PlanResult,
    Result,
    Runs,
    SequentialResult,
    result_of,
)

__all__ = ["analyze", "arms", "compare", "load", "noise_floor", "pair", "plan", "report", "sequential"]

# A noise floor: the file `noise_floor` wrote, its result, or the floor itself.
Floor: TypeAlias = PathLike | NoiseFloor | NoiseFloorResult


def load(paths: PathLike | Sequence[PathLike], *, metric: str | None = None, higher_is_better: bool | None = None,
         eval_set: str | None = None, skipped: list[SkippedFile] | None = None) -> Runs:
    """Read run files, long tables and directories (searched recursively) into `Runs`.

    Parameters
    ----------
    paths
        Files, long tables or directories.
    metric
        Read the item-score files and score tables of this metric (default: loss files and item-score files).
    higher_is_better
        Which way the score is better, where its files do not say.
    eval_set
        Keep only the runs scored on that evaluation set.
    skipped
        A list that collects the unreadable files found in directories instead of failing on them (they are listed in
        the results' ``to_dict()`` too).

    Returns
    -------
    Runs
        The runs read, each with its units, provenance and SHA-256, and the files passed over.

    Examples
    --------
    >>> import gatedv_stats as gv
    >>> from gatedv_stats.testing import example_study
    >>> runs = gv.load(example_study(tmp_dir))
    >>> runs.arms
    ['baseline', 'gatedv']
    """
    runs = read_inputs(path_list(paths), schemas_for(metric, higher_is_better, every=True), skipped)
    if eval_set is not None:
        runs = select_runs(runs, eval_set=eval_set)
    return Runs(tuple(runs), skipped_once(skipped))


def pair(data: Inputs | Paired | None = None, *, baseline: Side | None = None, variant: Side | None = None,
         baseline_arm: str | None = None, variant_arm: str | None = None, metric: str | None = None,
         higher_is_better: bool | None = None, task: str | None = None, eval_set: str | None = None,
         n_targets: Sequence[int] | np.ndarray | None = None, allow_unpaired: bool = False,
         allow_mismatch: Sequence[str] = (), unit: str | None = None,
         skipped: list[SkippedFile] | None = None) -> Paired:
    """The paired arrays of two arms, from the data in any form the comparisons take.

    Parameters
    ----------
    data
        Inputs holding both arms: paths (files, long tables, directories), runs (`load`'s, or any list of `Run`) or
        a long DataFrame (columns arm, seed, doc_id, n_targets, loss_sum); or a `Paired`.
    baseline, variant
        Each arm's paths or runs, or its (seeds × documents) loss sums.
    baseline_arm, variant_arm
        The arms of `data` (default: the arm named "baseline", and the other arm), or the names of the arrays.
    metric
        Pair item scores of a downstream task ("acc") or a score table's scores on this metric, not loss files.
    higher_is_better
        Which way the score is better, where its files do not say.
    task
        The task to pair when the item scores hold several.
    eval_set
        Loss files only: the evaluation set to use.
    n_targets
        With loss sums given as arrays: the targets of each document (default 1).
    allow_unpaired
        Drop the seeds of one arm only instead of refusing them.
    allow_mismatch
        Compare although these recorded provenance fields differ.
    unit
        Loss files only: the unit of comparison, "auto", "token" or "byte".
    skipped
        A list that collects the unreadable files found in directories instead of failing on them.

    Returns
    -------
    Paired
        S paired seeds × N units (documents or items) of both arms, on the pair's scale, with its unit and task.

    Examples
    --------
    >>> paired = gv.pair(baseline=[[3.0, 2.0], [3.1, 2.1]], variant=[[2.9, 2.0], [3.0, 2.0]])
    >>> paired.n_pairs, paired.n_docs, paired.unit
    (2, 2, 'token')
    """
    pairs = pairs_of(data, baseline, variant, baseline_arm, variant_arm, metric, higher_is_better, allow_unpaired,
                     allow_mismatch, skipped, eval_set=eval_set, n_targets=n_targets, unit=unit)
    chosen = [paired for paired in pairs if task is None or paired.task == task]
    if len(chosen) != 1:
        tasks = ", ".join(str(paired.task) for paired in pairs)
        raise ParameterError("task", f"{'several tasks' if chosen else 'no task ' + repr(task)} in the item "
                             f"scores ({tasks}): choose one with {{task}}", leading=False)
    return chosen[0]


def compare(data: Inputs | Paired | None = None, *, baseline: Side | None = None, variant: Side | None = None,
            baseline_arm: str | None = None, variant_arm: str | None = None, metric: str | None = None,
            higher_is_better: bool | None = None, eval_set: str | None = None,
            n_targets: Sequence[int] | np.ndarray | None = None, n_resamples: int | None = None,
            confidence_level: float = DEFAULTS.confidence_level, rng_seed: int | None = None, method: str | None = None,
            sesoi: float | None = None, cluster: str | None = None, allow_unpaired: bool = False,
            allow_mismatch: Sequence[str] = (), unit: str | None = None, noise_floor: Floor | None = None,
            skipped: list[SkippedFile] | None = None, progress: bool | None = False) -> Result:
    """The verdict on two arms, accounting for training seeds and units, then the figures of their scale.

    Loss files (perplexity, `gatedv bootstrap`): ΔP, D with its document bootstrap (models fixed) and the win rate.
    Scores (`metric`): per task the difference in the metric's units, the seed permutation test and unit counts;
    several tasks give the suite, Holm- and BH-adjusted across tasks, with a macro-average.

    Parameters
    ----------
    data
        The data, as in `pair`.
    baseline, variant
        As in `pair`.
    baseline_arm, variant_arm, metric, eval_set, unit
        As in `pair`.
    higher_is_better
        As in `pair`.
    n_targets
        As in `pair`.
    n_resamples
        Loss files only: the draws of the document bootstrap (default 2000).
    confidence_level
        The level of every interval and of the verdict (0.95: α = 0.05, two-sided).
    rng_seed
        The seed of the bootstrap's draws.
    method
        Loss files only: the bootstrap interval, "percentile" (default) or "bca".
    sesoi
        The smallest effect of interest (a relative ΔP for perplexity, a difference in the metric's units for a
        score), so the verdict can say "equivalent".
    cluster
        A unit column (a document's domain, an item's subtask) whose values are the sampled units.
    allow_unpaired
        As in `pair`.
    allow_mismatch
        As in `pair`.
    noise_floor
        The setup's noise floor (a file `noise_floor` wrote, or its result): its seed variance gives one seed pair
        a verdict and is pooled with the study's own from two on; a floor of another setup is refused unless the
        differing field is in `allow_mismatch`.
    skipped
        As in `pair`.
    progress
        Show the bootstrap's progress bar (None: only on a terminal).

    Returns
    -------
    Result
        A `ComparisonResult` for one pair (one task), an `ArmsResult` for the tasks of a suite.

    Examples
    --------
    >>> result = gv.compare(example_study(tmp_dir), baseline_arm="baseline", variant_arm="gatedv", n_resamples=200)
    >>> result.verdict_text, float(result.to_frame()["delta_p"].iloc[0]) < 0
    ('better', True)
    """
    settings = _settings(metric, higher_is_better, n_resamples=n_resamples, rng_seed=rng_seed, method=method,
                         eval_set=eval_set, unit=unit, n_targets=n_targets, confidence_level=confidence_level)
    pairs = pairs_of(data, baseline, variant, baseline_arm, variant_arm, metric, higher_is_better, allow_unpaired,
                     allow_mismatch, skipped, eval_set=eval_set, n_targets=n_targets, unit=unit)
    shared: dict[str, Any] = {"sesoi": sesoi, "cluster": cluster, "floor": floor_of(noise_floor),
                              "allow_mismatch": allow_mismatch}
    if len(pairs) > 1:  # the tasks of a suite
        result: object = compare_arms(pairs, alpha=1.0 - confidence_level, **shared)
    else:
        result = compare_pair(pairs[0], n_resamples=settings.n_resamples, confidence_level=confidence_level,
                              rng_seed=settings.rng_seed, method=method or "percentile", progress=progress, **shared)
    return result_of(result, pairs, skipped_once(skipped))


def analyze(data: Inputs | Paired | None = None, *, baseline: Side | None = None, variant: Side | None = None,
            baseline_arm: str | None = None, variant_arm: str | None = None, metric: str | None = None,
            higher_is_better: bool | None = None, eval_set: str | None = None,
            n_targets: Sequence[int] | np.ndarray | None = None, n_resamples: int | None = None,
            confidence_level: float = DEFAULTS.confidence_level, rng_seed: int | None = None,
            n_permutations: int | None = None, by: Sequence[str] | None = None, bins: int | None = None,
            min_docs: int | None = None, sesoi: float | None = None, cluster: str | None = None,
            allow_unpaired: bool = False, allow_mismatch: Sequence[str] = (), unit: str | None = None,
            noise_floor: Floor | None = None, skipped: list[SkippedFile] | None = None,
            progress: bool | None = False) -> Result:
    """Everything about one pair of arms (`gatedv analyze`).

    Every scale: the verdict, the sign-flip permutation test on the per-unit differences and D broken down `by`
    unit columns. Loss files also: seed-level tests, BCa and bits per byte; a score's comparison holds its own (the
    seed permutation test, McNemar). Scores over several tasks give `compare`'s suite.

    Parameters
    ----------
    data
        The data, as in `pair`.
    baseline, variant
        As in `compare`.
    baseline_arm, variant_arm, metric, eval_set, unit, cluster
        As in `compare`.
    higher_is_better, progress
        As in `compare`.
    n_targets
        As in `compare`.
    n_resamples, rng_seed
        As in `compare`, for item scores too.
    confidence_level
        As in `compare`.
    n_permutations
        The sign vectors of the sign-flip permutation test (default 10000).
    by
        The unit columns D is broken down by (a document's domain, an item's subtask).
    bins
        The quantile bins of a numeric `by` column (default 4).
    min_docs
        The fewest units of a group (default 5); smaller groups are pooled.
    sesoi
        As in `compare`.
    allow_unpaired
        As in `compare`.
    allow_mismatch
        As in `compare`.
    noise_floor
        As in `compare`.
    skipped
        As in `compare`.

    Returns
    -------
    Result
        An `AnalysisResult` for one pair (one task), an `ArmsResult` for the tasks of a suite.

    Examples
    --------
    >>> result = gv.analyze(example_study(tmp_dir), baseline_arm="baseline", variant_arm="gatedv", by=["domain"],
    ...                     n_resamples=200, n_permutations=200)
    >>> result.comparison.verdict_text, [breakdown.column for breakdown in result.breakdowns]
    ('better', ['domain'])
    """
    settings = _settings(metric, higher_is_better, ("n_resamples", "rng_seed", "n_permutations"),
                         n_resamples=n_resamples, rng_seed=rng_seed, confidence_level=confidence_level,
                         cluster=cluster, eval_set=eval_set, unit=unit, n_targets=n_targets)
    pairs = pairs_of(data, baseline, variant, baseline_arm, variant_arm, metric, higher_is_better, allow_unpaired,
                     allow_mismatch, skipped, eval_set=eval_set, n_targets=n_targets, unit=unit)
    shared: dict[str, Any] = {"sesoi": sesoi, "cluster": cluster, "floor": floor_of(noise_floor),
                              "allow_mismatch": allow_mismatch}
    if len(pairs) > 1:  # the tasks of a suite: each comparison's statistics are its own
        if by:
            raise ParameterError("by", "breaks one comparison down, and the scores hold several tasks ("
                                 f"{', '.join(str(paired.task) for paired in pairs)}): give the files of one task")
        return result_of(compare_arms(pairs, alpha=1.0 - confidence_level, **shared), pairs, skipped_once(skipped))
    result = analyze_pair(pairs[0], n_resamples=settings.n_resamples, confidence_level=confidence_level,
                          rng_seed=settings.rng_seed, n_permutations=_or(n_permutations, DEFAULTS.n_permutations),
                          by=tuple(by or ()), bins=_or(bins, 4), min_docs=_or(min_docs, 5), progress=progress, **shared)
    return result_of(result, pairs[0], skipped_once(skipped))


@renamed_keyword("n_resamples", "n_permutations")
def arms(data: Inputs, *, reference: str | None = None, metric: str | None = None, higher_is_better: bool | None = None,
         eval_set: str | None = None, alpha: float = DEFAULTS.alpha, n_permutations: int | None = None,
         rng_seed: int | None = None, sesoi: float | None = None, cluster: str | None = None,
         allow_unpaired: bool = False, allow_mismatch: Sequence[str] = (), unit: str | None = None,
         noise_floor: Floor | None = None, skipped: list[SkippedFile] | None = None) -> Result:
    """Every arm against a reference (`gatedv arms`): p-values adjusted by Holm and BH, verdicts from Holm's.

    Loss files: per evaluation set, with p-values of three families (seed-and-document, seed-level t, sign-flip).
    Scores: every (arm, task) comparison adjusted across all of them, with a macro-average per arm.

    Parameters
    ----------
    data
        Inputs holding every arm: paths, runs or a long DataFrame.
    reference
        The arm every other arm is compared with (default: the arm named "baseline").
    metric, unit, cluster
        As in `compare`.
    higher_is_better
        As in `compare`.
    eval_set
        Loss files only: keep only the runs of this evaluation set (default: every set, compared per set).
    alpha
        The family-wise error rate of the Holm-adjusted verdicts (default 0.05).
    n_permutations
        The sign vectors of each sign-flip test (default 10000); deprecated name `n_resamples`, for one release.
    rng_seed
        The seed of the sign vectors.
    sesoi
        As in `compare`.
    allow_unpaired
        As in `pair`.
    allow_mismatch
        As in `pair`.
    noise_floor
        As in `compare`.
    skipped
        As in `pair`.

    Returns
    -------
    Result
        An `ArmsResult`: one row per compared arm (and task) with its estimate, interval, raw, Holm- and
        BH-adjusted p-values and verdict.

    Examples
    --------
    >>> result = gv.arms(example_study(tmp_dir), reference="baseline", n_permutations=200)
    >>> result.to_frame()[["arm", "verdict"]].values.tolist()
    [['gatedv', 'better']]
    """
    check_open_unit("alpha", alpha)
    settings = _settings(metric, higher_is_better, n_permutations=n_permutations, rng_seed=rng_seed,
                         eval_set=eval_set, unit=unit, reference=reference, confidence_level=1.0 - alpha)
    runs, scale = runs_of(data, metric, higher_is_better, skipped)
    runs = select_runs(runs, eval_set=eval_set)
    chosen = settings.reference or choose_reference({run.arm for run in runs}, None)
    if chosen is None:
        raise ParameterError("reference", "name the arm every other arm is compared with (no arm is named 'baseline')")
    pairs = pair_with_reference(runs, chosen, scale, allow_unpaired=allow_unpaired,
                                allow_mismatch=tuple(allow_mismatch), unit=unit or "auto")
    result = compare_arms(pairs, alpha=alpha, n_permutations=_or(n_permutations, DEFAULTS.n_permutations),
                          rng_seed=settings.rng_seed, sesoi=sesoi, cluster=cluster, floor=floor_of(noise_floor),
                          allow_mismatch=allow_mismatch)
    return result_of(result, pairs, skipped_once(skipped))


def plan(data: Inputs | Paired | None = None, *, effect: float, metric: str | None = None,
         higher_is_better: bool | None = None, alpha: float | None = None, power: float = DEFAULTS.power,
         baseline_arm: str | None = None, variant_arm: str | None = None, eval_set: str | None = None,
         allow_unpaired: bool = False, allow_mismatch: Sequence[str] = (), unit: str | None = None,
         noise_floor: Floor | None = None, ledger: PathLike | None = None,
         skipped: list[SkippedFile] | None = None) -> Result:
    """Seed pairs and units needed to detect `effect` with `power`, from pilot runs of two arms (`gatedv plan`).

    With a `noise_floor` no pilot is needed: the seed pairs come from the setup's seed variance (and the candidate's
    document term, when a pilot of it is given), and the plan says when more seeds cannot help.

    Parameters
    ----------
    data
        Pilot runs of two arms (as in `pair`; of one task for scores) or a `Paired`; None to plan from `noise_floor`.
    effect
        The effect to detect, on the pair's scale: a relative ΔP for loss files (0.02 = 2%), a difference in the
        metric's units for scores (0.01 = one point of accuracy).
    baseline_arm, variant_arm, metric, eval_set, unit
        As in `pair`.
    higher_is_better
        As in `pair`.
    alpha
        The two-sided level of the planned test (default 0.05).
    power
        The power of the planned test (default 0.8).
    allow_unpaired
        As in `pair`.
    allow_mismatch
        As in `pair`.
    noise_floor
        The setup's noise floor (a file `noise_floor` wrote, or its result).
    ledger
        A research ledger whose next level the plan is made at (one-sided, so α is twice it); not with `alpha`.
    skipped
        As in `pair`.

    Returns
    -------
    Result
        A `PlanResult` from a pilot, a `FloorPlanResult` with a `noise_floor`: the seed pairs (and units) required.

    Examples
    --------
    >>> result = gv.plan(example_study(tmp_dir), effect=0.02)
    >>> result.seeds_required >= 2
    True
    """
    refuse_unused(schemas_for(metric, higher_is_better), eval_set=eval_set, unit=unit)
    floor = floor_of(noise_floor)
    level = None
    if ledger is not None:
        if alpha is not None:
            raise ParameterError("alpha", "a plan for a research {ledger} is made at the level the ledger gives its "
                                 "next candidate; give one or the other", ("ledger",))
        one_sided, described = next_ledger_level(ledger)
        alpha = 2.0 * one_sided
        level = (f"planned at one-sided level {one_sided:.3g}, the level {os.fspath(ledger)} gives its next candidate "
                 f"({described}): α = {alpha:.3g} two-sided")
    alpha = DEFAULTS.alpha if alpha is None else alpha
    paired = data if data is None or isinstance(data, Paired) else pilot_of(
        data, metric, higher_is_better, eval_set, allow_unpaired, allow_mismatch, unit, skipped, baseline_arm,
        variant_arm)
    if floor is not None:
        made: object = floor_plan(floor, effect, paired=paired, alpha=alpha, power=power)
    elif paired is None:
        raise ParameterError("data", "give pilot runs, or a {noise_floor} to plan from", ("noise_floor",),
                             leading=False)
    else:
        made = plan_pair(paired, effect, alpha=alpha, power=power)
    result = result_of(made, () if paired is None else paired, skipped_once(skipped))
    assert isinstance(result, (PlanResult, FloorPlanResult))  # what plans give
    return replace(result, level=level)


def report(inputs: PathLike | Sequence[PathLike], out: PathLike | None = None, *, fmt: str | None = None,
           reference: str | None = None, n_resamples: int = DEFAULTS.n_resamples, rng_seed: int = DEFAULTS.rng_seed,
           confidence_level: float = DEFAULTS.confidence_level, sesoi: float | None = None,
           cluster: str | None = None, metric: str | None = None, higher_is_better: bool | None = None,
           noise_floor: Floor | None = None, skipped: list[SkippedFile] | None = None,
           left_out: list[str] | None = None, workers: int | None = None, ledger: PathLike | None = None) -> Path:
    """Write the paper-ready report (tables, figures, provenance) of whatever runs the inputs hold (`gatedv report`).

    The verdicts are `compare`'s for one variant and `arms`'s (Holm-adjusted) for several.

    Parameters
    ----------
    inputs
        Run files, long tables or directories (an experiment's directory included).
    out
        The file to write (default: report.<ext> in the single input directory, else here).
    fmt
        "html", "md" or "latex" (default: as `out` is named, else html).
    reference
        The arm every other arm is compared with (default: the arm named "baseline").
    n_resamples, rng_seed
        As in `compare`.
    confidence_level
        As in `compare`.
    sesoi
        As in `compare`.
    cluster
        As in `compare`.
    metric
        The metric of item-score inputs (default: acc_norm, acc, exact_match, whichever every file has first), or the
        column of score tables, found under the inputs by it.
    higher_is_better
        As in `pair`.
    noise_floor
        As in `compare`.
    skipped
        A list that collects the unreadable files passed over instead of failing on them.
    left_out
        A list that receives a line for each comparison the report leaves out.
    workers
        Processes for the comparisons of a large experiment.
    ledger
        A research ledger (`Ledger`) whose history, running best and wealth the report shows.

    Returns
    -------
    Path
        The report written.

    Examples
    --------
    >>> path = gv.report(example_study(tmp_dir), tmp_dir / "report.md", n_resamples=200)
    >>> path.read_text().startswith("# ")
    True
    """
    from gatedv_stats.reporting.render import write_report

    settings = AnalysisSettings(reference=reference, n_resamples=n_resamples, rng_seed=rng_seed,
                                confidence_level=confidence_level, sesoi=sesoi, cluster=cluster, metric=metric,
                                higher_is_better=higher_is_better, noise_floor=floor_of(noise_floor))
    return write_report([Path(path) for path in path_list(inputs)], out, fmt, settings, skipped=skipped,
                        left_out=left_out, workers=workers, ledger=ledger)


def noise_floor(inputs: Inputs, *, metric: str | None = None, higher_is_better: bool | None = None,
                studies: bool = False, out: PathLike | None = None, eval_set: str | None = None,
                unit: str | None = None, allow_unpaired: bool = False, allow_mismatch: Sequence[str] = (),
                skipped: list[SkippedFile] | None = None) -> Result:
    """A setup's noise floor: the seed variance τ² that a paired comparison's D carries (`gatedv noise-floor`).

    From A/A runs, k ≥ 3 runs of one configuration that differ only by training seed (reruns of one seed are
    refused), or with `studies` from earlier paired studies of the setup, pooled, with Bartlett's test of
    homogeneity.

    Parameters
    ----------
    inputs
        A/A runs of one configuration (paths or runs: loss files, or with `metric` one task's item scores or a score
        table's), or with `studies` one input per earlier study of two arms.
    metric, eval_set, unit
        As in `pair`.
    higher_is_better
        As in `pair`.
    studies
        Pool the seed variance of earlier paired studies instead of A/A runs.
    out
        The floor file to write, JSON sealed with its content's SHA-256, for `noise_floor=` of the other functions.
    allow_unpaired
        As in `pair`.
    allow_mismatch
        As in `pair`.
    skipped
        As in `pair`.

    Returns
    -------
    Result
        A `NoiseFloorResult`: the seed variance τ² with its degrees of freedom, its setup and the file written.

    Examples
    --------
    >>> runs = gv.load(example_study(tmp_dir))
    >>> floor = gv.noise_floor([run for run in runs if run.arm == "baseline"], out=tmp_dir / "floor.json")
    >>> floor.seed.df
    2.0
    >>> one_seed = [run for run in runs if run.seed == 0]
    >>> result = gv.compare(one_seed, baseline_arm="baseline", variant_arm="gatedv", n_resamples=200,
    ...                     noise_floor=tmp_dir / "floor.json")
    >>> result.n_pairs, result.verdict_text, "noise floor" in result.verdict.explanation
    (1, 'no detectable difference', True)
    """
    refuse_unused(schemas_for(metric, higher_is_better), eval_set=eval_set, unit=unit)
    if studies:  # each input one study of two arms; the baseline is the arm named "baseline"
        floor = floor_from_studies([pilot_of(path, metric, higher_is_better, eval_set, allow_unpaired, allow_mismatch,
                                             unit, skipped) for path in path_list(inputs)])  # type: ignore[arg-type]
    else:
        runs, scale = runs_of(inputs, metric, higher_is_better, skipped)
        floor = floor_from_runs(select_runs(runs, eval_set=eval_set) if eval_set else runs, scale, unit=unit or "auto")
    if out is not None:
        write_floor_file(out, floor.to_dict())
    return NoiseFloorResult(floor, None if out is None else os.fspath(out), skipped_once(skipped))


def sequential(data: Inputs | Paired | None = None, *, design: PathLike, baseline: Side | None = None,
               variant: Side | None = None, baseline_arm: str | None = None, variant_arm: str | None = None,
               metric: str | None = None, higher_is_better: bool | None = None, task: str | None = None,
               max_seeds: int | None = None, sesoi: float | None = None, alpha: float | None = None,
               power: float | None = None, spending: str | None = None, noise_floor: Floor | None = None,
               eval_set: str | None = None, unit: str | None = None, allow_unpaired: bool = False,
               allow_mismatch: Sequence[str] = (), ledger: PathLike | None = None, procedure: str | None = None,
               note: str | None = None, skipped: list[SkippedFile] | None = None) -> SequentialResult:
    """One look of a group-sequential comparison over seed pairs, recorded in the `design` file (`gatedv decide`).

    The first call fixes the design's settings from its look and writes it, sealed. Each later call, with every seed
    pair so far, records the next look; a setting that differs from the design's, or a file edited by hand, is
    refused.

    With a research `ledger`, the design runs at the level the ledger gives it, one-sided: its α is twice that level,
    and its power and futility are computed there. The candidate is started in the ledger at the first look and
    entered (with `note`) at the stop with its stage-wise p-value, so that "stop: better" is a keep and any other stop
    a discard.

    Parameters
    ----------
    data
        Every seed pair so far, as in `pair`.
    design
        The design file: written by the first look, read and extended by each later one.
    baseline, variant
        As in `pair`.
    baseline_arm, variant_arm, metric, task, eval_set, unit
        As in `pair`.
    higher_is_better
        As in `pair`.
    max_seeds
        K, the budget of seed pairs.
    sesoi
        The smallest effect of interest, for futility and "equivalent".
    alpha
        The two-sided level (default 0.05).
    power
        The power at `sesoi` (default 0.8).
    spending
        The α-spending function, "obf" (O'Brien-Fleming, default) or "pocock".
    noise_floor
        The setup's noise floor: its seed variance lets the first look be at one seed pair.
    allow_unpaired
        As in `pair`.
    allow_mismatch
        As in `pair`.
    ledger
        A research ledger the design runs in, created by this call (with `procedure`, at `alpha`) when it does not
        exist; an existing one's α and procedure must be the ones given, if any.
    procedure
        The ledger's procedure when this call creates it (default LOND).
    note
        The note of the candidate's entry in the ledger.
    skipped
        As in `pair`.

    Returns
    -------
    SequentialResult
        The look: `line` ("continue: train seed pair k+1" or "stop: <decision> (…)"), `stop` and `decision`, the next
        seed pair, the boundaries, the design with every look and, at a stop, the stage-wise p (`p_value`) and the
        median-unbiased estimate beside the naive one.

    Examples
    --------
    >>> runs = gv.load(example_study(tmp_dir))
    >>> floor = gv.noise_floor([run for run in runs if run.arm == "baseline"], out=tmp_dir / "floor.json")
    >>> first = [run for run in runs if run.seed == 0]
    >>> result = gv.sequential(first, design=tmp_dir / "design.json", baseline_arm="baseline",
    ...                        variant_arm="gatedv", max_seeds=3, sesoi=0.01, noise_floor=tmp_dir / "floor.json")
    >>> result.line
    'continue: train seed pair 2'
    >>> result = gv.sequential(runs, design=tmp_dir / "design.json", baseline_arm="baseline", variant_arm="gatedv")
    >>> result.look.index, result.stop, result.decision
    (2, True, 'better')
    """
    paired = pair(data, baseline=baseline, variant=variant, baseline_arm=baseline_arm, variant_arm=variant_arm,
                  metric=metric, higher_is_better=higher_is_better, task=task, eval_set=eval_set,
                  allow_unpaired=allow_unpaired, allow_mismatch=allow_mismatch, unit=unit, skipped=skipped)
    recorded = record_look(design, paired, max_seeds=max_seeds, alpha=alpha, power=power, sesoi=sesoi,
                           spending=spending, floor=floor_of(noise_floor), allow_mismatch=allow_mismatch,
                           ledger=ledger, new_ledger=LedgerSettings(procedure, alpha), note=note)
    return SequentialResult(recorded.design, recorded.look, None if recorded.repeated else os.fspath(design),
                            recorded.new, recorded.repeated, skipped_once(skipped), recorded.ledger_entry)


def read_design(design: PathLike, *, max_seeds: int | None = None, sesoi: float | None = None,
                alpha: float | None = None, power: float | None = None, spending: str | None = None,
                noise_floor: Floor | None = None, ledger: PathLike | None = None,
                procedure: str | None = None) -> SequentialDesign:
    """The design file written by `sequential`, its seal checked, with every look so far; a setting given that
    differs from the design's is refused in one line naming it, as `sequential` would refuse it."""
    made = load_design(design)
    check_unchanged(made, max_seeds=max_seeds, alpha=None if made.ledger else alpha, power=power, sesoi=sesoi,
                    spending=spending, floor=floor_of(noise_floor))
    check_ledger_of(made, ledger, alpha, procedure)
    return made


def floor_of(noise_floor: Floor | None) -> NoiseFloor | None:
    """A noise floor given as a file, a result or itself."""
    if noise_floor is None or isinstance(noise_floor, NoiseFloor):
        return noise_floor
    if isinstance(noise_floor, NoiseFloorResult):
        return noise_floor.floor
    return NoiseFloor.from_dict(read_floor_file(noise_floor))


def _settings(metric: str | None, higher_is_better: bool | None, used: Sequence[str] = (),
              **choices: object) -> AnalysisSettings:
    """The settings of a call, checked once (the resampling's, the confidence level); an option the kind of runs
    `metric` says has no use for (but the `used` ones) is refused."""
    refuse_unused(schemas_for(metric, higher_is_better), used, **choices)
    known = {name: value for name, value in choices.items() if name in AnalysisSettings.__dataclass_fields__
             and value is not None}
    return AnalysisSettings(**known)  # type: ignore[arg-type]


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def skipped_once(skipped: list[SkippedFile] | None) -> tuple[SkippedFile, ...] | None:
    """The unreadable files passed over, each once (None: none were allowed)."""
    return None if skipped is None else tuple(dict.fromkeys(skipped))
