"""Planning a paired study: variance components from pilot runs, then seeds and documents for a target ΔP.

The components are those of the crossed seeds × documents model of `crossed` for the per-token loss difference
X_si = (ℓ_variant,s,i − ℓ_baseline,s,i) / n_i = δ + e_s + h_i + ε_si: a seed effect (SD σ_seed), a document effect
(SD σ_doc) and their interaction (SD σ_resid), from `crossed_moments` with documents weighted equally (the two-way
ANOVA; docs/method-statistics.md §5). The per-seed log PPL ratio r_s has variance σ_seed² + σ_resid²/N, the
seed-averaged per-document difference σ_doc² + σ_resid²/S.

Three tests are planned: the seed-level paired t test on r_s, the document-level test of D (models fixed), and
the verdict's seed-and-document test. A design of S seed pairs on N′ documents like the pilot's has for the last
    Var(D) = σ²_seed / S + σ²_doc Σw² + σ²_int Σw² / S,      Σw² = Σw²_pilot · N_pilot / N′,
tested by a t test on the interval's df (Satterthwaite's under the few-seed guard, docs/method-statistics.md §10).
An upper confidence bound (S − 1) V_seed / χ²_{γ, S−1} on the pilot's seed mean square shows how many seeds a less
lucky pilot would have asked for.

Power is that of the two-sided t test from the noncentral t: P(T > t) + P(T < −t), T ~ nct(df, λ),
t = t_{1−α/2, df}. statsmodels' `TTestPower.solve_power` can stop short of the root with very few observations
(3 seeds at α = 0.01); here the root is bracketed and found by Brent's method, and every result is checked by
recomputing its power.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import numpy as np
from scipy import integrate, optimize, special, stats

from gatedv_stats.core import formatting as fmt
from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.core.validation import check_at_least, check_open_unit
from gatedv_stats.stats import metrics
from gatedv_stats.stats.crossed import crossed_moments, interval_df
from gatedv_stats.stats.seed_document import SeedDocumentResult

_POWER_TOLERANCE = 1e-9
MAX_PAIRS = 10**12  # more pairs than any study can run: an effect that needs more is not detectable
MAX_SEEDS = 1000
UPPER_BOUND_LEVEL = 0.9  # one-sided level of the upper confidence bound on the pilot's seed mean square


def t_power(noncentrality: float, df: float, alpha: float) -> float:
    """Power of the two-sided level-α t test with `df` degrees of freedom at noncentrality λ ≥ 0."""
    critical = stats.t.ppf(1.0 - alpha / 2.0, df)
    lower = stats.nct.cdf(-critical, df, noncentrality)
    if not math.isfinite(lower):
        # scipy's lower tail fails far out (λ ≳ 6 at small α): P(T < −c) = E[Φ(−λ − c·S)] with S = √(χ²_ν / ν),
        # by quadrature over S's density
        root = math.sqrt(df)
        lower = integrate.quad(lambda s: float(special.ndtr(-noncentrality - critical * s)
                                               * stats.chi.pdf(s * root, df) * root), 0.0, math.inf)[0]
    return float(stats.nct.sf(critical, df, noncentrality) + lower)


def detectable_noncentrality(df: float, alpha: float, power: float) -> float:
    """The noncentrality λ at which the two-sided level-α t test with `df` degrees of freedom has `power`."""
    check_alpha_power(alpha, power)
    high = 1.0
    while t_power(high, df, alpha) < power:
        high *= 2.0
    root = optimize.brentq(lambda nc: t_power(nc, df, alpha) - power, 0.0, high, xtol=1e-12, rtol=1e-12)
    if abs(t_power(root, df, alpha) - power) > _POWER_TOLERANCE:
        raise ArithmeticError(f"the power solver missed: λ = {root} gives power {t_power(root, df, alpha)}")
    return float(root)


def one_sample_power(effect_size: float, nobs: int, alpha: float) -> float:
    """Power of the two-sided one-sample (paired) t test at a standardised effect δ/σ with `nobs` observations."""
    return t_power(effect_size * math.sqrt(nobs), nobs - 1, alpha)


def detectable_effect_size(nobs: int, alpha: float, power: float) -> float:
    """The smallest standardised effect δ/σ the two-sided one-sample t test detects with `power` from `nobs`."""
    check_at_least("nobs", nobs, 2)
    return detectable_noncentrality(nobs - 1, alpha, power) / math.sqrt(nobs)


def required_pairs(effect_size: float, *, alpha: float = 0.05, power: float = 0.8,
                   parameter: str = "effect_size") -> int:
    """Smallest n ≥ 2 whose two-sided paired (one-sample) t test has at least `power` at `effect_size` = δ/σ.

    An effect that needs more than `MAX_PAIRS` pairs raises `ParameterError` under `parameter`.
    """
    if not effect_size > 0.0:
        raise ParameterError(parameter, f"the standardised effect must be positive, got {effect_size}")
    check_alpha_power(alpha, power)
    pairs = smallest_n(lambda nobs: one_sample_power(effect_size, nobs, alpha) >= power, MAX_PAIRS)
    if pairs is None:
        raise ParameterError(parameter, f"too small to detect: power {power} at alpha {alpha} needs more than "
                                        f"{MAX_PAIRS:.0e} pairs (standardised effect {effect_size:.3g})")
    return pairs


def smallest_n(enough: Callable[[int], bool], limit: int) -> int | None:
    """The smallest n ≥ 2 for which `enough` (false up to some n, true from there on) holds, or None beyond
    `limit`: doubling, then bisection."""
    low, high = 2, 2
    while not enough(high):
        if high >= limit:
            return None
        low, high = high, min(2 * high, limit)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle, high)
    return high


def check_alpha_power(alpha: float, power: float, *, above_alpha: bool = True) -> None:
    """A level and a power, each in (0, 1); the power above the level unless `above_alpha` is False."""
    check_open_unit("alpha", alpha)
    check_open_unit("power", power)
    if above_alpha and power <= alpha:
        raise ParameterError("power", f"{power} must exceed alpha {alpha}: a test has power α at no effect")


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
        docs = n_docs or self.n_docs
        w2 = self.weight_square_sum * self.n_docs / docs
        seed_part = (self.seed_var + self.interaction_var * w2) / n_seeds
        variance = seed_part + self.doc_var * w2
        doc_noise = w2 ** 2 * ((self.doc_var + self.interaction_var / n_seeds) ** 2 / max(docs - 1, 1)
                               + (self.interaction_var / n_seeds) ** 2 / max((n_seeds - 1) * (docs - 1), 1))
        satterthwaite = variance ** 2 / (seed_part ** 2 / (n_seeds - 1) + doc_noise)
        return variance, float(interval_df(satterthwaite, variance, seed_part, n_seeds))

    def power(self, log_effect: float, n_seeds: int, alpha: float, n_docs: int | None = None) -> float:
        variance, df = self.variance(n_seeds, n_docs)
        return t_power(log_effect / math.sqrt(variance), df, alpha)

    def seeds_required(self, log_effect: float, alpha: float, power: float, n_docs: int | None = None) -> int | None:
        """Smallest S ≥ 2 with the power (power rises with S), or None beyond MAX_SEEDS."""
        return smallest_n(lambda n_seeds: self.power(log_effect, n_seeds, alpha, n_docs) >= power, MAX_SEEDS)

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
    upper = (fit.n_seeds - 1) * fit.v_seed / stats.chi2.ppf(1.0 - UPPER_BOUND_LEVEL, fit.n_seeds - 1)
    pessimistic = replace(design, seed_var=max(upper - interaction * weight_square_sum, 0.0))
    return SeedDocumentPlan(
        seed_var=design.seed_var, doc_var=design.doc_var, interaction_var=interaction,
        pilot_power=design.power(log_effect, fit.n_seeds, alpha),
        seeds_required=design.seeds_required(log_effect, alpha, power),
        seeds_required_many_docs=design.seeds_required(log_effect, alpha, power, n_docs=10 * fit.n_docs),
        mde=math.expm1(design.detectable_log_effect(fit.n_seeds, alpha, power)),
        upper_bound_level=UPPER_BOUND_LEVEL, seed_mean_square_upper=float(upper),
        seeds_required_upper=pessimistic.seeds_required(log_effect, alpha, power),
    )


@dataclass(frozen=True)
class VarianceComponents:
    """Pilot estimates (per-token log-loss units, nats) of the components of the model above."""

    n_seeds: int
    n_docs: int
    nll_diff_mean: float  # D: the mean over seeds of r_s
    seed_ratio_var: float  # observed variance over seeds of r_s, ddof 1
    doc_diff_var: float  # observed variance over documents of d_i / n_i, ddof 1
    seed_var: float  # σ_seed², clipped at 0
    doc_var: float  # σ_doc², clipped at 0
    residual_var: float  # σ_resid²
    equal_units: bool  # every document has the same n_units (the equal weighting is then exact)


@dataclass(frozen=True)
class StudyPlan:
    """Seeds and documents needed to detect a relative ΔP, and what the pilot design itself can detect."""

    effect: float  # target relative ΔP (fraction; its sign does not matter for a two-sided test)
    log_effect: float  # |log(1 + effect)|: the per-seed log PPL ratio it corresponds to
    alpha: float
    power: float
    n_seeds: int  # pilot design
    n_docs: int
    seeds_required: int  # paired seeds for the seed-level paired t test on r_s, at n_docs documents
    seeds_required_many_docs: int | None  # the same with unlimited documents (None: σ_seed estimated as 0)
    docs_required: int  # documents for the document-level test of D (models fixed), at n_seeds seed pairs
    seed_level_mde: float  # smallest relative ΔP detected with this power by n_seeds seeds on n_docs documents
    doc_level_mde: float  # the same for the document-level test on n_docs documents
    components: VarianceComponents
    seed_document: SeedDocumentPlan | None = None  # the verdict's test; None without a pilot fit
    unit: str = "token"  # what the losses are per: token, word (the files' targets) or byte
    warnings: tuple[str, ...] = ()  # the pilot's documents group into clusters the plan does not model

    def to_dict(self) -> dict:
        return asdict(self)  # the components and the seed-and-document plan as their own dicts

    def headline(self, baseline_arm: str, variant_arm: str) -> str:
        """The plan in one line."""
        return (f"{variant_arm} vs {baseline_arm}: {self.seeds_required} seed pairs to detect ΔP "
                f"{fmt.format_delta_p(self.effect)} with power {self.power:g} at α = {self.alpha:g} (pilot "
                f"{self.n_seeds} seeds × {fmt.format_count(self.n_docs)} documents)")

    def summary(self) -> str:
        c = self.components
        many_docs = ("not estimable: the pilot shows no seed variation beyond document noise (σ_seed² = 0)"
                     if self.seeds_required_many_docs is None else f"{self.seeds_required_many_docs}")
        lines = [
            f"pilot: {self.n_seeds} paired seeds × {self.n_docs} documents, per {self.unit}, "
            f"mean log PPL ratio {fmt.format_nll_diff(c.nll_diff_mean)}",
            f"variance components (per-{self.unit} log loss, nats²):",
            f"  seed (σ_seed²)      {c.seed_var:.3e}   observed var of r_s over seeds: {c.seed_ratio_var:.3e}",
            f"  document (σ_doc²)   {c.doc_var:.3e}   observed var of d_i/n_i over documents: {c.doc_diff_var:.3e}",
            f"  residual (σ_resid²) {c.residual_var:.3e}",
            f"target: relative ΔP of {fmt.format_delta_p(self.effect)} (|log ratio| {self.log_effect:.5f}), "
            f"α = {self.alpha:g} two-sided, power {self.power:g} (noncentral t)",
            f"  paired seeds needed on {self.n_docs} documents: {self.seeds_required}",
            f"  paired seeds needed with unlimited documents: {many_docs}",
            f"  evaluation documents needed for the document-level test with {self.n_seeds} seeds: "
            f"{fmt.format_count(self.docs_required)}",
            f"minimum detectable |ΔP| of the pilot design: seed level {100 * self.seed_level_mde:.2f}% "
            f"({self.n_seeds} seeds), document level {100 * self.doc_level_mde:.2f}% ({self.n_docs} documents)",
            "  the seed-level test generalises to new training seeds; the document-level test holds the trained "
            "models fixed",
        ]
        if not c.equal_units:
            lines.append(f"  note: documents hold different numbers of {self.unit}s; the components weight documents "
                         "equally")
        if self.seed_document is not None:
            lines += self.seed_document.summary(self.n_seeds, self.n_docs, self.unit)
        lines += [f"note: {warning}" for warning in self.warnings]
        return "\n".join(lines)


def variance_components(baseline: np.ndarray, variant: np.ndarray, n_units: np.ndarray) -> VarianceComponents:
    """σ_seed², σ_doc², σ_resid² from (S, N) loss sums: the crossed fit with documents weighted equally.

    Beside them the two observed variances the plan rests on at the pilot's own size: of the per-seed log
    PPL ratios r_s (token-weighted, as the paired t test uses them) and of the seed-averaged per-token
    document differences d_i / n_i.
    """
    baseline, variant, n = metrics.paired_arrays(baseline, variant, n_units)
    n_seeds, n_docs = baseline.shape
    if n_seeds < 2 or n_docs < 2:
        raise InputError(f"planning needs a pilot of at least 2 paired seeds and 2 documents, "
                         f"got {n_seeds} × {n_docs}")
    fit = crossed_moments((variant - baseline) / n, np.full(n_docs, 1.0 / n_docs))
    log_ratios = metrics.token_nll(variant, n) - metrics.token_nll(baseline, n)
    return VarianceComponents(
        n_seeds=n_seeds, n_docs=n_docs, nll_diff_mean=float(log_ratios.mean()),
        seed_ratio_var=float(np.var(log_ratios, ddof=1)),
        doc_diff_var=float(np.var(metrics.document_differences(baseline, variant) / n, ddof=1)),
        seed_var=float(fit.seed_var), doc_var=float(fit.doc_var), residual_var=float(fit.interaction_var),
        equal_units=bool(np.all(n == n[0])),
    )


def plan_study(components: VarianceComponents, effect: float, *, alpha: float = 0.05,
               power: float = 0.8) -> StudyPlan:
    """Paired seeds and documents detecting a relative ΔP of `effect`, and the pilot design's detectable ΔP."""
    if not math.isfinite(effect) or effect <= -1.0 or effect == 0.0:
        raise ParameterError("effect", f"a relative ΔP must be non-zero and greater than −1 (e.g. 0.02), got {effect}")
    check_alpha_power(alpha, power, above_alpha=False)
    log_effect = abs(math.log1p(effect))
    # The pilot's own design rests on the observed variances; the components project to other designs.
    seed_sd = math.sqrt(components.seed_ratio_var)
    doc_sd = math.sqrt(components.doc_diff_var)
    if seed_sd == 0.0 or doc_sd == 0.0:
        which = "across seeds (every seed pair gives the same difference)" if seed_sd == 0.0 else "across documents"
        raise InputError(f"the pilot runs show no variation in the loss difference {which}; planning needs a pilot "
                         "whose differences vary")

    def pairs(sd: float) -> int:
        return required_pairs(log_effect / sd, alpha=alpha, power=power, parameter="effect")

    return StudyPlan(
        effect=effect, log_effect=log_effect, alpha=alpha, power=power,
        n_seeds=components.n_seeds, n_docs=components.n_docs,
        seeds_required=pairs(seed_sd),
        seeds_required_many_docs=None if components.seed_var == 0.0 else pairs(math.sqrt(components.seed_var)),
        docs_required=pairs(doc_sd),
        seed_level_mde=math.expm1(detectable_effect_size(components.n_seeds, alpha, power) * seed_sd),
        doc_level_mde=math.expm1(detectable_effect_size(components.n_docs, alpha, power) * doc_sd),
        components=components,
    )
