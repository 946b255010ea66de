"""The API result of a sequential look (`gv.sequential`, `gatedv decide`): the decision of this look, and the design
with every look taken."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import pandas as pd

from gatedv_stats.analysis.ledger import LedgerEntry
from gatedv_stats.analysis.sequential_design import Look, SequentialDesign
from gatedv_stats.io.runfiles import SkippedFile
from gatedv_stats.reporting.model import RowGroup, Table, row
from gatedv_stats.results.base import Result


@dataclass(frozen=True, repr=False)
class SequentialResult(Result):
    """`gv.sequential`: one look of a group-sequential design: `decision`, `stop` and `line` ("continue: train seed
    pair k+1" or "stop: <decision> (…)"), the look's figures (`look`) and the design with every look (`design`).

    Parameters
    ----------
    design
        The design with every look so far.
    look
        This look: estimate, SE, df, boundaries, the repeated confidence interval and the decision; its fields are
        reachable on the result.
    written
        The design file written (None: nothing new was recorded).
    new_design
        This look created the design.
    already_recorded
        The files hold the last look's seed pairs: nothing new was recorded.
    skipped
        The unreadable files passed over (None: none were allowed).
    ledger_entry
        The design's start in its research ledger, or at a stop its entry there.

    Examples
    --------
    >>> runs = gv.load(example_study(tmp_dir))
    >>> floor = gv.noise_floor([run for run in runs if run.arm == "baseline"])
    >>> first = [run for run in runs if run.seed == 0]
    >>> result = gv.sequential(first, design=tmp_dir / "design.json", baseline_arm="baseline", variant_arm="gatedv",
    ...                        max_seeds=3, sesoi=0.01, noise_floor=floor)
    >>> result.stop, result.decision, result.next_seed_pair
    (False, 'continue', 2)
    >>> result.to_frame()[["look", "seed_pairs", "decision"]].values.tolist()
    [[1, 1, 'continue']]
    """

    design: SequentialDesign
    look: Look
    written: str | None = None  # the design file written
    new_design: bool = False  # this look created the design
    already_recorded: bool = False  # the files hold the last look's seed pairs: nothing new was recorded
    skipped: tuple[SkippedFile, ...] | None = None
    ledger_entry: LedgerEntry | None = None  # the design's start in its ledger, or at a stop its entry there
    wraps: ClassVar[str] = "look"

    @property
    def next_seed_pair(self) -> int | None:
        """The seed pair to train next, or None when the look stops."""
        return None if self.look.stop else self.look.n_pairs + 1

    @property
    def warnings(self) -> tuple[str, ...]:
        """The design's notes (on its first look) and the look's."""
        return (self.design.notes if self.new_design else ()) + self.look.notes

    def headline(self) -> str:
        return (f"{self.design.variant_arm} vs {self.design.baseline_arm}: {self.look.line}")

    def summary(self) -> str:
        look, design, scale = self.look, self.design, self.design.scale
        spent = f"α spent {look.alpha_spent:.3g} per direction"
        futility = ("" if look.futility_critical is None else
                    f", futility boundary T ≤ {look.futility_critical:.3g}")
        stagewise = ([] if look.p_value is None or look.median_unbiased is None else
                     [f"  stage-wise p (H0: not better) {look.p_value:.3g}; median-unbiased estimate "
                      f"{scale.format_estimate(look.median_unbiased)} (naive {scale.format_estimate(look.estimate)}, "
                      "biased away from 0 by an early stop)"])
        lines = [look.line,
                 f"look {look.index} at {look.n_pairs} of up to {design.max_seeds} seed pairs "
                 f"(information fraction {look.fraction:.3f}): D {look.estimate:+.6g} (SE {look.se:.3g}, "
                 f"df {look.df:.1f}), T {look.statistic:+.3g} against ±{look.critical:.3g} ({spent}){futility}",
                 f"  repeated {100 * (1 - design.alpha):g}% interval {scale.format_interval(look.interval)}; "
                 f"seed variance from {look.seed_variance_from}",
                 *stagewise,
                 *(f"  note: {note}" for note in look.notes),
                 design.summary()]
        if self.ledger_entry is not None:
            lines.append(f"ledger {design.ledger['path'] if design.ledger else ''}: "
                         + self.ledger_entry.summary().replace("\n", "\n  "))
        if self.already_recorded:
            lines.append(f"already recorded (look {look.index}): nothing new was written")
        elif self.written is not None:
            lines.append(f"recorded look {look.index} in {self.written}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"decision": self.look.decision, "stop": self.look.stop, "line": self.look.line,
                "next_seed_pair": self.next_seed_pair, "p_value": self.look.p_value,
                "median_unbiased_estimate": self.look.median_unbiased, "naive_estimate": self.look.estimate,
                "look": self.look.to_dict(), **self.design.to_dict(),
                "design_file": self.written, "new_design": self.new_design,
                "already_recorded": self.already_recorded,
                "ledger_entry": None if self.ledger_entry is None else self.ledger_entry.to_dict(), **self._skipped()}

    def to_frame(self) -> pd.DataFrame:
        """One row per look taken."""
        return pd.DataFrame([{"look": look.index, "seed_pairs": look.n_pairs, "estimate": look.estimate, "se": look.se,
                              "df": look.df, "fraction": look.fraction, "statistic": look.statistic,
                              "critical": look.critical, "futility_critical": look.futility_critical,
                              "alpha_spent": look.alpha_spent, "low": look.interval.low, "high": look.interval.high,
                              "decision": look.decision} for look in self.design.looks or (self.look,)])

    def tables(self) -> list[Table]:
        scale = self.design.scale
        rows = tuple(row(str(look.index), str(look.n_pairs), f"{look.statistic:+.3g}", _shown(look.critical),
                         _shown(look.futility_critical), scale.format_interval(look.interval), look.decision)
                     for look in self.design.looks or (self.look,))
        return [Table("sequential-looks", f"Looks of sequential design {self.design.sha256[:12]} (α "
                      f"{self.design.alpha:g}, {self.design.spending} spending, up to {self.design.max_seeds} seed "
                      "pairs).", ("Look", "Seed pairs", "T", "Efficacy", "Futility", "Repeated interval", "Decision"),
                      "rrrrrll", (RowGroup(None, rows),))]


def _shown(value: float | None) -> str:
    return "—" if value is None else "∞" if math.isinf(value) else f"{value:.3g}"
