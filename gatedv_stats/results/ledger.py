"""The API results of a research ledger: one entry as it was added (`gv.Ledger.add`), and the whole history
(`gv.Ledger.history`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pandas as pd

from gatedv_stats.analysis.ledger import LedgerEntry, LedgerHistory
from gatedv_stats.reporting.model import Table
from gatedv_stats.reporting.sections.ledger import ledger_table
from gatedv_stats.results.base import Result


@dataclass(frozen=True, repr=False)
class LedgerEntryResult(Result):
    """One candidate entered in a ledger: its estimate, one-sided p, level, keep or discard and the wealth left; its
    fields (`step`, `decision`, `p_value`, `level`, `wealth`, …) are the entry's columns."""

    entry: LedgerEntry
    history: LedgerHistory  # the ledger with this entry, for the running best
    warnings: tuple[str, ...] = ()  # the comparison's own (seeds dropped, mismatches accepted, …)
    skipped: None = None
    wraps: ClassVar[str] = "entry"

    def headline(self) -> str:
        row = self.entry.row
        return (f"step {row['step']}: {row['candidate']} vs {row['reference']}: {row['decision']} "
                f"(p {row['p_value']:.3g}, level {row['level']:.3g}, wealth {row['wealth']:.4g})")

    def to_frame(self) -> pd.DataFrame:
        frame = self.history.to_frame()
        return frame[frame["step"] == self.entry.row["step"]].reset_index(drop=True)

    def tables(self) -> list[Table]:
        return [ledger_table(self.history, step=self.entry.row["step"])]


@dataclass(frozen=True, repr=False)
class LedgerResult(Result):
    """A ledger's history: every entry in order, the running best after each step, the procedure and its wealth."""

    history: LedgerHistory
    skipped: None = None
    wraps: ClassVar[str] = "history"

    def headline(self) -> str:
        return self.history.headline()

    def to_frame(self) -> pd.DataFrame:
        return self.history.to_frame()

    def tables(self) -> list[Table]:
        return [ledger_table(self.history)]
