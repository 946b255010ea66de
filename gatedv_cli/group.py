"""The group every `gatedv` command runs under: each failure ends as one `error:` line and its exit code.

Bad input (`InputError`) exits 2, a library `ParameterError` named by the command's flag of the same name; a run
cut short by something outside the inputs (`RunFailure`, a full disk: `NoSpaceError`, or an `OSError` ENOSPC /
EDQUOT from a write outside `gatedv_stats.core.atomic`) exits 4; Ctrl-C 130 and SIGTERM 143. A usage error (an
unknown option, a bad value, a missing argument) is one line naming the command's --help. NumPy floating-point
faults (overflow, division by zero, invalid values) raise instead of warning and end as bad input does.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any

import typer
from typer.core import TyperGroup

from gatedv_cli.click_api import click
from gatedv_cli.skipped import warning_skipped_on_failure
from gatedv_stats.core.atomic import is_no_space
from gatedv_stats.core.errors import InputError, ParameterError, RunFailure

INTERRUPTED = ("every file already written is kept: run the same command again to go on (a run resumes from its "
               "last checkpoint; gatedv train: with --resume)")

_COMMAND = "gatedv.command"  # the click context's meta key of the command being run, for naming its flags


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill PID`, a job's time limit) taken as Ctrl-C is: the command stops, its workers with it."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise Terminated


class CommandGroup(TyperGroup):
    """Turns an `InputError` raised anywhere below a command into one `error: <message>` line and exit 2 (a
    `RunFailure`: exit 4, Ctrl-C: exit 130); NumPy floating-point faults raise instead of warning and end as bad
    input does."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, windows_expand_args: bool = True, **extra: Any) -> Any:
        """Click's entry point, with a usage error (an unknown option, a bad value, a missing argument) as one
        `error:` line too, naming the command's --help."""
        def run() -> Any:
            return super(CommandGroup, self).main(args=args, prog_name=prog_name, complete_var=complete_var,
                                                  standalone_mode=False, windows_expand_args=windows_expand_args,
                                                  **extra)

        if not standalone_mode:
            return run()
        try:
            status = run()
        except click.exceptions.NoArgsIsHelpError as error:
            error.ctx.get_help()  # printed by typer's formatter
            sys.exit(error.exit_code)
        except click.exceptions.ClickException as error:
            ctx = getattr(error, "ctx", None)  # a usage error's
            where = f" (see '{ctx.command_path} --help')" if ctx else ""
            typer.echo(f"error: {error.format_message().rstrip('.')}{where}", err=True)
            sys.exit(error.exit_code)
        except typer.Abort:
            typer.echo("error: aborted", err=True)
            sys.exit(1)
        sys.exit(status if isinstance(status, int) else 0)

    def resolve_command(self, ctx: click.Context,
                        args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        ctx.meta[_COMMAND] = command  # for naming a flag after the command has failed
        return name, command, rest

    def invoke(self, ctx: click.Context) -> Any:
        import numpy as np

        in_main_thread = threading.current_thread() is threading.main_thread()  # where handlers can be set
        previous = signal.signal(signal.SIGTERM, _terminate) if in_main_thread else None
        try:
            with np.errstate(divide="raise", over="raise", invalid="raise"), warning_skipped_on_failure(ctx):
                return super().invoke(ctx)
        except FloatingPointError as error:
            typer.echo(f"error: numerical failure ({error}): the inputs hold values too extreme to compute with",
                       err=True)
            raise typer.Exit(2) from None
        except ParameterError as error:
            command = ctx.meta.get(_COMMAND)
            typer.echo(f"error: {error.render(lambda parameter: flag_of(command, parameter))}", err=True)
            raise typer.Exit(2) from None
        except InputError as error:
            typer.echo(f"error: {error}", err=True)
            raise typer.Exit(2) from None
        except RunFailure as error:
            typer.echo(f"error: {error}", err=True)
            raise typer.Exit(4) from None
        except OSError as error:  # a full disk past the atomic writes (a library's own files): the work cut short
            if not is_no_space(error):
                raise
            what = f"{error.filename}: could not be written" if error.filename else "a file could not be written"
            typer.echo(f"error: {what}: {error.strerror}; the outputs written before are kept whole (none is left "
                       "half written): free space on its file system, then run the same command again", err=True)
            raise typer.Exit(4) from None
        except KeyboardInterrupt as interruption:
            stopped_by = signal.SIGTERM if isinstance(interruption, Terminated) else signal.SIGINT
            typer.echo(f"error: interrupted ({stopped_by.name}); {INTERRUPTED}", err=True)
            raise typer.Exit(128 + stopped_by) from None
        finally:
            # a disposition set meanwhile stays (a data-parallel rank ending with an error ignores SIGTERM)
            if previous is not None and signal.getsignal(signal.SIGTERM) is _terminate:
                signal.signal(signal.SIGTERM, previous)


def flag_of(command: click.Command | None, parameter: str) -> str:
    """The option that sets a library parameter: command parameters carry the library's names (`n_resamples`
    is `--samples`); a group's subcommands are searched too."""
    commands = [command] if command is not None else []
    commands += list(getattr(command, "commands", {}).values())
    for candidate in commands:
        for param in candidate.params:
            if param.name == parameter and param.param_type_name == "option":
                return param.opts[0]
    return parameter
