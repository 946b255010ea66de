"""One plan for every metric: how many seed pairs and units (documents, items) a study needs to detect an effect,
from the components of a pilot's seeds × units fit.

The pilot's fit is the verdict's (`analysis.compare.seed_document_fit`, units weighted as the verdict weighs them);
a design of S seed pairs on N′ units then has Var(D) = σ²_seed / S + σ²_unit Σw² + σ²_int Σw² / S, tested with the
verdict's df (`stats.planning.Design`). On the perplexity scale the effect is a relative ΔP (tested as its log
ratio), and the plan adds the seed-level and document-level tests of the paper's design (`stats.planning.plan_study`);
on a metric's scale it is a difference in the metric's units, with the items needed at a grid of seed counts.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np

from gatedv_stats.analysis.compare import seed_document_fit, with_floor
from gatedv_stats.analysis.figures.perplexity import paired_group_effects
from gatedv_stats.analysis.noise_floor import NoiseFloor
from gatedv_stats.core import formatting as fmt
from gatedv_stats.core.defaults import DEFAULTS
from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.stats.noise_floor import SeedVariance
from gatedv_stats.stats.planning import (
    MAX_SEEDS,
    Design,
    StudyPlan,
    check_alpha_power,
    plan_study,
    seed_document_plan,
    smallest_n,
    t_power,
    variance_components,
)
from gatedv_stats.stats.seed_document import seed_document_interval

MAX_UNITS = 10**7  # more units than any benchmark holds: a difference that needs more is not detectable by units
SEED_GRID = (3, 5, 10, 20)  # seed pairs at which the units needed are shown, beside the pilot's


def plan(paired: Paired, effect: float, *, alpha: float = DEFAULTS.alpha,
         power: float = DEFAULTS.power) -> StudyPlan | DifferencePlan:
    """Seed pairs and units needed to detect `effect` on the pair's scale (a relative ΔP for perplexity, 0.02 =
    2%; a difference in the metric's units for a score, 0.01 = one point of accuracy) at two-sided level `alpha`
    with `power`, from pilot runs of two arms."""
    made = _perplexity_plan if paired.scale.figures == "perplexity" else _difference_plan
    return made(paired, effect, alpha=alpha, power=power)


def _perplexity_plan(paired: Paired, effect: float, *, alpha: float, power: float) -> StudyPlan:
    """`plan_study` on the variance components of paired pilot runs, with the plan for the verdict's
    seed-and-document test."""
    warnings = tuple(test.warning(f"this plan, which treats them as independent, understates the seeds and documents "
                                  f"needed; analyze the study with --cluster {test.column}")
                     for test in paired_group_effects(paired) if test.flagged)
    study = replace(plan_study(variance_components(paired.baseline, paired.variant, paired.n_units), effect,
                               alpha=alpha, power=power), unit=paired.unit, warnings=warnings)
    try:
        fit = seed_document_interval(paired.baseline, paired.variant, paired.n_units, noun=paired.noun)
    except InputError:  # no spread to plan from: plan_study has said so already
        return study
    weights = paired.n_units / paired.n_units.sum()
    return replace(study, seed_document=seed_document_plan(fit, float(np.sum(weights ** 2)), study.log_effect,
                                                          alpha=alpha, power=power))


@dataclass(frozen=True)
class DifferencePlan:
    """Seeds and units needed for a difference `effect` (metric units: 0.01 = one point of accuracy)."""

    task: str | None
    metric: str
    effect: float
    alpha: float
    power: float
    n_seeds: int  # pilot design
    n_units: int
    noun: str  # what a unit is: "item", "document"
    proportion: bool
    seed_var: float
    unit_var: float
    interaction_var: float
    pilot_power: float
    mde: float  # smallest |difference| the pilot design detects with the power
    seeds_required: int | None  # on the pilot's units; None: more than planning.MAX_SEEDS
    seeds_required_many_units: int | None  # with 10× the pilot's units
    units_required: dict[int, int | None]  # seed pairs → units needed (None: not reachable by units alone)

    def to_dict(self) -> dict:
        """The plan, its units named by their noun (n_items, item_var, items_required)."""
        content = {key.replace("unit", self.noun): value for key, value in asdict(self).items() if key != "noun"}
        content[f"{self.noun}s_required"] = {str(seeds): units for seeds, units in self.units_required.items()}
        return content

    def headline(self, baseline_arm: str, variant_arm: str) -> str:
        seeds = "more than 1000" if self.seeds_required is None else str(self.seeds_required)
        task = "" if self.task is None else f" on {self.task}"
        return (f"{variant_arm} vs {baseline_arm}{task}: {seeds} seed pairs to detect "
                f"{fmt.format_difference(self.effect, self.proportion, signed=False)} of {self.metric} with power "
                f"{self.power:g} at α = {self.alpha:g} (pilot {self.n_seeds} seeds × {fmt.format_count(self.n_units)} "
                f"{self.noun}s)")

    def summary(self) -> str:
        def count(value: int | None, what: str) -> str:
            return f"not reachable with more {what} alone" if value is None else f"{value:,}"

        size, units = fmt.format_difference(self.effect, self.proportion, signed=False), f"{self.noun}s"
        lines = [f"pilot: {self.task or 'scores'} ({self.metric}), {self.n_seeds} seed pairs × {self.n_units:,} "
                 f"{units}",
                 f"variance components: seed {self.seed_var:.3e}, {self.noun} {self.unit_var:.3e}, interaction "
                 f"{self.interaction_var:.3e}",
                 f"target: a difference of {size}, α = {self.alpha:g} two-sided, power {self.power:g}",
                 f"  power of the pilot design: {self.pilot_power:.2f}; its minimum detectable difference "
                 f"{fmt.format_difference(self.mde, self.proportion, signed=False)}",
                 f"  paired seeds needed on {self.n_units:,} {units}: {count(self.seeds_required, 'seeds')}; with "
                 f"10× the {units}: {count(self.seeds_required_many_units, 'seeds')}",
                 f"  {units} needed at:"]
        lines += [f"    {seeds} seed pairs: {count(needed, units)}" for seeds, needed in self.units_required.items()]
        return "\n".join(lines)


def _difference_plan(paired: Paired, effect: float, *, alpha: float, power: float) -> DifferencePlan:
    """Seeds × units needed to detect a difference of `effect` (metric units) from pilot scores."""
    if not (math.isfinite(effect) and effect != 0.0):
        raise ParameterError("effect", f"a difference to detect must be non-zero, in the metric's units (0.01 = one "
                             f"point of accuracy), got {effect}")
    check_alpha_power(alpha, power, above_alpha=False)
    if paired.n_pairs < 2 or paired.n_docs < 2:
        raise InputError(f"planning needs a pilot of at least 2 paired seeds and 2 {paired.noun}s, got "
                         f"{paired.n_pairs} × {paired.n_docs}")
    fit = seed_document_interval(paired.baseline, paired.variant, paired.n_units, noun=paired.noun, log_scale=False)
    design = Design(fit.seed_var, fit.doc_var or 0.0, fit.interaction_var or 0.0, 1.0 / fit.n_docs, fit.n_docs)
    size = abs(effect)
    seeds = sorted({paired.n_pairs, *SEED_GRID})
    return DifferencePlan(
        task=paired.task, metric=paired.metric, effect=size, alpha=alpha, power=power, n_seeds=paired.n_pairs,
        n_units=paired.n_docs, noun=paired.noun, proportion=paired.proportion, seed_var=design.seed_var,
        unit_var=design.doc_var, interaction_var=design.interaction_var,
        pilot_power=design.power(size, paired.n_pairs, alpha),
        mde=design.detectable_log_effect(paired.n_pairs, alpha, power),
        seeds_required=design.seeds_required(size, alpha, power),
        seeds_required_many_units=design.seeds_required(size, alpha, power, n_docs=10 * paired.n_docs),
        units_required={n_seeds: units_required(design, size, n_seeds, alpha, power) for n_seeds in seeds})


def units_required(design: Design, effect: float, n_seeds: int, alpha: float, power: float) -> int | None:
    """Smallest N ≥ 2 units whose design with `n_seeds` seed pairs has the power, or None where MAX_UNITS lack it."""
    def enough(n_units: int) -> bool:
        return design.power(effect, n_seeds, alpha, n_units) >= power

    return smallest_n(enough, MAX_UNITS) if enough(MAX_UNITS) else None


@dataclass(frozen=True)
class FloorPlan:
    """Seed pairs needed for an effect given a setup's noise floor, without (or with a one-seed) pilot of the
    candidate: Var(D) = τ̂² / S + the document part, tested on Satterthwaite's df."""

    effect: float  # as asked: a relative ΔP, or a difference in the metric's units
    size: float  # the effect on D's scale (|log(1 + ΔP)| for perplexity)
    alpha: float
    power: float
    floor: SeedVariance
    document_part: float  # Σw² σ̂²_doc from the candidate's pilot; 0 without one (assumed)
    document_df: float | None
    pilot: str | None  # what the document part was measured on
    power_by_seeds: dict[int, float]
    seeds_required: int | None  # None: no number of seeds reaches the power (the document term dominates)
    documents_factor: int | None  # then: how many times the documents make it reachable with SEED_GRID[-1] seeds

    def to_dict(self) -> dict:
        return {**asdict(self), "power_by_seeds": {str(seeds): value for seeds, value in self.power_by_seeds.items()}}

    def summary(self) -> str:
        lines = [f"noise floor: τ² {self.floor.variance:.4g} ({self.floor.df:g} df); target effect {self.effect:g} "
                 f"(on D's scale {self.size:.5g}), α = {self.alpha:g} two-sided, power {self.power:g}"]
        if self.pilot is None:
            lines.append("  document part: assumed 0 (the candidate's effect does not vary over documents); a one-seed "
                         "pilot of the candidate measures it")
        else:
            df = "" if self.document_df is None else f" ({self.document_df:.1f} df)"
            lines.append(f"  document part {self.document_part:.4g}{df}, from {self.pilot}")
        lines.append("  power by seed pairs: " + ", ".join(f"{seeds}: {value:.2f}"
                                                        for seeds, value in self.power_by_seeds.items()))
        if self.seeds_required is not None:
            lines.append(f"  paired seeds needed: {self.seeds_required}")
        else:
            more = ("" if self.documents_factor is None else
                    f"; with {self.documents_factor}× the documents, {SEED_GRID[-1]} seed pairs reach it")
            lines.append(f"  no number of seeds reaches the power: the document term alone is too large — add "
                         f"documents, not seeds{more}")
        return "\n".join(lines)


