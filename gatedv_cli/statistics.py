"""The statistics commands: loss files in, comparisons out (`bootstrap`, `analyze`, `arms`, `plan`)."""

from __future__ import annotations

import typer

from gatedv_cli.click_api import click
from gatedv_cli.options import (
    ALLOW_MISMATCH,
    ALLOW_UNPAIRED,
    BASELINE_ARM,
    BASELINE_FILES,
    CLUSTER,
    CONFIDENCE_LEVEL,
    EVAL_SET,
    JSON,
    METRIC,
    N_RESAMPLES,
    PAIR_TABLES,
    SEED,
    SESOI,
    SKIP_UNREADABLE,
    UNIT,
    VARIANT_ARM,
    VARIANT_FILES,
    emit,
    pairing,
    warn,
)
from gatedv_cli.skipped import skipped_files, warn_skipped
from gatedv_stats.core.errors import InputError


def bootstrap_command(
    ctx: typer.Context,
    tables: list[str] = PAIR_TABLES,
    baseline: list[str] = BASELINE_FILES,
    variant: list[str] = VARIANT_FILES,
    baseline_arm: str = BASELINE_ARM,
    variant_arm: str = VARIANT_ARM,
    eval_set: str = EVAL_SET,
    n_resamples: int = N_RESAMPLES,
    confidence_level: float = CONFIDENCE_LEVEL,
    rng_seed: int = SEED,
    method: str = typer.Option("percentile", "--method", help="Models-fixed interval: percentile or bca."),
    sesoi: float = SESOI,
    cluster: str = CLUSTER,
    allow_unpaired: bool = ALLOW_UNPAIRED,
    allow_mismatch: list[str] = ALLOW_MISMATCH,
    unit: str = UNIT,
    skip_unreadable: bool = SKIP_UNREADABLE,
    as_json: bool = JSON,
    metric: str = METRIC,
) -> None:
    """The verdict on two arms (seeds and documents sampled), then the paper's ΔP, D with its document bootstrap
    (models fixed) and win rate; with --metric, on the downstream tasks of item-score files."""
    import gatedv_stats as gv

    skipped = skipped_files(ctx, skip_unreadable)
    if _item_scores(ctx, metric, [*(tables or ()), *(baseline or ()), *(variant or ())]):
        return _compare_tasks(tables=tables, baseline=baseline, variant=variant, baseline_arm=baseline_arm,
                              variant_arm=variant_arm, metric=metric, confidence_level=confidence_level, sesoi=sesoi,
                              cluster=cluster, allow_mismatch=tuple(allow_mismatch or ()),
                              allow_unpaired=allow_unpaired, skipped=skipped, as_json=as_json)
    result = gv.compare(tables, baseline=baseline, variant=variant, baseline_arm=baseline_arm, variant_arm=variant_arm,
                        eval_set=eval_set, n_resamples=n_resamples, confidence_level=confidence_level,
                        rng_seed=rng_seed, method=method, sesoi=sesoi, cluster=cluster, skipped=skipped,
                        progress=None, **pairing(allow_unpaired, allow_mismatch, unit))
    warn(result.warnings)
    warn_skipped(skipped)
    emit(result, as_json)


