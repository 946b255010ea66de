"""The API results of a noise floor: the floor measured (`gv.noise_floor`) and a plan from it (`gv.plan` with a floor
and no pilot of two seed pairs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pandas as pd

from gatedv_stats.analysis.noise_floor import NoiseFloor
from gatedv_stats.analysis.plan import FloorPlan
from gatedv_stats.io.runfiles import SkippedFile
from gatedv_stats.reporting.model import Table
from gatedv_stats.results.base import Result, plan_quantities, planned_at, quantities_table


@dataclass(frozen=True, repr=False)
class NoiseFloorResult(Result):
    """`gv.noise_floor`: a setup's seed variance, and the file it was written to.

    Parameters
    ----------
    floor
        The noise floor: the seed variance τ² with its degrees of freedom and the setup it was measured on; its
        fields are reachable on the result.
    written
        The floor file written (None: none).
    skipped
        The unreadable files passed over (None: none were allowed).

    Examples
    --------
    >>> runs = gv.load(example_study(tmp_dir))
    >>> result = gv.noise_floor([run for run in runs if run.arm == "baseline"])
    >>> result
    NoiseFloor(τ² 0.0002857 (2 df) from 3 A/A runs)
    >>> result.to_frame()[["df", "unit"]].values.tolist()
    [[2.0, 'token']]
    """

    floor: NoiseFloor
    written: str | None = None
    skipped: tuple[SkippedFile, ...] | None = None
    wraps: ClassVar[str] = "floor"

    def headline(self) -> str:
        return (f"τ² {self.floor.seed.variance:.4g} ({self.floor.seed.df:g} df) from "
                f"{self.floor.estimate.n_sources} {self.floor.estimate.source}")

    def summary(self) -> str:
        return self.floor.summary() + ("" if self.written is None else f"\nwrote {self.written}")

    def to_dict(self) -> dict:
        return {**self.floor.to_dict(), "written": self.written, **self._skipped()}

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([{"seed_variance": self.floor.seed.variance, "df": self.floor.seed.df,
                              "source": self.floor.estimate.source, "metric": self.floor.metric,
                              "unit": self.floor.unit}])

    def tables(self) -> list[Table]:
        return [quantities_table(self.to_frame().iloc[0].to_dict(), "Noise floor of the setup.")]


@dataclass(frozen=True, repr=False)
class FloorPlanResult(Result):
    """`gv.plan` with a noise floor: the seed pairs a candidate needs on this setup.

    Parameters
    ----------
    plan
        The plan from the floor: the seed pairs required and the part the documents add; its fields are reachable
        on the result.
    skipped
        The unreadable files passed over (None: none were allowed).
    level
        Where the plan's level came from (a research ledger's next level), when it was not given.

    Examples
    --------
    >>> runs = gv.load(example_study(tmp_dir))
    >>> floor = gv.noise_floor([run for run in runs if run.arm == "baseline"])
    >>> result = gv.plan(effect=0.02, noise_floor=floor)
    >>> result
    FloorPlan(24 seed pairs to detect 0.02 with power 0.8 at α = 0.05 (noise floor 2 df))
    >>> result.seeds_required
    24
    """

    plan: FloorPlan
    skipped: tuple[SkippedFile, ...] | None = None
    level: str | None = None  # where the plan's level came from (a research ledger's next level), when not given
    wraps: ClassVar[str] = "plan"

    def summary(self) -> str:
        return planned_at(self.level) + self.plan.summary()

    def to_dict(self) -> dict:
        return {**self.plan.to_dict(), "level_from": self.level, **self._skipped()}

    def headline(self) -> str:
        needed = self.plan.seeds_required
        return (f"{'no number of' if needed is None else needed} seed pairs to detect {self.plan.effect:g} with power "
                f"{self.plan.power:g} at α = {self.plan.alpha:g} (noise floor {self.plan.floor.df:g} df)")

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([plan_quantities(self.plan)])

    def tables(self) -> list[Table]:
        return [quantities_table(self.to_frame().iloc[0].to_dict(), "Plan from the setup's noise floor.")]
