"""Planning for the verdict's seed-and-document test: seeds and documents for a target ΔP, from a pilot's components.

A design of S seed pairs on N documents (the pilot's documents, or N′ like them) has
    Var(D) = σ²_seed / S + σ²_doc Σw² + σ²_int Σw² / S,      Σw² = Σw²_pilot · N_pilot / N′,
and the test of D = 0 is a t test with the interval's degrees of freedom: Satterthwaite's over the expected mean
squares, under the same few-seed guard as the interval (docs/method.md §10). Its power at |log(1 + ΔP)| comes
from the noncentral t (`power.t_power`).

The pilot's own components are uncertain: with S pilot seeds the seed mean square rests on S − 1 degrees of
freedom. An upper confidence bound on it, (S − 1) V_seed / χ²_{γ, S−1}, shows how many seeds a less lucky pilot
would have asked for.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from scipy import stats

from gatedv_stats import formatting as fmt
from gatedv_stats.stats.power import detectable_noncentrality, t_power
from gatedv_stats.stats.seed_document import SeedDocumentResult

MAX_SEEDS = 1000
UPPER_BOUND_LEVEL = 0.9  # one-sided level of the upper confidence bound on the pilot's seed mean square


@dataclass(frozen=True)
class Design:
    """Expected components of D's variance for S seed pairs on N documents like the pilot's."""

    seed_var: float
    doc_var: float
    interaction_var: float
    weight_square_sum: float  # Σw² of the pilot's N documents (1/N for equal target counts)
    n_docs: int

    def variance(self, n_seeds: int, n_docs: int | None = None) -> tuple[float, float]:
        """Var(D) and the test's degrees of freedom for S seeds on `n_docs` (default: the pilot's) documents."""
        w2 = self.weight_square_sum * self.n_docs / (n_docs or self.n_docs)
        docs = n_docs or self.n_docs
        seed_part = (self.seed_var + self.interaction_var * w2) / n_seeds
        doc_part = self.doc_var * w2
        variance = seed_part + doc_part
        doc_noise = w2 ** 2 * ((self.doc_var + self.interaction_var / n_seeds) ** 2 / max(docs - 1, 1)
                               + (self.interaction_var / n_seeds) ** 2 / max((n_seeds - 1) * (docs - 1), 1))
        satterthwaite = variance ** 2 / (seed_part ** 2 / (n_seeds - 1) + doc_noise)
        return variance, min(satterthwaite, (n_seeds - 1) * variance / seed_part)

    def power(self, log_effect: float, n_seeds: int, alpha: float, n_docs: int | None = None) -> float:
        variance, df = self.variance(n_seeds, n_docs)
        return t_power(log_effect / math.sqrt(variance), df, alpha)

    def seeds_required(self, log_effect: float, alpha: float, power: float, n_docs: int | None = None) -> int | None:
        """Smallest S ≥ 2 with the power (power rises with S), or None beyond MAX_SEEDS."""
        low, high = 2, 2
        while self.power(log_effect, high, alpha, n_docs) < power:
            if high >= MAX_SEEDS:
                return None
            low, high = high, min(2 * high, MAX_SEEDS)
        if high == 2:
            return 2
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (low, middle) if self.power(log_effect, middle, alpha, n_docs) >= power else (middle, high)
        return high

    def detectable_log_effect(self, n_seeds: int, alpha: float, power: float) -> float:
        variance, df = self.variance(n_seeds)
        return detectable_noncentrality(df, alpha, power) * math.sqrt(variance)


@dataclass(frozen=True)
class SeedDocumentPlan:
    """What the verdict's test needs, from the pilot's seed-and-document components."""

    seed_var: float
    doc_var: float
    interaction_var: float
    pilot_power: float  # power of the pilot's own design at the target effect
    seeds_required: int | None  # on the pilot's documents; None: more than MAX_SEEDS
    seeds_required_many_docs: int | None  # with 10× the pilot's documents
    mde: float  # smallest relative |ΔP| the pilot design detects with the power
    upper_bound_level: float
    seed_mean_square_upper: float  # upper confidence bound on E[V_seed] = σ²_seed + σ²_int Σw²
    seeds_required_upper: int | None  # at that bound, on the pilot's documents

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self, n_seeds: int, n_docs: int, unit: str = "token") -> list[str]:
        def seeds(count: int | None) -> str:
            return f"more than {MAX_SEEDS}" if count is None else str(count)

        return [
            "the verdict's seed-and-document test (new seeds and new documents):",
            f"  components (nats² per {unit}): seed {self.seed_var:.3e}, document {self.doc_var:.3e}, interaction "
            f"{self.interaction_var:.3e}",
            f"  power of the pilot design ({n_seeds} seeds × {n_docs} documents): {self.pilot_power:.2f}; its minimum "
            f"detectable |ΔP| {100 * self.mde:.2f}%",
            f"  paired seeds needed on {n_docs} documents: {seeds(self.seeds_required)}; with 10× the documents: "
            f"{seeds(self.seeds_required_many_docs)}",
            f"  if the pilot's seeds agreed by luck: at the {fmt.format_percent(self.upper_bound_level, 0)} upper "
            f"bound of the seed mean square ({self.seed_mean_square_upper:.3e}, {n_seeds - 1} df) "
            f"{seeds(self.seeds_required_upper)} seeds would be needed",
        ]


def seed_document_plan(fit: SeedDocumentResult, weight_square_sum: float, log_effect: float, *, alpha: float,
                       power: float) -> SeedDocumentPlan:
    """Plan the seed-and-document test from a pilot's fit (`weight_square_sum`: its Σw²)."""
    interaction = fit.interaction_var or 0.0
    design = Design(fit.seed_var, fit.doc_var or 0.0, interaction, weight_square_sum, fit.n_docs)
    chi2 = stats.chi2.ppf(1.0 - UPPER_BOUND_LEVEL, fit.n_seeds - 1)
    upper = (fit.n_seeds - 1) * fit.v_seed / chi2
    pessimistic = Design(max(upper - interaction * weight_square_sum, 0.0), design.doc_var, interaction,
                         weight_square_sum, fit.n_docs)
    return SeedDocumentPlan(
        seed_var=design.seed_var, doc_var=design.doc_var, interaction_var=interaction,
        pilot_power=design.power(log_effect, fit.n_seeds, alpha),
        seeds_required=design.seeds_required(log_effect, alpha, power),
        seeds_required_many_docs=design.seeds_required(log_effect, alpha, power, n_docs=10 * fit.n_docs),
        mde=math.expm1(design.detectable_log_effect(fit.n_seeds, alpha, power)),
        upper_bound_level=UPPER_BOUND_LEVEL, seed_mean_square_upper=float(upper),
        seeds_required_upper=pessimistic.seeds_required(log_effect, alpha, power),
    )
