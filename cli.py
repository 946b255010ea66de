"""The `gatedv` command line: a thin typer layer over `gatedv_stats` and `trainer`.

Every command turns bad input into one line on stderr and a non-zero exit (see `_Group`);
the work itself lives in importable functions.
"""

from __future__ import annotations

import click
import typer
from typer.core import TyperGroup

from gatedv_stats import __version__
from gatedv_stats.errors import InputError


class _Group(TyperGroup):
    """Turns an `InputError` raised anywhere below a command into one `error: <message>` line and exit 2."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except InputError as error:
            typer.echo(f"error: {error}", err=True)
            raise typer.Exit(2) from None


app = typer.Typer(
    cls=_Group,
    name="gatedv",
    help="Paired comparisons of Transformer variants: train, evaluate, bootstrap, report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gatedv-stats {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """gatedv: honest statistics for paired Transformer ablations."""


# --- statistics commands (issue 2, issue 8) ---

# --- model commands (issue 3) ---

# --- data commands (issue 4) ---

# --- training commands (issue 5) ---

# --- report commands (issue 6) ---

# --- cost benchmark commands (issue 7) ---


if __name__ == "__main__":
    app()
