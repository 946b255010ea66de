"""A research ledger: every candidate compared, in the order it was compared, each kept or discarded by an online
procedure that bounds the share of false keeps over the whole stream (docs/research-ledger.md).

An entry is one comparison of a candidate against a reference, on the pair's scale: its estimate and interval, its
one-sided p-value (H0: the candidate is not better; a fixed-sample comparison's `stats.verdict.one_sided_p`, a
sequential design's stage-wise p), the level the procedure gave it (`stats.online_fdr`), keep or discard and the
wealth left. A candidate decided by a sequential design over seed pairs may be started first: its level is fixed
then (a "start" row) and used when it stops (its entry names the start). This module reads and shows the history
(`analysis.ledger_entries` writes it); the file (`io.ledgerfile`) fixes the procedure and α at creation
(`LedgerSettings`) and chains the rows by hash.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import pandas as pd

from gatedv_stats.core import formatting as fmt
from gatedv_stats.core.defaults import DEFAULTS
from gatedv_stats.core.errors import ParameterError
from gatedv_stats.io.ledgerfile import ledger_settings, read_ledger
from gatedv_stats.stats.intervals import ConfidenceInterval
from gatedv_stats.stats.online_fdr import ASSUMES, DEFAULT_PROCEDURE, NAMES, OnlineProcedure, online_procedure
from gatedv_stats.stats.scale import Scale, scale_from_dict

HISTORY_COLUMNS = ("step", "time", "candidate", "against", "task", "estimate", "low", "high", "delta_p", "p_value",
                   "level", "decision", "wealth", "best_step", "best", "note")  # of `LedgerHistory.to_frame`, in order
RUNNING = "running"  # the decision column of a sequential candidate started and not stopped yet


@dataclass(frozen=True)
class LedgerEntry:
    """One row of the ledger, as stored (`to_dict` is the file's row): an entry, or a sequential candidate's start."""

    row: dict  # every column of io.ledgerfile.COLUMNS

    def __getattr__(self, name: str) -> object:
        if name.startswith("__") or name == "row" or name not in self.row:
            raise AttributeError(name)
        return self.row[name]

    @property
    def keep(self) -> bool:
        return self.row["decision"] == "keep"

    @property
    def is_start(self) -> bool:
        """A sequential candidate's start: its level fixed, its decision to come in a later entry."""
        return self.row.get("kind") == "start"

    @property
    def scale_of(self) -> Scale:
        """The scale the estimate is read on."""
        return scale_from_dict(self.row["scale"])

    def estimate_text(self) -> str:
        """"ΔP −2.03% [−3.10%, −0.95%]" (perplexity) or "+1.20 points [+0.40, +2.00] points" (a task metric)."""
        scale = self.scale_of
        if self.is_start or self.row.get("estimate") is None:
            return "—"
        # an end stored as null is unbounded (a repeated interval at a look that spent nothing)
        if scale.log_ratio and self.row["delta_p"] is not None:
            interval = (_or(self.row["delta_p_low"], -1.0), _or(self.row["delta_p_high"], math.inf))
            return f"ΔP {fmt.format_delta_p(self.row['delta_p'])} {fmt.format_delta_p_interval(interval)}"
        interval = ConfidenceInterval(_or(self.row["low"], -math.inf), _or(self.row["high"], math.inf))
        return f"{fmt.format_difference(self.row['estimate'], scale.proportion)} {scale.format_interval(interval)}"

    def p_text(self) -> str:
        """The one-sided p (the e-value too, where the procedure tests e-values)."""
        if self.row["p_value"] is None:
            return "—"
        return f"{self.row['p_value']:.3g}" + ("" if self.row.get("e_value") is None else
                                                f" (e {self.row['e_value']:.3g})")

    def to_dict(self) -> dict:
        return dict(self.row)

    def summary(self) -> str:
        """The row in a few lines, as `gatedv ledger LEDGER add` prints it."""
        row = self.row
        task = f" on {row['task']} ({self.scale_of.metric})" if row["task"] else ""
        described = OnlineProcedure.from_dict(row["parameters"]).describe()
        if self.is_start:
            lines = [f"step {row['step']}: {row['candidate']} vs {row['reference']}{task}: started (level "
                     f"{row['level']:.3g} fixed for its sequential design {str(row['design_sha256'])[:12]}; "
                     f"{described})", f"  design {row['design']}"]
        else:
            tested = (f"e = {row['e_value']:.3g} {'≥' if self.keep else '<'} 1/level {1.0 / row['level']:.3g}"
                      if row.get("e_value") is not None else
                      f"one-sided p = {row['p_value']:.3g} {'≤' if self.keep else '>'} level {row['level']:.3g}")
            source = "" if row.get("p_source") != "stage-wise" else ", stage-wise"
            started = "" if row.get("start_step") is None else f", started at step {row['start_step']}"
            lines = [f"step {row['step']}: {row['candidate']} vs {row['reference']}{task}: {row['decision']} "
                     f"({tested}{source}{started}; {described})",
                     f"  {self.estimate_text()} ({fmt.format_level(row['confidence_level'])} "
                     f"{'repeated ' if source else ''}interval, {row['n_pairs']} seed pairs; "
                     f"{'decision' if source else 'verdict'} {row['verdict']}); wealth left {row['wealth']:.4g}"]
            if row.get("design"):
                lines.append(f"  sequential design {row['design']} (sha256 {row['design_sha256']})")
        if row["noise_floor"] or row["noise_floor_sha256"]:
            lines.append(f"  noise floor {row['noise_floor'] or '(in memory)'} (sha256 {row['noise_floor_sha256']})")
        if row.get("shared_reference"):
            lines.append(f"  note: {dependence_note(self)}")
        if row["note"]:
            lines.append(f"  note: {row['note']}")
        lines.append(f"  hash {row['hash']}")
        return "\n".join(lines)


def _or(value: float | None, unbounded: float) -> float:
    return unbounded if value is None else value


def dependence_note(entry: LedgerEntry) -> str:
    """Which earlier rows the entry's reference shares runs with, and what that means for its procedure."""
    steps = ", ".join(str(step) for step in entry.row["shared_reference"])
    return (f"its reference shares runs with step{'s' if ',' in steps else ''} {steps}: "
            f"{_dependence_meaning(OnlineProcedure.from_dict(entry.row['parameters']))}")


def _dependence_meaning(chosen: OnlineProcedure) -> str:
    if chosen.assumes_independence:
        return (f"the tests are dependent, which {NAMES[chosen.procedure]}'s guarantee (for independent tests) does "
                "not cover; LOND controls the FDR under this positive dependence and e-LOND under any (a new ledger: "
                "--procedure lond)")
    return f"the tests are dependent, which {NAMES[chosen.procedure]}'s guarantee allows ({ASSUMES[chosen.procedure]})"


@dataclass(frozen=True)
class LedgerHistory:
    """Every row of a ledger, its procedure, and the running best after each decided entry."""

    path: str
    procedure: OnlineProcedure
    created: str
    entries: tuple[LedgerEntry, ...]

    @property
    def head(self) -> str | None:
        """The last row's hash (None when empty): what anchors the whole history."""
        return self.entries[-1].row["hash"] if self.entries else None

    @property
    def decided(self) -> tuple[LedgerEntry, ...]:
        """The entries that were decided: fixed-sample candidates and sequential candidates that stopped."""
        return tuple(entry for entry in self.entries if not entry.is_start)

    @property
    def running(self) -> tuple[LedgerEntry, ...]:
        """The sequential candidates started and not stopped yet."""
        finished = {entry.row.get("start_step") for entry in self.entries}
        return tuple(entry for entry in self.entries if entry.is_start and entry.row["step"] not in finished)

    @property
    def kept(self) -> int:
        return sum(entry.keep for entry in self.entries)

    def running_best(self) -> tuple[LedgerEntry | None, ...]:
        """The running best after each decided entry (None before the first keep): a kept candidate replaces it
        when it was compared with the current best (it beat it), or with something unrelated to it; against the
        current best's own reference it replaces it only with a more favourable estimate."""
        best: LedgerEntry | None = None
        out = []
        for entry in self.decided:
            if entry.keep and (best is None or entry.row["reference"] == best.row["candidate"]
                               or entry.row["reference"] != best.row["reference"] or entry.scale_of != best.scale_of
                               or (entry.row["estimate"] > best.row["estimate"] if entry.scale_of.higher_is_better
                                   else entry.row["estimate"] < best.row["estimate"])):
                best = entry
            out.append(best)
        return tuple(out)

    def headline(self) -> str:
        count = len(self.decided)
        running = f", {len(self.running)} running" if self.running else ""
        return (f"{self.path}: {count} {'entry' if count == 1 else 'entries'}, {self.kept} kept{running}; "
                f"{self.procedure.describe()}")

    def notes(self, step: int | None = None) -> tuple[str, ...]:
        """The standing note on the entries whose reference shares runs with an earlier entry's (only `step`'s,
        when given): one line, naming them."""
        shown = [entry for entry in (*self.decided, *self.running) if entry.row.get("shared_reference")
                 and step in (None, entry.row["step"])]
        if not shown:
            return ()
        steps = ", ".join(str(entry.row["step"]) for entry in shown)
        return (f"step{'s' if len(shown) > 1 else ''} {steps}: the reference shares runs with an earlier entry's: "
                f"{_dependence_meaning(self.procedure)}",)

    def to_frame(self) -> pd.DataFrame:
        """One row per decided entry with the running best beside it."""
        return pd.DataFrame([{**entry.row, "against": entry.row["reference"],
                              "best_step": None if best is None else best.row["step"],
                              "best": None if best is None else best.row["candidate"]}
                             for entry, best in zip(self.decided, self.running_best())], columns=list(HISTORY_COLUMNS))

    def to_dict(self) -> dict:
        return {"path": self.path, "procedure": self.procedure.to_dict(), "error_rate": self.procedure.error_rate,
                "assumes": ASSUMES[self.procedure.procedure], "created": self.created,
                "n_entries": len(self.decided), "n_kept": self.kept, "n_running": len(self.running),
                "head": self.head, "entries": [entry.to_dict() for entry in self.entries],
                "running_best": [None if best is None else best.row["step"] for best in self.running_best()],
                "notes": list(self.notes())}

    def summary(self) -> str:
        """The history as a table, as `gatedv ledger LEDGER show` prints it."""
        lines = [f"ledger {self.headline()}", f"created {self.created}; chain checked, head {self.head or '—'}"]
        if not self.entries:
            return "\n".join(lines + ["no entries yet"])
        header = ("step", "candidate", "against", "estimate [interval]", "p", "level", "decision", "wealth", "best")
        best_of = dict(zip((entry.row["step"] for entry in self.decided), self.running_best()))
        rows = [(str(entry.row["step"]), entry.row["candidate"], entry.row["reference"], entry.estimate_text(),
                 entry.p_text(), f"{entry.row['level']:.3g}", entry.row["decision"], f"{entry.row['wealth']:.4g}",
                 "—" if best_of.get(entry.row["step"]) is None else
                 f"{best_of[entry.row['step']].row['candidate']} ({best_of[entry.row['step']].row['step']})")
                for entry in self.entries if entry in self.decided or entry in self.running]
        notes = [f"note, step {entry.row['step']}: {entry.row['note']}" for entry in (*self.decided, *self.running)
                 if entry.row["note"]]
        return "\n".join(lines + fmt.text_table(header, rows, "rlllrrlrl") + notes
                         + [f"note, {note}" for note in self.notes()])


@dataclass(frozen=True)
class LedgerSettings:
    """What a ledger is created with: the procedure and α (checked against an existing ledger's) and, for e-LOND,
    the smallest effect of interest its e-values are likelihood ratios at."""

    procedure: str | None = None
    alpha: float | None = None
    sesoi: float | None = None

    def requested(self) -> OnlineProcedure:
        return online_procedure(self.procedure or DEFAULT_PROCEDURE, DEFAULTS.alpha if self.alpha is None
                                else self.alpha)

    def file_settings(self) -> dict:
        """The settings of a new ledger's file."""
        chosen = self.requested()
        if chosen.e_values and self.sesoi is None:
            raise ParameterError("sesoi", "an e-LOND ledger tests e-values, likelihood ratios at the smallest effect "
                                 "of interest: give it ({sesoi}) when the ledger is created", leading=False)
        return {"procedure": chosen.to_dict(), **({"sesoi": self.sesoi} if chosen.e_values else {})}


def checked_procedure(where: str, settings: dict, procedure: str | None, alpha: float | None) -> OnlineProcedure:
    """The procedure of a ledger's `settings`; a procedure or α asked for that is not the ledger's is refused (they
    are fixed when the ledger is created)."""
    chosen = OnlineProcedure.from_dict(settings["procedure"])
    if procedure is not None and procedure != chosen.procedure:
        raise ParameterError("procedure", f"{where} was created with {chosen.procedure} at α = {chosen.alpha:g}; its "
                             f"procedure is fixed for its whole history (start a new ledger for {procedure})")
    if alpha is not None and not math.isclose(alpha, chosen.alpha, rel_tol=1e-12):
        raise ParameterError("alpha", f"{where} was created with α = {chosen.alpha:g} ({chosen.procedure}); α is "
                             f"fixed for its whole history (start a new ledger for α = {alpha:g})")
    return chosen


def ledger_procedure(path: str | os.PathLike[str], procedure: str | None = None,
                     alpha: float | None = None) -> OnlineProcedure:
    """The procedure of the ledger at `path`, or the one a new ledger there would be created with (`procedure`,
    default LOND, at `alpha`, default 0.05); a `procedure` or `alpha` other than an existing ledger's is refused."""
    requested = LedgerSettings(procedure, alpha).requested()
    settings = ledger_settings(path)
    return requested if settings is None else checked_procedure(os.fspath(path), settings, procedure, alpha)


def read_history(path: str | os.PathLike[str], *, procedure: str | None = None,
                 alpha: float | None = None) -> LedgerHistory:
    """The ledger at `path`, its chain checked; a `procedure` or `alpha` other than its own is refused."""
    settings, rows = read_ledger(path)
    chosen = checked_procedure(os.fspath(path), settings, procedure, alpha)
    return LedgerHistory(os.fspath(path), chosen, settings["created"], tuple(LedgerEntry(row) for row in rows))