def analyze_command(
    ctx: typer.Context,
    tables: list[str] = PAIR_TABLES,
    baseline: list[str] = BASELINE_FILES,
    variant: list[str] = VARIANT_FILES,
    baseline_arm: str = BASELINE_ARM,
    variant_arm: str = VARIANT_ARM,
    eval_set: str = EVAL_SET,
    n_resamples: int = N_RESAMPLES,
    confidence_level: float = CONFIDENCE_LEVEL,
    rng_seed: int = SEED,
    n_permutations: int = typer.Option(10_000, "--permutations", help="Monte Carlo sign vectors of the permutation "
                                       "test (exact up to 20 documents)."),
    by: list[str] = typer.Option(None, "--by", help="Break D down by this document column (domain, n_targets, "
                                 "n_bytes; numeric columns in quantile bins). Repeatable.", show_default=False),
    bins: int = typer.Option(4, "--bins", help="Quantile bins of a numeric --by column."),
    min_docs: int = typer.Option(5, "--min-docs", help="Groups with fewer documents are pooled into '(other)'."),
    sesoi: float = SESOI,
    cluster: str = CLUSTER,
    allow_unpaired: bool = ALLOW_UNPAIRED,
    allow_mismatch: list[str] = ALLOW_MISMATCH,
    unit: str = UNIT,
    skip_unreadable: bool = SKIP_UNREADABLE,
    as_json: bool = JSON,
    metric: str = METRIC,
) -> None:
    """Everything about one pair of arms: the verdict, seed-level tests, permutation test, BCa, bits per byte and
    breakdowns with multiplicity-adjusted intervals; with --metric, on the downstream tasks of item-score files."""
    import gatedv_stats as gv

    skipped = skipped_files(ctx, skip_unreadable)
    if _item_scores(ctx, metric, [*(tables or ()), *(baseline or ()), *(variant or ())]):
        return _compare_tasks(tables=tables, baseline=baseline, variant=variant, baseline_arm=baseline_arm,
                              variant_arm=variant_arm, metric=metric, confidence_level=confidence_level, sesoi=sesoi,
                              cluster=cluster, allow_mismatch=tuple(allow_mismatch or ()),
                              allow_unpaired=allow_unpaired, skipped=skipped, as_json=as_json)
    result = gv.analyze(tables, baseline=baseline, variant=variant, baseline_arm=baseline_arm, variant_arm=variant_arm,
                        eval_set=eval_set, n_resamples=n_resamples, confidence_level=confidence_level,
                        rng_seed=rng_seed, n_permutations=n_permutations, by=tuple(by or ()), bins=bins,
                        min_docs=min_docs, sesoi=sesoi, cluster=cluster, skipped=skipped, progress=None,
                        **pairing(allow_unpaired, allow_mismatch, unit))
    warn(result.comparison.warnings)
    warn_skipped(skipped)
    emit(result, as_json)


def arms_command(
    ctx: typer.Context,
    files: list[str] = typer.Argument(..., help="Loss files, long tables or directories holding every arm."),
    reference: str = typer.Option(..., "--reference", help="The arm every other arm is compared with."),
    eval_set: str = EVAL_SET,
    alpha: float = typer.Option(0.05, "--alpha", help="Level at which adjusted p-values are marked."),
    n_resamples: int = typer.Option(10_000, "--permutations", help="Monte Carlo sign vectors per permutation test."),
    rng_seed: int = SEED,
    sesoi: float = SESOI,
    cluster: str = CLUSTER,
    allow_unpaired: bool = ALLOW_UNPAIRED,
    allow_mismatch: list[str] = ALLOW_MISMATCH,
    unit: str = UNIT,
    skip_unreadable: bool = SKIP_UNREADABLE,
    as_json: bool = JSON,
    metric: str = METRIC,
) -> None:
    """Every arm against a reference on each evaluation set: verdicts and p-values with Holm and BH adjustment;
    with --metric, on every downstream task of item-score files (Holm across arms and tasks)."""
    import gatedv_stats as gv

    skipped = skipped_files(ctx, skip_unreadable)
    if _item_scores(ctx, metric, files):
        from gatedv_stats.analysis.tasks import compare_item_arms

        return emit(compare_item_arms(files, reference=reference, metric=metric, alpha=alpha, sesoi=sesoi,
                                      cluster=cluster, allow_mismatch=tuple(allow_mismatch or ()),
                                      allow_unpaired=allow_unpaired, skipped=skipped), as_json, warn_skipped(skipped))
    result = gv.arms(files, reference=reference, eval_set=eval_set, alpha=alpha, n_resamples=n_resamples,
                     rng_seed=rng_seed, sesoi=sesoi, cluster=cluster, skipped=skipped,
                     **pairing(allow_unpaired, allow_mismatch, unit))
    warn(result.warnings)
    warn_skipped(skipped)
    emit(result, as_json)


