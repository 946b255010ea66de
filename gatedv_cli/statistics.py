"""The statistics commands (`bootstrap`, `analyze`, `arms`, `plan`): loss files or item-score files in, one call of
the Python API each, its result out."""

from __future__ import annotations

from typing import TYPE_CHECKING

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
    HIGHER_IS_BETTER,
    JSON,
    METRIC,
    N_RESAMPLES,
    NOISE_FLOOR,
    PAIR_TABLES,
    SEED,
    SESOI,
    SKIP_UNREADABLE,
    UNIT,
    VARIANT_ARM,
    VARIANT_FILES,
    emit,
    warn,
)
from gatedv_cli.skipped import skipped_files, warn_skipped

if TYPE_CHECKING:
    from gatedv_stats.results import Result


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
    noise_floor: str = NOISE_FLOOR,
    skip_unreadable: bool = SKIP_UNREADABLE,
    as_json: bool = JSON,
    metric: str = METRIC,
    higher_is_better: bool = HIGHER_IS_BETTER,
) -> None:
    """The verdict on two arms (seeds and documents sampled), then the paper's ΔP, D with its document bootstrap
    (models fixed) and win rate; with --metric, on the downstream tasks of item-score files."""
    import gatedv_stats as gv

    skipped = skipped_files(ctx, skip_unreadable)
    report(gv.compare(tables or None, **given(ctx), skipped=skipped, progress=None), skipped, as_json)


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
    noise_floor: str = NOISE_FLOOR,
    skip_unreadable: bool = SKIP_UNREADABLE,
    as_json: bool = JSON,
    metric: str = METRIC,
    higher_is_better: bool = HIGHER_IS_BETTER,
) -> None:
    """Everything about one pair of arms: the verdict, seed-level tests, permutation test, BCa, bits per byte and
    breakdowns with multiplicity-adjusted intervals; with --metric, on the downstream tasks of item-score files."""
    import gatedv_stats as gv

    skipped = skipped_files(ctx, skip_unreadable)
    report(gv.analyze(tables or None, **given(ctx), skipped=skipped, progress=None), skipped, as_json)


def arms_command(
    ctx: typer.Context,
    files: list[str] = typer.Argument(..., help="Loss files, long tables or directories holding every arm."),
    reference: str = typer.Option(..., "--reference", help="The arm every other arm is compared with."),
    eval_set: str = EVAL_SET,
    alpha: float = typer.Option(0.05, "--alpha", help="Level at which adjusted p-values are marked."),
    n_permutations: int = typer.Option(10_000, "--permutations", help="Monte Carlo sign vectors per permutation test."),
    rng_seed: int = SEED,
    sesoi: float = SESOI,
    cluster: str = CLUSTER,
    allow_unpaired: bool = ALLOW_UNPAIRED,
    allow_mismatch: list[str] = ALLOW_MISMATCH,
    unit: str = UNIT,
    noise_floor: str = NOISE_FLOOR,
    skip_unreadable: bool = SKIP_UNREADABLE,
    as_json: bool = JSON,
    metric: str = METRIC,
    higher_is_better: bool = HIGHER_IS_BETTER,
) -> None:
    """Every arm against a reference on each evaluation set: verdicts and p-values with Holm and BH adjustment;
    with --metric, on every downstream task of item-score files (Holm across arms and tasks)."""
    import gatedv_stats as gv

    skipped = skipped_files(ctx, skip_unreadable)
    report(gv.arms(files, **given(ctx), skipped=skipped), skipped, as_json)


