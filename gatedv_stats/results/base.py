"""The presentation every API result shares: a one-line `repr`, the command line's text (`str`) and `--json`
object (`to_dict`), a DataFrame (`to_frame`) and the report's tables in a notebook (`_repr_html_`)."""


from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import pandas as pd

from gatedv_stats.io.runfiles import SkippedFile
from gatedv_stats.reporting.model import RowGroup, Table, row
from gatedv_stats.reporting.render import tables_html


class Result(ABC):
    """The presentation every API result shares: by default the wrapped library result's own (`headline`,
    `summary`, `to_dict`, `to_frame`)."""

    skipped: tuple[SkippedFile, ...] | None  # unreadable files passed over (None: none were allowed)
    wraps: ClassVar[str] = ""  # the field that holds the library result presented, whose fields the result forwards

    def __getattr__(self, name: str) -> Any:
        """An attribute of the wrapped library result (never a dunder, so copying and pickling stay plain)."""
        if name.startswith("__") or not self.wraps or name == self.wraps:
            raise AttributeError(name)
        return getattr(getattr(self, self.wraps), name)

    def headline(self) -> str:
        """The result in one line (its `repr` without the type name)."""
        return getattr(self, self.wraps).headline()

    def summary(self) -> str:
        """The command line's text output."""
        return getattr(self, self.wraps).summary()

    def to_dict(self) -> dict:
        """The command line's `--json` object (JSON-ready; NaN where the command prints null)."""
        return {**getattr(self, self.wraps).to_dict(), **self._skipped()}

    def to_frame(self) -> pd.DataFrame:
        """The result as a table, one row per comparison (or run, or quantity)."""
        return getattr(self, self.wraps).to_frame()

    @abstractmethod
    def tables(self) -> list[Table]:
        """The report's tables for this result."""

    @property
    def warnings(self) -> tuple[str, ...]:
        """What limits or changes the result, for the command line's stderr (the summary holds its notes): the
        wrapped result's `warnings`, where it has them."""
        return getattr(getattr(self, self.wraps), "warnings", ()) if self.wraps else ()

    def _skipped(self) -> dict:
        return {} if self.skipped is None else {"skipped_unreadable": [file.to_dict() for file in self.skipped]}

    def _repr_html_(self) -> str:
        return tables_html(self.tables())

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        return f"{type(self).__name__.removesuffix('Result')}({self.headline()})"


def planned_at(level: str | None) -> str:
    """The line that says where a plan's level came from, before its summary (nothing when it was given)."""
    return "" if level is None else f"{level}\n"


def plan_quantities(plan: Any) -> dict[str, Any]:
    """A plan's figures: what its `to_dict` holds that is not a mapping."""
    return {key: value for key, value in plan.to_dict().items() if not isinstance(value, dict)}


def quantities_table(quantities: dict[str, Any], caption: str) -> Table:
    """A table of a plan's quantities, one per row."""
    rows = tuple(row(key, "—" if value is None else f"{value:g}" if isinstance(value, float) else str(value))
                 for key, value in quantities.items())
    return Table("plan", caption, ("Quantity", "Value"), "lr", (RowGroup(None, rows),))