def floor_plan(floor: NoiseFloor, effect: float, *, paired: Paired | None = None, alpha: float = DEFAULTS.alpha,
               power: float = DEFAULTS.power) -> FloorPlan:
    """The seed pairs a candidate needs on this setup: from the floor's τ̂², and the document part of a pilot of the
    candidate (`paired`, one seed pair or more) where given."""
    check_alpha_power(alpha, power, above_alpha=False)
    if not (math.isfinite(effect) and effect != 0.0 and (not floor.scale.log_ratio or effect > -1.0)):
        raise ParameterError("effect", f"must be non-zero (and a relative ΔP above −1 for perplexity), got {effect}")
    size = floor.scale.effect_size(effect)
    document_part, document_df, pilot = 0.0, None, None
    if paired is not None:
        paired = with_floor(paired, floor, ())
        fit = seed_document_fit(paired, None, 1.0 - alpha, floor=floor)
        if fit is not None and fit.floor_use is not None:
            seed_part = fit.floor_use.seed.variance / fit.n_seeds
            document_part = max(fit.se ** 2 - seed_part, 0.0)
            noise = fit.se ** 4 / fit.df - seed_part ** 2 / fit.floor_use.seed.df
            document_df = document_part ** 2 / noise if noise > 0.0 and document_part > 0.0 else None
        pilot = f"{paired.variant_arm} vs {paired.baseline_arm}, {paired.n_pairs} seed pairs × {paired.n_docs:,} units"
    seed = floor.seed

    def power_at(n_seeds: int, factor: float = 1.0) -> float:
        doc = document_part / factor
        variance = seed.variance / n_seeds + doc
        noise = (seed.variance / n_seeds) ** 2 / seed.df + (doc ** 2 / document_df if document_df else 0.0)
        return t_power(size / math.sqrt(variance), variance ** 2 / noise, alpha)

    grid = sorted({1, 2, 3, 4, 6, 8, *SEED_GRID})
    needed = next((n for n in range(1, MAX_SEEDS + 1) if power_at(n) >= power), None)
    factor = None if needed is not None else next((f for f in (2, 4, 8, 16, 32, 64)
                                                   if power_at(SEED_GRID[-1], f) >= power), None)
    return FloorPlan(effect=effect, size=size, alpha=alpha, power=power, floor=seed, document_part=document_part,
                     document_df=document_df, pilot=pilot, power_by_seeds={n: power_at(n) for n in grid},
                     seeds_required=needed, documents_factor=factor)
