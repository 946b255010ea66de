"""The statistics commands: loss files in, comparisons out (`bootstrap`, `analyze`, `arms`, `plan`), and other
tools' per-document results brought in as loss files (`import lm-eval`)."""

from __future__ import annotations

import typer

from gatedv_cli.options import (
    ALLOW_MISMATCH,
    ALLOW_UNPAIRED,
    BASELINE_ARM,
    BASELINE_FILES,
    CLUSTER,
    CONFIDENCE_LEVEL,
    EVAL_SET,
    JSON,
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
) -> None:
    """The verdict on two arms (seeds and documents sampled), then the paper's ΔP, D with its document bootstrap
    (models fixed) and win rate."""
    from gatedv_stats.pairing import load_paired
    from gatedv_stats.stats.comparison import compare

    skipped = skipped_files(ctx, skip_unreadable)
    paired = load_paired(tables=tables, baseline=baseline, variant=variant, baseline_arm=baseline_arm,
                         variant_arm=variant_arm, eval_set=eval_set, skipped=skipped,
                         **pairing(allow_unpaired, allow_mismatch, unit))
    result = compare(paired, n_resamples=n_resamples, confidence_level=confidence_level, rng_seed=rng_seed,
                     method=method, cluster=cluster, sesoi=sesoi, progress=None)
    warn(result.warnings)
    emit(result, as_json, warn_skipped(skipped))


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
) -> None:
    """Everything about one pair of arms: the verdict, seed-level tests, permutation test, BCa, bits per byte and
    breakdowns with multiplicity-adjusted intervals."""
    from gatedv_stats.analysis.pair import analyze
    from gatedv_stats.pairing import load_paired

    skipped = skipped_files(ctx, skip_unreadable)
    paired = load_paired(tables=tables, baseline=baseline, variant=variant, baseline_arm=baseline_arm,
                         variant_arm=variant_arm, eval_set=eval_set, skipped=skipped,
                         **pairing(allow_unpaired, allow_mismatch, unit))
    result = analyze(paired, n_resamples=n_resamples, confidence_level=confidence_level, rng_seed=rng_seed,
                     n_permutations=n_permutations, by=tuple(by or ()), bins=bins, min_docs=min_docs,
                     cluster=cluster, sesoi=sesoi, progress=None)
    warn(result.comparison.warnings)
    emit(result, as_json, warn_skipped(skipped))


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
) -> None:
    """Every arm against a reference on each evaluation set: verdicts and p-values with Holm and BH adjustment."""
    from gatedv_stats.io.jsonout import strict_json
    from gatedv_stats.io.lossfiles import read_loss_inputs
    from gatedv_stats.pairing import pair_with_reference
    from gatedv_stats.runs import select_runs
    from gatedv_stats.stats.multiple import compare_arms

    skipped = skipped_files(ctx, skip_unreadable)
    runs = select_runs(read_loss_inputs(files, skipped=skipped), eval_set=eval_set)
    pairs = pair_with_reference(runs, reference, **pairing(allow_unpaired, allow_mismatch, unit))
    result = compare_arms(pairs, alpha=alpha, n_resamples=n_resamples, rng_seed=rng_seed, sesoi=sesoi,
                          cluster=cluster)
    payload = {**result.to_dict(),
               "inputs": [{"arm": pair.variant_arm, "eval_set": pair.eval_set, **pair.sources} for pair in pairs],
               **warn_skipped(skipped)}
    typer.echo(strict_json(payload) if as_json else result.summary())


def plan_command(
    ctx: typer.Context,
    pilot_files: list[str] = typer.Argument(..., help="Pilot loss files (or long tables / directories) of two arms."),
    effect: float = typer.Option(..., "--effect", help="Relative ΔP to detect, as a fraction (0.02 = 2%)."),
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
) -> None:
    """Seeds and evaluation documents needed to detect a relative ΔP, from the variance in pilot runs."""
    from gatedv_stats.io.jsonout import strict_json
    from gatedv_stats.io.lossfiles import read_loss_inputs
    from gatedv_stats.pairing import pilot_pair
    from gatedv_stats.stats.planning import plan_from_pilot

    skipped = skipped_files(ctx, skip_unreadable)
    paired = pilot_pair(read_loss_inputs(pilot_files, skipped=skipped), baseline_arm=baseline_arm,
                        variant_arm=variant_arm, eval_set=eval_set, **pairing(allow_unpaired, allow_mismatch, unit))
    plan = plan_from_pilot(paired, effect, alpha=alpha, power=power)
    warn(paired.notes)
    payload = {**plan.to_dict(), "baseline_arm": paired.baseline_arm, "variant_arm": paired.variant_arm,
               "inputs": paired.sources, **warn_skipped(skipped)}
    typer.echo(strict_json(payload) if as_json else f"{paired.variant_arm} vs {paired.baseline_arm}\n{plan.summary()}")


def import_lm_eval_command(
    samples: list[str] = typer.Argument(..., metavar="SAMPLES.jsonl...", help="Per-sample logs of "
                                        "rolling-loglikelihood (perplexity) tasks (lm_eval --log_samples)."),
    arm: str = typer.Option(..., "--arm", help="The arm name of the evaluated model."),
    seed: int = typer.Option(0, "--seed", help="The model's training seed."),
    out: str = typer.Option(..., "--out", help="The loss file to write (.parquet)."),
    id_field: str = typer.Option("id", "--id-field", help="The logged document's field that holds its id ('' for "
                                 "the harness's doc_id, the position in the task's dataset)."),
    as_json: bool = JSON,
) -> None:
    """An lm-evaluation-harness sample log as a loss file: per document −log-likelihood (nats), bytes, words."""
    from gatedv_stats.io.lmeval import import_lm_eval
    from gatedv_stats.io.outputs import check_not_an_input, check_output_file

    check_output_file(out, "--out", suffix=".parquet")
    check_not_an_input(out, samples, "--out")
    result = import_lm_eval(samples, out, arm=arm, seed=seed, id_field=id_field)
    warn(result.warnings)
    emit(result, as_json)
