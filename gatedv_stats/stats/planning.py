"""Planning a paired study: variance components from pilot runs, then seeds and documents for a target ΔP.

The model behind it is a crossed random-effects model for the per-token loss difference of a document i
under seed pair s,

    X_si = (ℓ_variant,s,i − ℓ_baseline,s,i) / n_i = δ + e_s + h_i + ε_si,

with a seed effect e_s (SD σ_seed: how much the variant's advantage moves from one training seed to the
next), a document effect h_i (SD σ_doc: how much it moves between documents) and a residual ε_si
(SD σ_resid). The per-seed log PPL ratio r_s then has variance σ_seed² + σ_resid²/N, and the
seed-averaged per-document difference has variance σ_doc² + σ_resid²/S between documents. The components
are estimated by the two-way ANOVA method of moments (documents weighted equally — exact when every
document has the same number of targets, as in the evaluation sets of docs/method.md §3).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np

from gatedv_stats import formatting as fmt
from gatedv_stats.stats import metrics
from gatedv_stats.errors import InputError, ParameterError
from gatedv_stats.pairing import PairedLosses
from gatedv_stats.stats.power import detectable_effect_size, required_pairs
from gatedv_stats.stats.seed_document import seed_document_interval
from gatedv_stats.stats.seed_document_plan import SeedDocumentPlan, seed_document_plan
from gatedv_stats.stats.seed_uncertainty import paired_arrays
from gatedv_stats.stats.validation import check_open_unit


@dataclass(frozen=True)
class VarianceComponents:
    """Pilot estimates (per-token log-loss units, nats) of the components of the model above."""

    n_seeds: int
    n_docs: int
    mean_log_ratio: float  # mean over seeds of r_s (= D)
    seed_ratio_var: float  # observed variance over seeds of r_s, ddof 1
    doc_diff_var: float  # observed variance over documents of d_i / n_i, ddof 1
    seed_var: float  # σ_seed², clipped at 0
    doc_var: float  # σ_doc², clipped at 0
    residual_var: float  # σ_resid²
    equal_targets: bool  # every document has the same n_targets (the equal weighting is then exact)

    def to_dict(self) -> dict:
        return asdict(self)


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

    def to_dict(self) -> dict:
        data = asdict(self)
        data["components"] = self.components.to_dict()
        data["seed_document"] = None if self.seed_document is None else self.seed_document.to_dict()
        return data

    def summary(self) -> str:
        c = self.components
        many_docs = ("not estimable: the pilot shows no seed variation beyond document noise (σ_seed² = 0)"
                     if self.seeds_required_many_docs is None else f"{self.seeds_required_many_docs}")
        lines = [
            f"pilot: {self.n_seeds} paired seeds × {self.n_docs} documents, per {self.unit}, "
            f"mean log PPL ratio {fmt.format_nll_diff(c.mean_log_ratio)}",
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
        if not c.equal_targets:
            lines.append("  note: documents have different n_targets; the components weight documents equally")
        if self.seed_document is not None:
            lines += self.seed_document.summary(self.n_seeds, self.n_docs, self.unit)
        return "\n".join(lines)


def variance_components(baseline: np.ndarray, variant: np.ndarray, n_targets: np.ndarray) -> VarianceComponents:
    """Two-way (seed × document) ANOVA estimates of σ_seed², σ_doc², σ_resid² from (S, N) loss sums.

    Beside them the two observed variances the plan rests on at the pilot's own size: of the per-seed log
    PPL ratios r_s (token-weighted, as the paired t test uses them) and of the seed-averaged per-token
    document differences d_i / n_i.
    """
    baseline, variant, n = paired_arrays(baseline, variant, n_targets)
    n_seeds, n_docs = baseline.shape
    if n_seeds < 2 or n_docs < 2:
        raise InputError(f"planning needs a pilot of at least 2 paired seeds and 2 documents, "
                         f"got {n_seeds} × {n_docs}")
    x = (variant - baseline) / n
    grand = x.mean()
    seed_means = x.mean(axis=1)
    doc_means = x.mean(axis=0)
    residual = x - seed_means[:, None] - doc_means[None, :] + grand
    ms_seed = n_docs * np.sum((seed_means - grand) ** 2) / (n_seeds - 1)
    ms_doc = n_seeds * np.sum((doc_means - grand) ** 2) / (n_docs - 1)
    ms_residual = np.sum(residual ** 2) / ((n_seeds - 1) * (n_docs - 1))
    log_ratios = metrics.token_nll(variant, n) - metrics.token_nll(baseline, n)
    return VarianceComponents(
        n_seeds=n_seeds, n_docs=n_docs, mean_log_ratio=float(log_ratios.mean()),
        seed_ratio_var=float(np.var(log_ratios, ddof=1)),
        doc_diff_var=float(np.var(metrics.document_differences(baseline, variant) / n, ddof=1)),
        seed_var=float(max(0.0, (ms_seed - ms_residual) / n_docs)),
        doc_var=float(max(0.0, (ms_doc - ms_residual) / n_seeds)),
        residual_var=float(ms_residual),
        equal_targets=bool(np.all(n == n[0])),
    )


def plan_study(components: VarianceComponents, effect: float, *, alpha: float = 0.05,
               power: float = 0.8) -> StudyPlan:
    """Paired seeds and documents detecting a relative ΔP of `effect`, and the pilot design's detectable ΔP."""
    if not math.isfinite(effect) or effect <= -1.0 or effect == 0.0:
        raise ParameterError("effect", f"a relative ΔP must be non-zero and greater than −1 (e.g. 0.02), got {effect}")
    check_open_unit("alpha", alpha)
    check_open_unit("power", power)
    log_effect = abs(math.log1p(effect))
    # The pilot's own design rests on the observed variances; the components project to other designs.
    seed_sd = math.sqrt(components.seed_ratio_var)
    doc_sd = math.sqrt(components.doc_diff_var)
    if seed_sd == 0.0 or doc_sd == 0.0:
        which = "across seeds (every seed pair gives the same difference)" if seed_sd == 0.0 else "across documents"
        raise InputError(f"the pilot runs show no variation in the loss difference {which}; planning needs a pilot "
                         "whose differences vary")
    many_docs_sd = math.sqrt(components.seed_var)
    return StudyPlan(
        effect=effect, log_effect=log_effect, alpha=alpha, power=power,
        n_seeds=components.n_seeds, n_docs=components.n_docs,
        seeds_required=required_pairs(log_effect / seed_sd, alpha=alpha, power=power, parameter="effect"),
        seeds_required_many_docs=(None if many_docs_sd == 0.0 else
                                  required_pairs(log_effect / many_docs_sd, alpha=alpha, power=power,
                                                 parameter="effect")),
        docs_required=required_pairs(log_effect / doc_sd, alpha=alpha, power=power, parameter="effect"),
        seed_level_mde=_relative_mde(components.n_seeds, seed_sd, alpha, power),
        doc_level_mde=_relative_mde(components.n_docs, doc_sd, alpha, power),
        components=components,
    )


def plan_from_pilot(paired: PairedLosses, effect: float, *, alpha: float = 0.05, power: float = 0.8) -> StudyPlan:
    """`plan_study` on the variance components of paired pilot runs, with the plan for the verdict's
    seed-and-document test."""
    plan = replace(plan_study(variance_components(paired.baseline, paired.variant, paired.n_targets), effect,
                              alpha=alpha, power=power), unit=paired.unit)
    try:
        fit = seed_document_interval(paired.baseline, paired.variant, paired.n_targets)
    except InputError:  # no spread to plan from: plan_study has said so already
        return plan
    weights = paired.n_targets / paired.n_targets.sum()
    return replace(plan, seed_document=seed_document_plan(fit, float(np.sum(weights ** 2)), plan.log_effect,
                                                         alpha=alpha, power=power))


def _relative_mde(nobs: int, sd: float, alpha: float, power: float) -> float:
    return math.expm1(detectable_effect_size(nobs, alpha, power) * sd)
