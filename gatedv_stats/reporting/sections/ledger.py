"""A research ledger (`gatedv report … --ledger LEDGER`): every candidate in the order it was compared, kept or
discarded by the ledger's online procedure, with the running best and its interval after each step and the wealth
the procedure has left."""

from __future__ import annotations

from pathlib import Path

from gatedv_stats.analysis.ledger import LedgerHistory
from gatedv_stats.reporting import plots
from gatedv_stats.reporting.cells import MISSING
from gatedv_stats.reporting.model import Cell, Figure, RowGroup, Section, Table, row
from gatedv_stats.stats.online_fdr import NAMES

KEY, TITLE = "ledger", "Research ledger"
ASSUMPTIONS = ("Candidates compared with the same reference runs on one evaluation set share that reference's seed "
               "noise, which makes their tests positively dependent. LOND (the default) bounds the false discovery "
               "rate under that positive dependence, e-LOND under any dependence, alpha-spending the chance of any "
               "false keep under any dependence; ADDIS, LORD++ and SAFFRON bound it only when the tests of candidates "
               "that are not better are independent. A candidate decided by a sequential design enters with the "
               "design's stage-wise p-value, which its early stop leaves valid.")
ADVICE = ("Compare each candidate with fresh seeds of the current best, not with the runs it won with (they carry "
          "the luck that made it win: the winner's curse), and anchor equivalence decisions to one fixed reference: "
          "a chain of \"no worse\" keeps can drift by up to one smallest effect of interest per step (bio-creep).")


def ledger_section(history: LedgerHistory) -> Section:
    procedure = history.procedure
    bound = ("the expected share of false keeps among the keeps (the false discovery rate)" if
             procedure.error_rate == "FDR" else "the chance of any false keep (the family-wise error rate)")
    count = len(history.decided) + len(history.running)
    name = Path(history.path).name  # the full path is in the settings table, which fits the page
    intro = (f"{name}: {count} {'candidate' if count == 1 else 'candidates'} in the order compared, each kept or "
             f"discarded by {procedure.describe()} from its one-sided p-value (H0: the candidate is not better "
             "than what it was compared with). Each test's level depends only on the tests before it, so over the "
             f"whole stream {bound} stays at most {procedure.alpha:g}.", ASSUMPTIONS, ADVICE,
             "The entries are chained by SHA-256 and checked when read; the last entry's hash (the head, below) "
             "anchors the whole history.")
    if not history.entries:
        return Section(KEY, TITLE, intro=intro + ("The ledger has no entries yet.",), tables=(settings_table(history),))
    steps = history.to_frame()[["step", "wealth", "level", "decision", "candidate"]]
    earned = ("a keep earns wealth back, and at zero no further candidate could be kept" if procedure.earns else
              "the part of α its γ sequence has not spent yet, which only falls")
    figure = Figure("ledger-wealth", "Wealth of the ledger's procedure",
                    f"The wealth {procedure.describe()} has left after each step (points: keep or discard); "
                    f"{earned}.",
                    plots.chart_spec(plots.ledger_wealth_chart(steps, title="Wealth left per step")))
    return Section(KEY, TITLE, intro=intro, tables=(settings_table(history), ledger_table(history)),
                   figures=(figure,))


def settings_table(history: LedgerHistory) -> Table:
    """The ledger's procedure, fixed when it was created, and where its history stands."""
    procedure = history.procedure
    parameters = ", ".join(f"{name} = {value:g}" for name, value in (("W0", procedure.w0 if procedure.earns else None),
                                                                       ("λ", procedure.lambda_), ("τ", procedure.tau))
                           if value is not None)
    rows = (row("File", history.path), row("Procedure", NAMES[procedure.procedure]),
            row("Controls", procedure.error_rate), row("Level α", f"{procedure.alpha:g}"),
            row("Parameters", f"{parameters}{'; ' if parameters else ''}{procedure.gamma}"),
            row("Created", history.created), row("Entries", str(len(history.decided))),
            *([row("Running (sequential, started)", str(len(history.running)))] if history.running else []),
            row("Kept", str(history.kept)),
            row("Head (last entry's SHA-256)", Cell(history.head or MISSING, mono=True)))
    caption = f"Ledger {Path(history.path).name}: its procedure and α, fixed when it was created."
    return Table("ledger-settings", caption, ("Setting", "Value"), "ll", (RowGroup(None, rows),))


def ledger_table(history: LedgerHistory, step: int | None = None) -> Table:
    """The history, one row per decided entry and per sequential candidate still running (only `step`, when given),
    with the running best and its interval."""
    best_of = dict(zip((entry.row["step"] for entry in history.decided), history.running_best()))
    entries = [entry for entry in (*history.decided, *history.running) if step in (None, entry.row["step"])]
    rows = []
    for entry in sorted(entries, key=lambda entry: int(entry.row["step"])):
        best = best_of.get(entry.row["step"])
        rows.append(row(str(entry.row["step"]), entry.row["candidate"], entry.row["reference"], entry.estimate_text(),
                        entry.p_text(), f"{entry.row['level']:.3g}", Cell(entry.row["decision"], bold=entry.keep),
                        f"{entry.row['wealth']:.4g}",
                        MISSING if best is None else f"{best.row['candidate']} (step {best.row['step']}): "
                                                     f"{best.estimate_text()} vs {best.row['reference']}"))
    notes = tuple(f"Step {entry.row['step']}: {entry.row['note']}" for entry in entries if entry.row["note"])
    notes += tuple(f"{note[0].upper()}{note[1:]}." for note in history.notes(step))
    levels = [entry.row["confidence_level"] for entry in history.decided if entry.row["p_source"] != "stage-wise"]
    level = levels[0] if levels else 0.95
    caption = (f"Ledger history ({history.procedure.describe()}). Estimates with their {level:.0%} seeds × units "
               "interval against the arm compared with (a sequential candidate's: its median-unbiased estimate and "
               "repeated interval); the one-sided p is tested at the step's level.")
    return Table("ledger", caption, ("Step", "Candidate", "Against", "Estimate [interval]", "One-sided p", "Level",
                                     "Decision", "Wealth left", "Running best [interval]"), "rlllrrlrl",
                 (RowGroup(None, tuple(rows)),), notes)