def plan_command(
    ctx: typer.Context,
    pilot_files: list[str] = typer.Argument(..., help="Pilot loss files (or long tables / directories) of two arms."),
    effect: float = typer.Option(..., "--effect", help="Relative ΔP to detect, as a fraction (0.02 = 2%); with "
                                 "--metric a difference in the metric's units (0.01 = one point of accuracy)."),
    alpha: float = typer.Option(0.05, "--alpha", help="Two-sided significance level."),
    power: float = typer.Option(0.8, "--power", help="Required power."),
    baseline_arm: str = typer.Option(None, "--baseline-arm", help="Pilot baseline arm (default: 'baseline').",
                                     show_default=False),
    variant_arm: str = typer.Option(None, "--variant-arm", help="Pilot variant arm (default: the other arm).",
                                    show_default=False),
    eval_set: str = EVAL_SET,
    allow_unpaired: bool = ALLOW_UNPAIRED,
    allow_mismatch: list[str] = ALLOW_MISMATCH,
    unit: str = UNIT,
    skip_unreadable: bool = SKIP_UNREADABLE,
    as_json: bool = JSON,
    metric: str = METRIC,
) -> None:
    """Seeds and evaluation documents needed to detect a relative ΔP, from the variance in pilot runs; with
    --metric, seeds × items for a difference in a downstream task's metric."""
    import gatedv_stats as gv

    skipped = skipped_files(ctx, skip_unreadable)
    if _item_scores(ctx, metric, pilot_files):
        from gatedv_stats.analysis.tasks import plan_item_inputs

        return emit(plan_item_inputs(pilot_files, effect, metric=metric, baseline_arm=baseline_arm,
                                     variant_arm=variant_arm, alpha=alpha, power=power,
                                     allow_mismatch=tuple(allow_mismatch or ()), allow_unpaired=allow_unpaired,
                                     skipped=skipped), as_json, warn_skipped(skipped))
    result = gv.plan(pilot_files, effect=effect, alpha=alpha, power=power, baseline_arm=baseline_arm,
                     variant_arm=variant_arm, eval_set=eval_set, skipped=skipped,
                     **pairing(allow_unpaired, allow_mismatch, unit))
    warn(result.paired.notes + result.warnings)
    warn_skipped(skipped)
    emit(result, as_json)


# Options of the loss-file path that item scores have no use for: given with --metric, they are refused rather
# than silently ignored.
_LOSS_FILE_ONLY = ("eval_set", "n_resamples", "rng_seed", "method", "n_permutations", "by", "bins", "min_docs", "unit")


def _item_scores(ctx: typer.Context, metric: str | None, paths: list[str]) -> bool:
    """Whether the command compares item scores (--metric); refuses inputs of the other kind, and options of the
    loss-file path, in one line."""
    from gatedv_cli.group import flag_of
    from gatedv_stats.pairing.items import check_input_kind

    check_input_kind(paths, metric)
    if metric is None:
        return False
    given = [flag_of(ctx.command, name) for name in _LOSS_FILE_ONLY
             if name in ctx.params and ctx.get_parameter_source(name) != click.core.ParameterSource.DEFAULT]
    if given:
        raise InputError(f"{', '.join(given)}: only without --metric (they set the loss-file comparison)")
    return True


def _compare_tasks(*, as_json: bool, skipped: list | None, **options) -> None:
    """`bootstrap` and `analyze` with --metric: the item-score verdict of one task, or of a suite (notes in it)."""
    from gatedv_stats.analysis.tasks import compare_item_inputs

    emit(compare_item_inputs(**options, skipped=skipped), as_json, warn_skipped(skipped))

