"""`gatedv ledger LEDGER add | show`: a research ledger, every candidate kept or discarded by an online procedure that
bounds the false keeps over the whole stream (one call of `gv.Ledger` each)."""

from __future__ import annotations

import typer

from gatedv_cli.options import HIGHER_IS_BETTER, JSON, METRIC, NOTE, PROCEDURE, ManyFilesCommand, emit, warn

ledger_app = typer.Typer(name="ledger", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                         help="A research ledger: candidates in the order they are compared, each kept or discarded "
                         "with online control of false keeps (LOND by default).")


class LedgerAddCommand(ManyFilesCommand):
    """Lets `--candidate A B --against C D` stand for the repeated options."""

    many_value_options = ("--candidate", "--against")


@ledger_app.callback()
def ledger_main(ctx: typer.Context, ledger: str = typer.Argument(..., metavar="LEDGER", help="The ledger file "
                                                                    "(SQLite), created by the first add.")) -> None:
    """A research ledger: `add` a candidate (compared with a reference, kept or discarded), `show` the history."""
    ctx.obj = ledger


@ledger_app.command("add", cls=LedgerAddCommand)
def add_command(
    ctx: typer.Context,
    candidate: list[str] = typer.Option(..., "--candidate", metavar="FILE...", help="The candidate's loss files (or "
                                        "item-score files or score tables with --metric, or directories)."),
    against: list[str] = typer.Option(..., "--against", metavar="FILE...", help="The reference's files: fresh "
                                      "seeds of the current best, or one fixed reference."),
    noise_floor: str = typer.Option(None, "--noise-floor", metavar="FLOOR.json", show_default=False,
                                    help="The setup's noise floor (gatedv noise-floor): one seed pair then suffices."),
    note: str = NOTE,
    design: str = typer.Option(None, "--design", metavar="DESIGN.json", show_default=False, help="The sequential "
                               "design (gatedv decide) that decided the candidate: the files are its stopping look's, "
                               "and the entry takes its stage-wise p-value (a fixed-sample one is not valid after an "
                               "early stop)."),
    procedure: str = PROCEDURE,
    alpha: float = typer.Option(None, "--alpha", show_default=False, help="The level (default 0.05); fixed when the "
                                "ledger is created."),
    sesoi: float = typer.Option(None, "--sesoi", show_default=False, help="e-LOND: the smallest effect of interest "
                                "its e-values are likelihood ratios at (a relative ΔP, or a difference in the metric's "
                                "units); fixed when the ledger is created."),
    metric: str = METRIC,
    higher_is_better: bool = HIGHER_IS_BETTER,
    as_json: bool = JSON,
) -> None:
    """Compare a candidate with a reference and enter it: its one-sided p-value (H0: not better; with --design the
    design's stage-wise p-value) is tested at the level the ledger's procedure gives it, and the entry is kept or
    discarded."""
    import gatedv_stats as gv

    ledger = gv.Ledger(ctx.obj, procedure=procedure, alpha=alpha, sesoi=sesoi)
    entry = ledger.add(candidate, against, noise_floor=noise_floor, note=note, metric=metric,
                       higher_is_better=higher_is_better, design=design)
    warn(entry.warnings)
    emit(entry, as_json)


@ledger_app.command("show")
def show_command(ctx: typer.Context, as_json: bool = JSON) -> None:
    """The history: step, candidate, estimate and interval, p, level, keep or discard, wealth left, running best;
    the hash chain is checked first (an altered history is refused, naming the first bad entry)."""
    import gatedv_stats as gv

    emit(gv.Ledger(ctx.obj).history(), as_json)
