"""Downstream tasks from item-score inputs: read, pair and compare in one call, as the commands with --metric do."""

from __future__ import annotations

from collections.abc import Sequence

from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.io.itemfiles import ItemRun, read_item_inputs
from gatedv_stats.io.lossfiles import SkippedFile
from gatedv_stats.pairing.items import PairedScores, load_item_pairs, pair_tasks
from gatedv_stats.stats.item_planning import ItemPlan, plan_items
from gatedv_stats.stats.item_scores import ItemScoreResult
from gatedv_stats.stats.task_suite import TaskSuite, compare_task_pairs, compare_tasks


def compare_item_inputs(*, metric: str, tables: Sequence[str] | None = None, baseline: Sequence[str] | None = None,
                        variant: Sequence[str] | None = None, baseline_arm: str | None = None,
                        variant_arm: str | None = None, confidence_level: float = 0.95, sesoi: float | None = None,
                        cluster: str | None = None, allow_mismatch: Sequence[str] = (), allow_unpaired: bool = False,
                        skipped: list[SkippedFile] | None = None) -> ItemScoreResult | TaskSuite:
    """Two arms on every task their item scores share: one task's comparison, or the suite of several."""
    pairs = load_item_pairs(tables=tables, baseline=baseline, variant=variant, baseline_arm=baseline_arm,
                            variant_arm=variant_arm, metric=metric, allow_mismatch=allow_mismatch,
                            allow_unpaired=allow_unpaired, skipped=skipped)
    return compare_task_pairs(pairs, confidence_level=confidence_level, sesoi=sesoi, cluster=cluster)


def compare_item_arms(files: Sequence[str], *, reference: str, metric: str, alpha: float = 0.05,
                      sesoi: float | None = None, cluster: str | None = None, allow_mismatch: Sequence[str] = (),
                      allow_unpaired: bool = False, skipped: list[SkippedFile] | None = None) -> TaskSuite:
    """Every arm against `reference` on every task, Holm-adjusted across all the comparisons."""
    pairs = pair_tasks(read_item_inputs(files, skipped=skipped), reference=reference, metric=metric,
                       allow_mismatch=allow_mismatch, allow_unpaired=allow_unpaired)
    return compare_tasks(pairs, confidence_level=1.0 - alpha, sesoi=sesoi, cluster=cluster)


def plan_item_inputs(files: Sequence[str], effect: float, *, metric: str, baseline_arm: str | None = None,
                     variant_arm: str | None = None, alpha: float = 0.05, power: float = 0.8,
                     allow_mismatch: Sequence[str] = (), allow_unpaired: bool = False,
                     skipped: list[SkippedFile] | None = None) -> ItemPlan:
    """Seeds × items needed for a difference of `effect` (metric units) from one task's pilot item scores; the
    baseline defaults to the arm named "baseline", the variant to the other."""
    runs = read_item_inputs(files, skipped=skipped)
    arms = sorted({run.arm for run in runs})
    baseline_arm = baseline_arm or ("baseline" if "baseline" in arms else None)
    others = [arm for arm in arms if arm != baseline_arm]
    variant_arm = variant_arm or (others[0] if len(others) == 1 else None)
    if baseline_arm is None or variant_arm is None:
        raise InputError(f"name the pilot's arms with --baseline-arm and --variant-arm (arms found: {', '.join(arms)})")
    pairs: list[PairedScores] = pair_tasks(runs, reference=baseline_arm, variant_arm=variant_arm, metric=metric,
                                           allow_mismatch=allow_mismatch, allow_unpaired=allow_unpaired)
    if len(pairs) > 1:
        raise InputError(f"the pilot holds several tasks ({', '.join(pair.task for pair in pairs)}); give the pilot "
                         "files of one task")
    return plan_items(pairs[0], effect, alpha=alpha, power=power)


PREFERRED_METRICS = ("acc_norm", "acc", "exact_match")  # a report's metric: the first of these every run has


def experiment_tasks(item_runs: Sequence[ItemRun], reference: str | None, *, metric: str | None = None,
                     confidence_level: float = 0.95) -> TaskSuite | None:
    """The report's downstream tasks: every arm against the reference on every task, on `metric` (default: the
    first of PREFERRED_METRICS that every run has, else the first they share); None without item scores."""
    if not item_runs:
        if metric is not None:
            raise ParameterError("metric", f"{metric!r} given, but the inputs hold no item-score files")
        return None
    shared = [name for name in item_runs[0].metrics if all(name in run.metrics for run in item_runs)]
    if not shared:
        raise InputError("the item-score files share no metric, so the report cannot compare their tasks")
    if metric is not None and metric not in shared:
        raise ParameterError("metric", f"{metric!r} is not a metric of every item-score file (shared: "
                             f"{', '.join(shared)})")
    metric = metric or next((name for name in PREFERRED_METRICS if name in shared), shared[0])
    if reference is None or reference not in {run.arm for run in item_runs}:
        raise InputError(f"the item-score files hold no runs of the reference arm {reference!r} (arms: "
                         f"{', '.join(sorted({run.arm for run in item_runs}))})")
    return compare_tasks(pair_tasks(item_runs, reference=reference, metric=metric),
                         confidence_level=confidence_level)
