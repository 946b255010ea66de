"""The click that typer runs on, for its contexts, commands and exceptions: recent typer carries its own copy
(`typer._click`), older typer uses the click package."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typer import _click as click
else:
    try:
        from typer import _click as click
    except ImportError:
        import click

__all__ = ["click"]