def plan_command(
    ctx: typer.Context,
    pilot_files: list[str] = typer.Argument(None, help="Pilot loss files (or long tables / directories) of two arms; "
                                            "with --noise-floor optional (a one-seed pilot of the candidate adds its "
                                            "document term).", show_default=False),
    effect: float = typer.Option(..., "--effect", help="Relative ΔP to detect, as a fraction (0.02 = 2%); with "
                                 "--metric a difference in the metric's units (0.01 = one point of accuracy)."),
    alpha: float = typer.Option(None, "--alpha", show_default=False, help="Two-sided significance level (default "
                                "0.05)."),
    power: float = typer.Option(0.8, "--power", help="Required power."),
    baseline_arm: str = typer.Option(None, "--baseline-arm", help="Pilot baseline arm (default: 'baseline').",
                                     show_default=False),
    variant_arm: str = typer.Option(None, "--variant-arm", help="Pilot variant arm (default: the other arm).",
                                    show_default=False),
    eval_set: str = EVAL_SET,
    allow_unpaired: bool = ALLOW_UNPAIRED,
    allow_mismatch: list[str] = ALLOW_MISMATCH,
    unit: str = UNIT,
    noise_floor: str = NOISE_FLOOR,
    ledger: str = typer.Option(None, "--ledger", metavar="LEDGER", show_default=False, help="Plan at the level this "
                               "research ledger gives its next candidate (one-sided), the level it will be tested at."),
    skip_unreadable: bool = SKIP_UNREADABLE,
    as_json: bool = JSON,
    metric: str = METRIC,
    higher_is_better: bool = HIGHER_IS_BETTER,
) -> None:
    """Seeds and evaluation documents needed to detect a relative ΔP, from the variance in pilot runs; with
    --metric, seeds × items for a difference in a downstream task's metric; with --ledger, at the ledger's level."""
    import gatedv_stats as gv

    skipped = skipped_files(ctx, skip_unreadable)
    report(gv.plan(pilot_files or None, **given(ctx), skipped=skipped), skipped, as_json)


def noise_floor_command(
    ctx: typer.Context,
    inputs: list[str] = typer.Argument(..., help="A/A runs: loss files (or item-score files with --metric) of one "
                                       "configuration that differ only by training seed; with --studies, each input "
                                       "one earlier paired study of the setup.", show_default=False),
    out: str = typer.Option(..., "--out", "-o", help="The floor file to write (JSON), for --noise-floor.",
                            show_default=False),
    studies: bool = typer.Option(False, "--studies", help="Pool the seed spread of earlier paired studies (each input "
                                 "two arms with 2 or more seed pairs) instead of A/A runs."),
    metric: str = METRIC,
    higher_is_better: bool = HIGHER_IS_BETTER,
    eval_set: str = EVAL_SET,
    unit: str = UNIT,
    allow_unpaired: bool = ALLOW_UNPAIRED,
    allow_mismatch: list[str] = ALLOW_MISMATCH,
    skip_unreadable: bool = SKIP_UNREADABLE,
    as_json: bool = JSON,
) -> None:
    """A setup's noise floor: the seed variance of a paired comparison, measured once from A/A runs (or earlier
    studies) and used by --noise-floor for verdicts from one or two seeds."""
    import gatedv_stats as gv

    skipped = skipped_files(ctx, skip_unreadable)
    report(gv.noise_floor(inputs, **given(ctx), skipped=skipped), skipped, as_json)


# The command's own parameters, not the library call's: its positional inputs, the output form, skipping.
_COMMAND_ONLY = ("tables", "files", "pilot_files", "inputs", "as_json", "skip_unreadable")


def given(ctx: typer.Context) -> dict:
    """The options given on the command line, by the library parameter they set (the library's own defaults apply
    to the rest, so that an option the computation has no use for is refused, not ignored)."""
    return {name: tuple(value) if isinstance(value, list) else value for name, value in ctx.params.items()
            if name not in _COMMAND_ONLY and ctx.get_parameter_source(name) != click.core.ParameterSource.DEFAULT}


def report(result: Result, skipped: list | None, as_json: bool) -> None:
    """The result on stdout (text or JSON), its warnings and the files skipped on stderr."""
    warn(result.warnings)
    warn_skipped(skipped)
    emit(result, as_json)
