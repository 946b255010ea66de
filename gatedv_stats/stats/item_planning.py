"""Planning a downstream-task comparison: seed pairs × items needed to detect a difference in the metric's units.

The pilot's components come from the same seeds × items fit as the verdict (items weighted equally, Σw² = 1/N);
a design of S seed pairs on N′ items then has Var(D) = σ²_seed / S + σ²_item / N′ + σ²_int / (S N′), tested with
the verdict's df (`planning.Design`, Satterthwaite under the few-seed guard) and the noncentral t's power.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.core.validation import check_open_unit
from gatedv_stats.pairing.items import PairedScores
from gatedv_stats.stats.item_scores import format_difference
from gatedv_stats.stats.planning import Design
from gatedv_stats.stats.seed_document import seed_document_interval

MAX_ITEMS = 10**7  # more items than any benchmark holds: a difference that needs more is not detectable by items
SEED_GRID = (3, 5, 10, 20)  # seed pairs at which the items needed are shown, beside the pilot's


@dataclass(frozen=True)
class ItemPlan:
    """Seeds and items needed for a difference `effect` (metric units: 0.01 = one point of accuracy)."""

    task: str
    metric: str
    effect: float
    alpha: float
    power: float
    n_seeds: int  # pilot design
    n_items: int
    proportion: bool
    seed_var: float
    item_var: float
    interaction_var: float
    pilot_power: float
    mde: float  # smallest |difference| the pilot design detects with the power
    seeds_required: int | None  # on the pilot's items; None: more than planning.MAX_SEEDS
    seeds_required_many_items: int | None  # with 10× the pilot's items
    items_required: dict[int, int | None]  # seed pairs → items needed (None: not reachable by items alone)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["items_required"] = {str(seeds): items for seeds, items in self.items_required.items()}
        return data

    def summary(self) -> str:
        def count(value: int | None, what: str) -> str:
            return f"not reachable with more {what} alone" if value is None else f"{value:,}"

        size = format_difference(self.effect, self.proportion, signed=False)
        lines = [f"pilot: {self.task} ({self.metric}), {self.n_seeds} seed pairs × {self.n_items:,} items",
                 f"variance components: seed {self.seed_var:.3e}, item {self.item_var:.3e}, interaction "
                 f"{self.interaction_var:.3e}",
                 f"target: a difference of {size}, α = {self.alpha:g} two-sided, power {self.power:g}",
                 f"  power of the pilot design: {self.pilot_power:.2f}; its minimum detectable difference "
                 f"{format_difference(self.mde, self.proportion, signed=False)}",
                 f"  paired seeds needed on {self.n_items:,} items: {count(self.seeds_required, 'seeds')}; with 10× "
                 f"the items: {count(self.seeds_required_many_items, 'seeds')}",
                 "  items needed at:"]
        lines += [f"    {seeds} seed pairs: {count(items, 'items')}" for seeds, items in self.items_required.items()]
        return "\n".join(lines)


def plan_items(paired: PairedScores, effect: float, *, alpha: float = 0.05, power: float = 0.8) -> ItemPlan:
    """Seeds × items needed to detect a difference of `effect` (metric units) from pilot item scores."""
    if not (math.isfinite(effect) and effect != 0.0):
        raise ParameterError("effect", f"a difference to detect must be non-zero, in the metric's units (0.01 = one "
                             f"point of accuracy), got {effect}")
    check_open_unit("alpha", alpha)
    check_open_unit("power", power)
    if paired.n_seeds < 2 or paired.n_items < 2:
        raise InputError(f"planning needs a pilot of at least 2 paired seeds and 2 items, got {paired.n_seeds} × "
                         f"{paired.n_items}")
    fit = seed_document_interval(paired.baseline, paired.variant, np.ones(paired.n_items))
    design = Design(fit.seed_var, fit.doc_var or 0.0, fit.interaction_var or 0.0, 1.0 / fit.n_docs, fit.n_docs)
    size = abs(effect)
    seeds = sorted({paired.n_seeds, *SEED_GRID})
    return ItemPlan(
        task=paired.task, metric=paired.metric, effect=size, alpha=alpha, power=power, n_seeds=paired.n_seeds,
        n_items=paired.n_items, proportion=paired.proportion, seed_var=design.seed_var, item_var=design.doc_var,
        interaction_var=design.interaction_var, pilot_power=design.power(size, paired.n_seeds, alpha),
        mde=design.detectable_log_effect(paired.n_seeds, alpha, power),
        seeds_required=design.seeds_required(size, alpha, power),
        seeds_required_many_items=design.seeds_required(size, alpha, power, n_docs=10 * paired.n_items),
        items_required={n_seeds: items_required(design, size, n_seeds, alpha, power) for n_seeds in seeds})


def items_required(design: Design, effect: float, n_seeds: int, alpha: float, power: float) -> int | None:
    """Smallest N ≥ 2 items whose design with `n_seeds` seed pairs has the power, or None beyond MAX_ITEMS."""
    if design.power(effect, n_seeds, alpha, MAX_ITEMS) < power:
        return None
    low, high = 1, 2
    while design.power(effect, n_seeds, alpha, high) < power:
        low, high = high, min(2 * high, MAX_ITEMS)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if design.power(effect, n_seeds, alpha, middle) >= power else (middle, high)
    return max(high, 2)
