"""A research ledger: every candidate compared, in the order it was compared, each kept or discarded by an online
procedure that bounds the share of false keeps over the whole stream (docs/statistics.md, "A research ledger:
online FDR").

An entry is one comparison (`analysis.compare`) of a candidate against a reference, on the pair's scale: its
estimate and interval, its one-sided p-value (H0: the candidate is not better; `stats.verdict.one_sided_p`),
then the level the procedure gives it (`stats.online_fdr`), keep or discard and the wealth left. The file
(`io.ledgerfile`) fixes the procedure and α at creation and chains the entries by hash; each new entry is decided
inside the write transaction, from the whole history replayed, so concurrent writers serialise.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from gatedv_stats.analysis.perplexity import Comparison
from gatedv_stats.analysis.task_scores import TaskComparison
from gatedv_stats.core import formatting as fmt
from gatedv_stats.core.defaults import DEFAULTS
from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.core.files import file_sha256
from gatedv_stats.io.ledgerfile import ledger_settings, ledger_writer, read_ledger
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.stats.intervals import ConfidenceInterval
from gatedv_stats.stats.online_fdr import DEFAULT_PROCEDURE, OnlineProcedure, online_decisions, online_procedure
from gatedv_stats.stats.scale import Scale
from gatedv_stats.stats.verdict import one_sided_p

HISTORY_COLUMNS = ("step", "time", "candidate", "against", "task", "estimate", "low", "high", "delta_p", "p_value",
                   "level", "decision", "wealth", "best_step", "best", "note")  # of `LedgerHistory.to_frame`, in order


@dataclass(frozen=True)
class LedgerEntry:
    """One candidate in the ledger, as stored (`to_dict` is the file's row)."""

    row: dict  # every column of io.ledgerfile.COLUMNS

    def __getattr__(self, name: str) -> object:
        if name.startswith("__") or name == "row":
            raise AttributeError(name)
        try:
            return self.row[name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def keep(self) -> bool:
        return self.row["decision"] == "keep"

    @property
    def scale_of(self) -> Scale:
        """The scale the estimate is read on."""
        return Scale(**self.row["scale"])

    def estimate_text(self) -> str:
        """"ΔP −2.03% [−3.10%, −0.95%]" (perplexity) or "+1.20 points [+0.40, +2.00] points" (a task metric)."""
        scale = self.scale_of
        if scale.log_ratio and self.row["delta_p"] is not None:
            interval = (self.row["delta_p_low"], self.row["delta_p_high"])
            return f"ΔP {fmt.format_delta_p(self.row['delta_p'])} {fmt.format_delta_p_interval(interval)}"
        return (f"{fmt.format_difference(self.row['estimate'], scale.proportion)} "
                f"{scale.format_interval(ConfidenceInterval(self.row['low'], self.row['high']))}")

    def to_dict(self) -> dict:
        return dict(self.row)

    def summary(self) -> str:
        """The entry in a few lines, as `gatedv ledger LEDGER add` prints it."""
        row = self.row
        task = f" on {row['task']} ({self.scale_of.metric})" if row["task"] else ""
        relation = "≤" if self.keep else ">"
        lines = [f"step {row['step']}: {row['candidate']} vs {row['reference']}{task}: {row['decision']} "
                 f"(one-sided p = {row['p_value']:.3g} {relation} level {row['level']:.3g}; "
                 f"{OnlineProcedure.from_dict(row['parameters']).describe()})",
                 f"  {self.estimate_text()} ({fmt.format_level(row['confidence_level'])} interval, {row['n_pairs']} "
                 f"seed pairs; verdict {row['verdict']}); wealth left {row['wealth']:.4g}"]
        if row["noise_floor"] or row["noise_floor_sha256"]:
            lines.append(f"  noise floor {row['noise_floor'] or '(in memory)'} (sha256 {row['noise_floor_sha256']})")
        if row["note"]:
            lines.append(f"  note: {row['note']}")
        lines.append(f"  hash {row['hash']}")
        return "\n".join(lines)


@dataclass(frozen=True)
class LedgerHistory:
    """Every entry of a ledger, its procedure, and the running best after each step."""

    path: str
    procedure: OnlineProcedure
    created: str
    entries: tuple[LedgerEntry, ...]

    @property
    def head(self) -> str | None:
        """The last entry's hash (None when empty): what anchors the whole history."""
        return self.entries[-1].row["hash"] if self.entries else None

    @property
    def kept(self) -> int:
        return sum(entry.keep for entry in self.entries)

    def running_best(self) -> tuple[LedgerEntry | None, ...]:
        """The running best after each step (None before the first keep): a kept candidate replaces it when it was
        compared with the current best (it beat it), or with something unrelated to it; against the current best's
        own reference it replaces it only with a more favourable estimate."""
        best: LedgerEntry | None = None
        out = []
        for entry in self.entries:
            if entry.keep and (best is None or entry.row["reference"] == best.row["candidate"]
                               or entry.row["reference"] != best.row["reference"] or entry.scale_of != best.scale_of
                               or (entry.row["estimate"] > best.row["estimate"] if entry.scale_of.higher_is_better
                                   else entry.row["estimate"] < best.row["estimate"])):
                best = entry
            out.append(best)
        return tuple(out)

    def headline(self) -> str:
        count = f"{len(self.entries)} {'entry' if len(self.entries) == 1 else 'entries'}"
        return f"{self.path}: {count}, {self.kept} kept; {self.procedure.describe()}"

    def to_frame(self) -> pd.DataFrame:
        """One row per entry with the running best beside it."""
        return pd.DataFrame([{**entry.row, "against": entry.row["reference"],
                              "best_step": None if best is None else best.row["step"],
                              "best": None if best is None else best.row["candidate"]}
                             for entry, best in zip(self.entries, self.running_best())], columns=list(HISTORY_COLUMNS))

    def to_dict(self) -> dict:
        return {"path": self.path, "procedure": self.procedure.to_dict(), "error_rate": self.procedure.error_rate,
                "created": self.created, "n_entries": len(self.entries), "n_kept": self.kept, "head": self.head,
                "entries": [entry.to_dict() for entry in self.entries],
                "running_best": [None if best is None else best.row["step"] for best in self.running_best()]}

    def summary(self) -> str:
        """The history as a table, as `gatedv ledger LEDGER show` prints it."""
        lines = [f"ledger {self.headline()}", f"created {self.created}; chain checked, head {self.head or '—'}"]
        if not self.entries:
            return "\n".join(lines + ["no entries yet"])
        header = ("step", "candidate", "against", "estimate [interval]", "p", "level", "decision", "wealth", "best")
        rows = [(str(entry.row["step"]), entry.row["candidate"], entry.row["reference"], entry.estimate_text(),
                 f"{entry.row['p_value']:.3g}", f"{entry.row['level']:.3g}", entry.row["decision"],
                 f"{entry.row['wealth']:.4g}", "—" if best is None else f"{best.row['candidate']} ({best.row['step']})")
                for entry, best in zip(self.entries, self.running_best())]
        notes = [f"note, step {entry.row['step']}: {entry.row['note']}" for entry in self.entries if entry.row["note"]]
        return "\n".join(lines + fmt.text_table(header, rows, "rlllrrlrl") + notes)


def add_entry(path: str | os.PathLike[str], comparison: Comparison | TaskComparison, paired: Paired, *,
              procedure: str | None = None, alpha: float | None = None, noise_floor: str | None = None,
              noise_floor_sha256: str | None = None, note: str | None = None) -> LedgerEntry:
    """Record one comparison in the ledger at `path` (created with `procedure` and `alpha`, default ADDIS at 0.05,
    when new): its one-sided p is tested at the level the procedure gives the next step. A `procedure` or `alpha`
    other than the ledger's is refused."""
    content = comparison_content(comparison, paired)
    requested = online_procedure(procedure or DEFAULT_PROCEDURE, DEFAULTS.alpha if alpha is None else alpha)
    with ledger_writer(path, {"procedure": requested.to_dict()}) as writer:
        chosen = OnlineProcedure.from_dict(writer.settings["procedure"])
        check_settings(writer.where, chosen, procedure, alpha)
        p_values = [entry["p_value"] for entry in writer.entries] + [content["p_value"]]
        decisions = online_decisions(p_values, chosen)
        for entry, decision in zip(writer.entries, decisions):
            if entry["decision"] != ("keep" if decision.keep else "discard") or not math.isclose(
                    entry["level"], decision.level, rel_tol=1e-9, abs_tol=1e-15):
                raise InputError(f"{writer.where}: entry {entry['step']}'s recorded level or decision differs from "
                                 f"{chosen.describe()} replayed over the history (written by another version of the "
                                 "procedure?)")
        last = decisions[-1]
        row = writer.append({**content, "noise_floor": noise_floor, "noise_floor_sha256": noise_floor_sha256,
                             "note": note, "procedure": chosen.procedure, "parameters": chosen.to_dict(),
                             "alpha": chosen.alpha, "level": last.level, "decision": "keep" if last.keep else "discard",
                             "wealth": last.wealth})
    return LedgerEntry(row)


def check_settings(where: str, chosen: OnlineProcedure, procedure: str | None, alpha: float | None) -> None:
    """A procedure or α asked for that is not the ledger's: refused (they are fixed when the ledger is created)."""
    if procedure is not None and procedure != chosen.procedure:
        raise ParameterError("procedure", f"{where} was created with {chosen.procedure} at α = {chosen.alpha:g}; its "
                             f"procedure is fixed for its whole history (start a new ledger for {procedure})")
    if alpha is not None and not math.isclose(alpha, chosen.alpha, rel_tol=1e-12):
        raise ParameterError("alpha", f"{where} was created with α = {chosen.alpha:g} ({chosen.procedure}); α is "
                             f"fixed for its whole history (start a new ledger for α = {alpha:g})")


def check_ledger(path: str | os.PathLike[str], procedure: str | None = None, alpha: float | None = None) -> None:
    """`procedure` and `alpha` are valid, and those of the ledger at `path` if it exists (else refused)."""
    online_procedure(procedure or DEFAULT_PROCEDURE, DEFAULTS.alpha if alpha is None else alpha)
    settings = ledger_settings(path)
    if settings is not None:
        check_settings(os.fspath(path), OnlineProcedure.from_dict(settings["procedure"]), procedure, alpha)


def read_history(path: str | os.PathLike[str], *, procedure: str | None = None,
                 alpha: float | None = None) -> LedgerHistory:
    """The ledger at `path`, its chain checked; a `procedure` or `alpha` other than its own is refused."""
    settings, rows = read_ledger(path)
    chosen = OnlineProcedure.from_dict(settings["procedure"])
    check_settings(os.fspath(path), chosen, procedure, alpha)
    return LedgerHistory(os.fspath(path), chosen, settings["created"], tuple(LedgerEntry(row) for row in rows))


def comparison_content(comparison: Comparison | TaskComparison, paired: Paired) -> dict:
    """The columns of an entry that one comparison gives: the arms, the files, the estimate, its interval and the
    one-sided p-value on the pair's scale."""
    fit = comparison.seed_document if isinstance(comparison, Comparison) else comparison.interval
    if fit is None:
        raise InputError(f"{paired.variant_arm} against {paired.baseline_arm}: no test over training seeds (one seed "
                         "pair without a noise floor, or no spread between the arms), so nothing to enter in the "
                         "ledger; give more seed pairs or the setup's noise floor")
    log_ratio = paired.scale.log_ratio
    return {
        "candidate": paired.variant_arm, "reference": paired.baseline_arm, "task": paired.task, "unit": paired.unit,
        "scale": asdict(paired.scale),
        "n_pairs": paired.n_pairs, "candidate_files": source_files(paired, "variant"),
        "reference_files": source_files(paired, "baseline"), "estimate": fit.nll_diff_mean,
        "low": fit.confidence_interval.low, "high": fit.confidence_interval.high,
        "confidence_level": fit.confidence_level, "se": fit.se, "df": fit.df,
        "delta_p": fit.delta_p if log_ratio else None,
        "delta_p_low": fit.delta_p_interval.low if log_ratio else None,
        "delta_p_high": fit.delta_p_interval.high if log_ratio else None,
        "p_value": one_sided_p(fit.nll_diff_mean, fit.se, fit.df, paired.scale.higher_is_better),
        "verdict": comparison.verdict_text,
    }


def source_files(paired: Paired, side: str) -> list[dict]:
    """The files one arm was read from, each once, with its SHA-256 (None for data that came from no file)."""
    sources = [str(source) for source in paired.sources.get(side, [])]
    hashes = paired.sources.get(f"{side}_sha256") or [None] * len(sources)
    files: dict[str, str | None] = {}
    for source, recorded in zip(sources, hashes):
        path = source.rsplit("[", 1)[0] if source.endswith("]") else source  # a run of a long table
        if path not in files:
            files[path] = recorded or (file_sha256(path) if Path(path).is_file() else None)
    return [{"path": path, "sha256": sha256} for path, sha256 in files.items()]
