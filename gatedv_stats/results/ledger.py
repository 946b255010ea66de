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
    """`gv.Ledger.add`: one candidate entered in a ledger: its estimate, one-sided p, level, keep or discard and the
    wealth left; its fields (`step`, `decision`, `p_value`, `level`, `wealth`, …) are the entry's columns.

    Parameters
    ----------
    entry
        The entry as stored.
    history
        The ledger with this entry, for the running best.
    warnings
        The comparison's own (seeds dropped, mismatches accepted, …).
    skipped
        Always None: a ledger entry passes over no file.

    Examples
    --------
    >>> study = example_study(tmp_dir)
    >>> ledger = gv.Ledger(tmp_dir / "study.ledger")
    >>> result = ledger.add(sorted(study.glob("gatedv-*")), against=sorted(study.glob("baseline-*")))
    >>> result
    LedgerEntry(step 1: gatedv vs baseline: keep (p 0.000725, level 0.00268, wealth 0.04732))
    >>> result.to_frame()[["step", "decision", "best"]].values.tolist()
    [[1, 'keep', 'gatedv']]
    """

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
    """`gv.Ledger.history`: a ledger's history: every entry in order, the running best after each step, the
    procedure and its wealth.

    Parameters
    ----------
    history
        The history read, its chain checked; its fields are reachable on the result.
    skipped
        Always None: a ledger's history passes over no file.

    Examples
    --------
    >>> study = example_study(tmp_dir)
    >>> ledger = gv.Ledger(tmp_dir / "study.ledger")
    >>> _ = ledger.add(sorted(study.glob("gatedv-*")), against=sorted(study.glob("baseline-*")), note="gated values")
    >>> result = ledger.history()
    >>> result.kept, result.to_frame()[["step", "candidate", "decision", "note"]].values.tolist()
    (1, [[1, 'gatedv', 'keep', 'gated values']])
    """

    history: LedgerHistory
    skipped: None = None
    wraps: ClassVar[str] = "history"

    def tables(self) -> list[Table]:
        return [ledger_table(self.history)]
