"""`gatedv decide`: one look of a group-sequential comparison over seed pairs, recorded in its design file; exit 0
when the look stops, 10 when it says to train the next seed pair, so that a shell loop can drive it."""

from __future__ import annotations

import typer

from gatedv_cli.options import (
    ALLOW_MISMATCH,
    ALLOW_UNPAIRED,
    BASELINE_ARM,
    BASELINE_FILES,
    DESIGN_ALPHA,
    DESIGN_POWER,
    DESIGN_SESOI,
    EVAL_SET,
    HIGHER_IS_BETTER,
    JSON,
    LEDGER,
    MAX_SEEDS,
    METRIC,
    NOISE_FLOOR,
    NOTE,
    PAIR_TABLES,
    PROCEDURE,
    SKIP_UNREADABLE,
    SPENDING,
    UNIT,
    VARIANT_ARM,
    VARIANT_FILES,
)
from gatedv_cli.skipped import skipped_files
from gatedv_cli.statistics import given, report

CONTINUE = 10  # the exit status of a look that says "continue: train seed pair k+1"


def decide_command(
    ctx: typer.Context,
    tables: list[str] = PAIR_TABLES,
    baseline: list[str] = BASELINE_FILES,
    variant: list[str] = VARIANT_FILES,
    baseline_arm: str = BASELINE_ARM,
    variant_arm: str = VARIANT_ARM,
    design: str = typer.Option(..., "--design", metavar="DESIGN.json", show_default=False, help="The design file: "
                               "written on the first look (with --max-seeds), then each look is recorded in it."),
    max_seeds: int = MAX_SEEDS,
    sesoi: float = DESIGN_SESOI,
    noise_floor: str = NOISE_FLOOR,
    alpha: float = DESIGN_ALPHA,
    power: float = DESIGN_POWER,
    spending: str = SPENDING,
    ledger: str = LEDGER,
    procedure: str = PROCEDURE,
    note: str = NOTE,
    metric: str = METRIC,
    higher_is_better: bool = HIGHER_IS_BETTER,
    eval_set: str = EVAL_SET,
    unit: str = UNIT,
    allow_unpaired: bool = ALLOW_UNPAIRED,
    allow_mismatch: list[str] = ALLOW_MISMATCH,
    skip_unreadable: bool = SKIP_UNREADABLE,
    as_json: bool = JSON,
) -> None:
    """One look of a group-sequential comparison over seed pairs: prints "continue: train seed pair k+1" (exit 10)
    or "stop: <verdict> (…)" (exit 0), and records the look in the design file (created on the first look; a
    different design, or a file edited by hand, is refused). At a stop it prints the stage-wise p-value and the
    median-unbiased estimate; with --ledger the design runs at the ledger's level and enters the candidate there."""
    import gatedv_stats as gv

    skipped = skipped_files(ctx, skip_unreadable)
    result = gv.sequential(tables or None, **given(ctx), skipped=skipped)
    report(result, skipped, as_json)
    raise typer.Exit(0 if result.stop else CONTINUE)
