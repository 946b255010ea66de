"""One comparison of two arms, for every metric: the seeds × units interval, the verdict read on the pair's scale,
then the figures that belong to the scale (`analysis.figures`: the paper's perplexity figures, or a score's
per-seed means, item counts and tests)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from gatedv_stats.analysis.figures import FIGURES, Figures
from gatedv_stats.analysis.noise_floor import NoiseFloor, check_floor
from gatedv_stats.core.defaults import DEFAULTS
from gatedv_stats.core.errors import NoSpreadError
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.stats.scale import Scale
from gatedv_stats.stats.seed_document import SeedDocumentResult, seed_document_interval
from gatedv_stats.stats.verdict import Verdict, verdict

NO_DIFFERENCE = "no detectable difference"


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


def compare(paired: Paired, *, n_resamples: int = DEFAULTS.n_resamples,
            confidence_level: float = DEFAULTS.confidence_level, rng_seed: int = DEFAULTS.rng_seed,
            method: str = "percentile", cluster: str | None = None, sesoi: float | None = None,
            floor: NoiseFloor | None = None, allow_mismatch: Sequence[str] = (),
            progress: bool | None = False) -> Comparison:
    """The comparison of `paired.variant` against `paired.baseline`.

    `cluster`: a unit column (a document's domain, an item's subtask) whose values group the units into the
    sampled clusters. `sesoi`: the smallest effect of interest on the pair's scale (a relative ΔP for perplexity,
    a difference in the metric's units for a score), which lets the verdict say "equivalent". `n_resamples`,
    `rng_seed` and `method` set the document bootstrap of the perplexity figures (models fixed). `floor`: the
    setup's noise floor, whose seed variance the interval takes (one seed pair) or pools with the study's own; a
    floor of another setup is refused unless the differing field is in `allow_mismatch`.
    """
    if sesoi is not None:
        paired.scale.check_sesoi(sesoi)  # refused even where there is no interval to test it with
    paired = with_floor(paired, floor, allow_mismatch)
    labels = paired.labels(cluster)
    fit = seed_document_fit(paired, labels, confidence_level, floor=floor)
    decided = None if fit is None else decide(fit, paired, sesoi)
    figures = FIGURES[paired.scale.figures]
    return comparison_of(paired, fit, decided, cluster, confidence_level, figures.of(
        paired, fit, labels=labels, cluster=cluster, n_resamples=n_resamples, confidence_level=confidence_level,
        rng_seed=rng_seed, method=method, progress=progress))


def comparison_of(paired: Paired, fit: SeedDocumentResult | None, decided: Verdict | None, cluster: str | None,
                  confidence_level: float, figures: Figures) -> Comparison:
    """The comparison of a pair with its fit, verdict (at `confidence_level`) and the scale's figures."""
    return Comparison(baseline_arm=paired.baseline_arm, variant_arm=paired.variant_arm, scale=paired.scale,
                      unit=paired.unit, seeds=tuple(int(seed) for seed in paired.seeds), n_units=paired.n_docs,
                      estimate=type(figures).estimate(paired), confidence_level=confidence_level, seed_document=fit,
                      verdict=decided, cluster=cluster,
                      pairing_notes=paired.notes, sources=paired.sources, figures=figures, eval_set=paired.eval_set,
                      task=paired.task)


def with_floor(paired: Paired, floor: NoiseFloor | None, allow_mismatch: Sequence[str]) -> Paired:
    """The pair, with the setup differences accepted for its noise floor among its notes (a floor of another setup
    is refused)."""
    if floor is None:
        return paired
    return replace(paired, mismatches=paired.mismatches + check_floor(floor, paired, allow_mismatch))


def seed_document_fit(paired: Paired, labels: np.ndarray | None, confidence_level: float,
                      weights: np.ndarray | None = None, floor: NoiseFloor | None = None) -> SeedDocumentResult | None:
    """The seeds × units interval (weighted by `paired.n_units`, or by `weights` such as n_bytes; with a noise
    floor's seed variance), or None where it cannot exist: one seed pair without a floor, or no spread at all."""
    if paired.n_pairs < 2 and floor is None:
        return None
    try:
        return seed_document_interval(paired.baseline, paired.variant,
                                      paired.n_units if weights is None else weights, clusters=labels,
                                      confidence_level=confidence_level, noun=paired.noun,
                                      floor=None if floor is None else floor.seed, log_scale=paired.scale.log_ratio)
    except NoSpreadError:
        return None


def decide(fit: SeedDocumentResult, paired: Paired, sesoi: float | None = None, *, p_value: float | None = None,
           tost_p_value: float | None = None) -> Verdict:
    """The verdict of a fit on the pair's scale and unit; `p_value` and `tost_p_value` replace the fit's own
    (adjusted over several arms or tasks)."""
    return verdict(fit, paired.scale, sesoi=sesoi, unit=paired.unit, p_value=p_value, tost_p_value=tost_p_value)
