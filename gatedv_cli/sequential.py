"""`gatedv decide`: one look of a group-sequential comparison over seed pairs, recorded in its design file; exit 0
when the look stops, 10 when it says to train the next seed pair, so that a shell loop can drive it."""

from __future__ import annotations

import typer

from gatedv_cli.options import (
    ALLOW_MISMATCH,
    ALLOW_UNPAIRED,
    BASELINE_ARM,
    BASELINE_FILES,
    EVAL_SET,
    JSON,
    METRIC,
    NOISE_FLOOR,
    PAIR_TABLES,
    SKIP_UNREADABLE,
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
    max_seeds: int = typer.Option(None, "--max-seeds", metavar="K", show_default=False, help="The budget of seed "
                                  "pairs, the last look (a new design needs it)."),
    sesoi: float = typer.Option(None, "--sesoi", show_default=False, help="Smallest effect of interest (a relative "
                                "ΔP, 0.01 = 1%; with --metric a difference in the metric's units): the futility "
                                "boundary and 'equivalent'."),
    noise_floor: str = NOISE_FLOOR,
    alpha: float = typer.Option(None, "--alpha", show_default=False, help="Two-sided level of the design (default "
                                "0.05), α/2 spent in each direction."),
    power: float = typer.Option(None, "--power", show_default=False, help="Target power at --sesoi (default 0.8)."),
    spending: str = typer.Option(None, "--spending", show_default=False, help="α-spending function: obf "
                                 "(O'Brien–Fleming type, the default) or pocock."),
    metric: str = METRIC,
    eval_set: str = EVAL_SET,
    unit: str = UNIT,
    allow_unpaired: bool = ALLOW_UNPAIRED,
    allow_mismatch: list[str] = ALLOW_MISMATCH,
    skip_unreadable: bool = SKIP_UNREADABLE,
    as_json: bool = JSON,
) -> None:
    """One look of a group-sequential comparison over seed pairs: prints "continue: train seed pair k+1" (exit 10)
    or "stop: <verdict> (…)" (exit 0), and records the look in the design file (created on the first look; a
    different design, or a file edited by hand, is refused)."""
    import gatedv_stats as gv

    skipped = skipped_files(ctx, skip_unreadable)
    result = gv.sequential(tables or None, **given(ctx), skipped=skipped)
    report(result, skipped, as_json)
    raise typer.Exit(0 if result.stop else CONTINUE)
