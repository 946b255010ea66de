"""The Python API (`import gatedv_stats as gv`): the same computations as the command line, for notebooks.

`load` reads loss files (or directories); `compare` gives the verdict and the paper's comparison of two arms
(`gatedv bootstrap`), `analyze` every reviewer statistic of one pair (`gatedv analyze`), `arms` every arm against
a reference with Holm-adjusted verdicts (`gatedv arms`), `plan` the seeds and documents a study needs (`gatedv
plan`) and `report` writes the report (`gatedv report`). Every command that computes something is a call of
these functions, so the same files and settings give the same answer everywhere; the settings travel in one
`AnalysisSettings`. A bad argument raises `ParameterError` naming the parameter (`baseline_arm`), bad input an
`InputError` naming the file, row or field.

The data of a comparison can be given as paths (files, long tables, directories), as the runs `load` returned
(or any list of `LossRun`), as a long pandas DataFrame (columns arm, seed, doc_id, n_targets, loss_sum), as
`PairedLosses`, or, for `compare` and `analyze`, as two (seeds × documents) arrays of loss sums.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TypeAlias

import numpy as np
import pandas as pd

from gatedv_stats.analysis.experiment import AnalysisSettings
from gatedv_stats.analysis.pair import analyze as analyze_pair
from gatedv_stats.core.errors import ParameterError
from gatedv_stats.core.validation import check_open_unit
from gatedv_stats.io.lossfiles import LossRun, SkippedFile, runs_from_frame
from gatedv_stats.pairing.losses import PairedLosses, load_paired, pair_with_reference, pilot_pair, runs_of
from gatedv_stats.pairing.selection import choose_reference, select_runs
from gatedv_stats.results import AnalysisResult, ArmsResult, ComparisonResult, PlanResult, Runs
from gatedv_stats.stats.comparison import compare as compare_pair
from gatedv_stats.stats.multiple import compare_arms
from gatedv_stats.stats.planning import plan_from_pilot

PathLike: TypeAlias = str | os.PathLike[str]
# What holds runs: paths, runs already read, or a long table in memory.
Inputs: TypeAlias = PathLike | Sequence[PathLike] | Sequence[LossRun] | Runs | pd.DataFrame
# One arm's side of a comparison: as Inputs, or (seeds × documents) loss sums.
Side: TypeAlias = Inputs | np.ndarray | Sequence[Sequence[float]]


def load(paths: PathLike | Sequence[PathLike], *, eval_set: str | None = None,
         skipped: list[SkippedFile] | None = None) -> Runs:
    """Read loss files, long tables and directories (searched recursively) into `Runs`; `eval_set`: keep only
    the runs scored on that set. `skipped`: a list that collects the unreadable files found in directories
    instead of failing on them (they are listed in the results' `to_dict()` too)."""
    runs = runs_of(_path_list(paths), skipped)
    if eval_set is not None:
        runs = select_runs(runs, eval_set=eval_set)
    return Runs(tuple(runs), _skipped(skipped))


def pair(data: Inputs | PairedLosses | None = None, *, baseline: Side | None = None, variant: Side | None = None,
         baseline_arm: str | None = None, variant_arm: str | None = None, eval_set: str | None = None,
         n_targets: Sequence[int] | np.ndarray | None = None, settings: AnalysisSettings = AnalysisSettings(),
         skipped: list[SkippedFile] | None = None) -> PairedLosses:
    """The paired arrays of two arms: from `data` holding both (told apart by `baseline_arm` and
    `variant_arm`), or from `baseline` and `variant`, each paths, runs or (seeds × documents) loss sums (then
    `n_targets` per document, default 1; arms named `baseline_arm` / `variant_arm`, default "baseline" and
    "variant"). Pairing follows `settings` (`allow_unpaired`, `allow_mismatch`, `unit`)."""
    if isinstance(data, PairedLosses):
        if baseline is not None or variant is not None:
            raise ParameterError("data", "give either {data} or {baseline} and {variant}", ("baseline", "variant"),
                                 leading=False)
        return data
    if _is_numbers(baseline) or _is_numbers(variant):
        return _from_arrays(baseline, variant, n_targets, baseline_arm or "baseline", variant_arm or "variant")
    return load_paired(tables=None if data is None else _inputs(data), baseline=_side(baseline),
                       variant=_side(variant), baseline_arm=baseline_arm, variant_arm=variant_arm, eval_set=eval_set,
                       allow_unpaired=settings.allow_unpaired, allow_mismatch=settings.allow_mismatch,
                       unit=settings.unit, skipped=skipped)


def compare(data: Inputs | PairedLosses | None = None, *, baseline: Side | None = None, variant: Side | None = None,
            baseline_arm: str | None = None, variant_arm: str | None = None, eval_set: str | None = None,
            n_targets: Sequence[int] | np.ndarray | None = None, n_resamples: int = 2000,
            confidence_level: float = 0.95, rng_seed: int = 0, method: str = "percentile", sesoi: float | None = None,
            cluster: str | None = None, allow_unpaired: bool = False, allow_mismatch: Sequence[str] = (),
            unit: str = "auto", skipped: list[SkippedFile] | None = None,
            progress: bool | None = False) -> ComparisonResult:
    """The verdict on two arms (seeds and documents sampled), then the paper's ΔP, D with its document
    bootstrap (models fixed, `method` percentile or bca) and win rate: `gatedv bootstrap`. The data as in
    `pair`; `sesoi`: the smallest relative ΔP of interest (the verdict can then say "equivalent"); `cluster`: a
    document column whose values are the sampled units."""
    settings = _settings(n_resamples=n_resamples, confidence_level=confidence_level, rng_seed=rng_seed, sesoi=sesoi,
                         cluster=cluster, allow_unpaired=allow_unpaired, allow_mismatch=allow_mismatch, unit=unit)
    paired = pair(data, baseline=baseline, variant=variant, baseline_arm=baseline_arm, variant_arm=variant_arm,
                  eval_set=eval_set, n_targets=n_targets, settings=settings, skipped=skipped)
    result = compare_pair(paired, n_resamples=settings.n_resamples, confidence_level=settings.confidence_level,
                          rng_seed=settings.rng_seed, method=method, cluster=settings.cluster, sesoi=settings.sesoi,
                          progress=progress)
    return ComparisonResult(result, paired, _skipped(skipped))


def analyze(data: Inputs | PairedLosses | None = None, *, baseline: Side | None = None, variant: Side | None = None,
            baseline_arm: str | None = None, variant_arm: str | None = None, eval_set: str | None = None,
            n_targets: Sequence[int] | np.ndarray | None = None, n_resamples: int = 2000,
            confidence_level: float = 0.95, rng_seed: int = 0, n_permutations: int = 10_000,
            by: Sequence[str] = (), bins: int = 4, min_docs: int = 5, sesoi: float | None = None,
            cluster: str | None = None, allow_unpaired: bool = False, allow_mismatch: Sequence[str] = (),
            unit: str = "auto", skipped: list[SkippedFile] | None = None,
            progress: bool | None = False) -> AnalysisResult:
    """Everything about one pair of arms: the verdict, seed-level tests, the permutation test, BCa, bits per
    byte and D broken down `by` document columns (numeric ones in `bins` quantile bins; groups under `min_docs`
    pooled): `gatedv analyze`. The data and the other settings as in `compare`."""
    settings = _settings(n_resamples=n_resamples, confidence_level=confidence_level, rng_seed=rng_seed, sesoi=sesoi,
                         cluster=cluster, allow_unpaired=allow_unpaired, allow_mismatch=allow_mismatch, unit=unit)
    paired = pair(data, baseline=baseline, variant=variant, baseline_arm=baseline_arm, variant_arm=variant_arm,
                  eval_set=eval_set, n_targets=n_targets, settings=settings, skipped=skipped)
    result = analyze_pair(paired, n_resamples=settings.n_resamples, confidence_level=settings.confidence_level,
                          rng_seed=settings.rng_seed, n_permutations=n_permutations, by=tuple(by), bins=bins,
                          min_docs=min_docs, cluster=settings.cluster, sesoi=settings.sesoi, progress=progress)
    return AnalysisResult(result, paired, _skipped(skipped))


def arms(data: Inputs, *, reference: str | None = None, eval_set: str | None = None, alpha: float = 0.05,
         n_resamples: int = 10_000, rng_seed: int = 0, sesoi: float | None = None, cluster: str | None = None,
         allow_unpaired: bool = False, allow_mismatch: Sequence[str] = (), unit: str = "auto",
         skipped: list[SkippedFile] | None = None) -> ArmsResult:
    """Every arm against `reference` (default: the arm named "baseline") on each evaluation set: verdicts from
    the Holm-adjusted seed-and-document p at level `alpha`, and p-values with Holm and BH adjustment
    (`n_resamples` sign vectors per permutation test): `gatedv arms`."""
    check_open_unit("alpha", alpha)
    settings = _settings(reference=reference, confidence_level=1.0 - alpha, rng_seed=rng_seed, sesoi=sesoi,
                         cluster=cluster, allow_unpaired=allow_unpaired, allow_mismatch=allow_mismatch, unit=unit)
    runs = select_runs(runs_of(_inputs(data), skipped), eval_set=eval_set)
    chosen = settings.reference or choose_reference({run.arm for run in runs}, None)
    if chosen is None:
        raise ParameterError("reference", "name the arm every other arm is compared with (no arm is named "
                             "'baseline')")
    pairs = pair_with_reference(runs, chosen, allow_unpaired=settings.allow_unpaired,
                                allow_mismatch=settings.allow_mismatch, unit=settings.unit)
    result = compare_arms(pairs, alpha=alpha, n_resamples=n_resamples, rng_seed=settings.rng_seed,
                          sesoi=settings.sesoi, cluster=settings.cluster)
    return ArmsResult(result, tuple(pairs), _skipped(skipped))


def plan(data: Inputs | PairedLosses, *, effect: float, alpha: float = 0.05, power: float = 0.8,
         baseline_arm: str | None = None, variant_arm: str | None = None, eval_set: str | None = None,
         allow_unpaired: bool = False, allow_mismatch: Sequence[str] = (), unit: str = "auto",
         skipped: list[SkippedFile] | None = None) -> PlanResult:
    """Seeds and evaluation documents needed to detect a relative ΔP of `effect` (0.02 = 2%) at two-sided level
    `alpha` with `power`, from the variance in pilot runs of two arms (the baseline defaults to the arm named
    "baseline", the variant to the other arm): `gatedv plan`."""
    settings = _settings(allow_unpaired=allow_unpaired, allow_mismatch=allow_mismatch, unit=unit)
    paired = data if isinstance(data, PairedLosses) else pilot_pair(
        runs_of(_inputs(data), skipped), baseline_arm=baseline_arm, variant_arm=variant_arm, eval_set=eval_set,
        allow_unpaired=settings.allow_unpaired, allow_mismatch=settings.allow_mismatch, unit=settings.unit)
    return PlanResult(plan_from_pilot(paired, effect, alpha=alpha, power=power), paired, _skipped(skipped))


def report(inputs: PathLike | Sequence[PathLike], out: PathLike | None = None, *, fmt: str | None = None,
           reference: str | None = None, n_resamples: int = 2000, rng_seed: int = 0, confidence_level: float = 0.95,
           sesoi: float | None = None, cluster: str | None = None, metric: str | None = None,
           skipped: list[SkippedFile] | None = None, left_out: list[str] | None = None,
           workers: int | None = None) -> Path:
    """Write the paper-ready report (tables, figures, provenance) of whatever runs the inputs hold, as `fmt`
    html, md or latex (default: as `out` is named, else html; `out` default: report.<ext> in the single input
    directory, else here); returns the path written: `gatedv report`. The verdicts are the same as `compare`'s
    for one variant and as `arms`'s (Holm-adjusted) for several; `left_out` (a list) receives a line for each
    comparison the report leaves out; `metric`: the downstream tasks' metric of item-score inputs (default:
    acc_norm, acc, exact_match, whichever every file has first); `workers`: processes for a large experiment's
    comparisons."""
    from gatedv_stats.reporting.render import write_report

    settings = _settings(reference=reference, n_resamples=n_resamples, rng_seed=rng_seed,
                         confidence_level=confidence_level, sesoi=sesoi, cluster=cluster, metric=metric)
    return write_report([Path(path) for path in _path_list(inputs)], None if out is None else os.fspath(out), fmt,
                        settings, skipped=skipped, left_out=left_out, workers=workers)


def _settings(*, allow_mismatch: Sequence[str] = (), **choices: object) -> AnalysisSettings:
    """The one settings object of every entry point, checked once."""
    return AnalysisSettings(allow_mismatch=tuple(allow_mismatch), **choices)  # type: ignore[arg-type]


def _skipped(skipped: list[SkippedFile] | None) -> tuple[SkippedFile, ...] | None:
    return None if skipped is None else tuple(dict.fromkeys(skipped))


def _path_list(paths: PathLike | Sequence[PathLike]) -> list[PathLike]:
    return [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)


def _inputs(data: Inputs) -> list:
    """Runs, or the paths to read them from (see `pairing.runs_of`); a DataFrame as a long table."""
    if isinstance(data, pd.DataFrame):
        return runs_from_frame(data, {}, "frame", long_table=True)
    if isinstance(data, Runs):
        return list(data.runs)
    return _path_list(data)  # type: ignore[arg-type]


def _side(side: Side | None) -> list | None:
    return None if side is None else _inputs(side)


def _is_numbers(side: object) -> bool:
    """Loss sums given as numbers: a NumPy array, or nested lists of numbers."""
    if isinstance(side, np.ndarray):
        return True
    if isinstance(side, (str, os.PathLike, pd.DataFrame, Runs)) or not isinstance(side, Sequence) or not side:
        return False
    first = side[0]
    return isinstance(first, (Sequence, np.ndarray)) and not isinstance(first, str) and len(first) > 0 and all(
        isinstance(value, (int, float, np.number)) for value in first)


def _from_arrays(baseline: object, variant: object, n_targets: Sequence[int] | np.ndarray | None, baseline_arm: str,
                 variant_arm: str) -> PairedLosses:
    """Two arms' (S, N) loss sums, row s of both from seed pair s (seeds 0..S−1, documents doc0..), with each
    document's target count (default 1: the values are per-document mean losses)."""
    loss = [np.asarray(values, dtype=np.float64) for values in (baseline, variant)]
    if loss[0].ndim != 2 or loss[0].shape != loss[1].shape:
        raise ParameterError("variant", f"baseline and variant must be (seeds × documents) arrays of one shape, got "
                             f"{loss[0].shape} and {loss[1].shape}")
    n_seeds, n_docs = loss[0].shape
    counts = np.ones(n_docs, dtype=np.int64) if n_targets is None else np.asarray(n_targets)
    if counts.shape != (n_docs,):
        raise ParameterError("n_targets", f"one count per document: {n_docs} values, got {counts.shape}")
    frame = pd.DataFrame({"arm": np.repeat([baseline_arm, variant_arm], n_seeds * n_docs),
                          "seed": np.tile(np.repeat(np.arange(n_seeds), n_docs), 2),
                          "doc_id": np.tile([f"doc{i}" for i in range(n_docs)], 2 * n_seeds),
                          "n_targets": np.tile(counts, 2 * n_seeds),
                          "loss_sum": np.concatenate([values.ravel() for values in loss])})
    return PairedLosses.from_frame(frame, baseline_arm=baseline_arm, variant_arm=variant_arm)
