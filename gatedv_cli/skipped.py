"""The unreadable files one command passed over (`--skip-unreadable`): warned about once each, on success and on
failure.

The list belongs to the invocation: the group puts a fresh one in the click context's `meta` (shared by the
group's context and its command's) before the command runs, and warns about what is left in it if the command
fails.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import typer

from gatedv_cli.click_api import click
from gatedv_stats.io.runfiles import SkippedFile

_META_KEY = "gatedv.skipped"


def skipped_files(ctx: click.Context, skip_unreadable: bool) -> list[SkippedFile] | None:
    """The list that reading fills with the unreadable files it passes over (None: fail on them instead)."""
    return ctx.meta[_META_KEY] if skip_unreadable else None


def warn_skipped(skipped: list[SkippedFile] | None) -> dict:
    """One stderr warning per unreadable file passed over; returns the JSON key listing them ({} without
    --skip-unreadable)."""
    if skipped is None:
        return {}
    unique = list(dict.fromkeys(skipped))
    skipped.clear()  # warned once
    for file in unique:
        typer.echo(f"warning: {file.warning()}", err=True)
    return {"skipped_unreadable": [file.to_dict() for file in unique]}


@contextlib.contextmanager
def warning_skipped_on_failure(ctx: click.Context) -> Iterator[None]:
    """Runs a command with its own list of skipped files; a command that fails after passing over unreadable
    files says which, before its error line."""
    skipped: list[SkippedFile] = []
    ctx.meta[_META_KEY] = skipped
    try:
        yield
    except BaseException:
        warn_skipped(skipped)
        raise
