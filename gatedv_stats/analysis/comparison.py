"""The records of comparisons, for every metric: one pair of arms (`Comparison`) and many arms against one
reference (`ArmsComparison`), with what each asks of its scale's figures. `analysis.compare` and `analysis.arms`
make them; the figures (`analysis.figures`) present them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import pandas as pd

from gatedv_stats.stats.scale import Scale
from gatedv_stats.stats.seed_document import SeedDocumentResult
from gatedv_stats.stats.tasks import MacroAverage
from gatedv_stats.stats.verdict import Verdict

NO_DIFFERENCE = "no detectable difference"


class Figures(Protocol):
    """What a `Comparison` asks of its scale's figures (`analysis.figures`)."""

    @staticmethod
    def estimate(paired: Any) -> float: ...

    def to_dict(self, comparison: Any) -> dict: ...

    def summary(self, comparison: Any) -> str: ...

    def warnings(self, comparison: Any) -> tuple[str, ...]: ...

    def columns(self, comparison: Any) -> dict: ...

    def headline_estimate(self, comparison: Any) -> str: ...


@dataclass(frozen=True)
class Comparison:
    """Everything `gatedv bootstrap` reports about one baseline/variant pair of arms, on any scale: what every
    metric has, and the scale's figures (whose fields are reachable here too: `comparison.delta_p`)."""

    baseline_arm: str
    variant_arm: str
    scale: Scale
    unit: str  # what the weights count: "token", "word", "byte" (per byte of the same text), "item", "document"
    seeds: tuple[int, ...]  # the paired training seeds
    n_units: int  # N: the documents or items
    estimate: float  # D, variant − baseline (nats per unit on the log scale, else in the metric's units)
    confidence_level: float  # of the interval (and the verdict's level, α = 1 − it)
    seed_document: SeedDocumentResult | None  # the interval over seeds and units; None with one seed pair, no spread
    verdict: Verdict | None  # from `seed_document`; None where it is None
    cluster: str | None  # the unit column whose values group the units into sampled clusters
    pairing_notes: tuple[str, ...]  # seeds dropped, provenance differences accepted
    sources: dict
    figures: Figures  # the scale's own figures
    eval_set: str | None = None
    task: str | None = None

    def __getattr__(self, name: str) -> Any:
        """A figure of the scale's (never a dunder, so copying and pickling stay plain)."""
        if name.startswith("__") or name == "figures":
            raise AttributeError(name)
        return getattr(self.figures, name)

    @property
    def n_pairs(self) -> int:
        return len(self.seeds)

    @property
    def metric(self) -> str:
        return self.scale.metric

    @property
    def verdict_text(self) -> str:
        """One of "better", "worse", "no detectable difference", "equivalent"."""
        return self.verdict.verdict if self.verdict is not None else NO_DIFFERENCE

    @property
    def verdict_explanation(self) -> str:
        if self.verdict is not None:
            return self.verdict.explanation
        noun, metric = self.scale.noun, self.scale.metric
        if self.n_pairs < 2:
            return ("One seed pair: nothing can be said about new training seeds, so no difference is detectable (a "
                    "noise floor of the setup, from gatedv noise-floor, gives one seed pair a verdict); the "
                    f"{noun}-level figures below hold this pair's trained models fixed.")
        if self.estimate == 0.0:
            return (f"The arms are identical: every {noun} has the same {metric} in both arms under every seed pair "
                    "(D = 0 exactly), so there is no difference to detect.")
        return (f"The {metric} difference is the same for every {noun} under every seed pair (D = "
                f"{self.scale.format_d(self.estimate)}), so there is no spread to test it against and no "
                "difference is detectable.")

    @property
    def warnings(self) -> tuple[str, ...]:
        """What limits or changes the comparison: seeds dropped, mismatches accepted, what the scale's figures
        cannot show."""
        return self.figures.warnings(self)

    @property
    def notes(self) -> tuple[str, ...]:
        """The warnings, then what the seed-and-document fit says about its own components."""
        return self.warnings + (() if self.seed_document is None else self.seed_document.notes)

    def to_dict(self) -> dict:
        """The `gatedv bootstrap --json` object (its keys are the scale's)."""
        return self.figures.to_dict(self)

    def verdict_keys(self) -> dict:
        """The verdict as every scale's JSON holds it."""
        return {"verdict": self.verdict_text, "verdict_explanation": self.verdict_explanation,
                "verdict_detail": None if self.verdict is None else self.verdict.to_dict()}

    def summary(self) -> str:
        """The verdict, then the scale's figures as a readable table."""
        return self.figures.summary(self)

    def headline(self) -> str:
        """The comparison in one line."""
        family = "" if self.task is None else f" on {self.task}"
        return (f"{self.variant_arm} vs {self.baseline_arm}{family}: {self.verdict_text}; "
                f"{self.figures.headline_estimate(self)}; {self.n_pairs} seed pairs, {self.n_units:,} "
                f"{self.scale.noun}s")

    def leading(self) -> dict:
        """The columns every metric's table starts with: estimate, low, high, p_value, verdict."""
        fit, nan = self.seed_document, float("nan")
        return {"estimate": self.estimate, "low": nan if fit is None else fit.confidence_interval.low,
                "high": nan if fit is None else fit.confidence_interval.high,
                "p_value": nan if self.verdict is None else self.verdict.p_value, "verdict": self.verdict_text}


@dataclass(frozen=True)
class ArmsComparison:
    """Every comparison with the reference: one row each (the scale's), with raw, Holm- and BH-adjusted p-values
    and the verdict from the Holm-adjusted seed-and-document p."""

    reference: str
    scale: Scale
    arms: tuple[Any, ...]  # one row per comparison, as the scale's figures make it; never empty
    alpha: float
    sesoi: float | None
    n_resamples: int  # sign vectors per permutation test
    rng_seed: int  # of every permutation test
    notes: tuple[str, ...]  # the warnings among them
    warnings: tuple[str, ...] = ()  # comparisons whose units' groups differ far beyond what they explain
    macro: tuple[MacroAverage, ...] = ()  # a score's macro-average over each arm's tasks

    @property
    def metric(self) -> str:
        return self.scale.metric

    def to_dict(self) -> dict:
        return type(self.arms[0]).family_dict(self)

    def to_frame(self) -> pd.DataFrame:
        """One row per comparison: estimate, low, high, p_value, verdict, then the scale's own columns."""
        return pd.DataFrame([{**row.leading(), **row.columns()} for row in self.arms])

    def summary(self) -> str:
        return type(self.arms[0]).family_summary(self)
