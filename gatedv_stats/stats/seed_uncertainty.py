"""Uncertainty over training seeds as well as documents: what the document bootstrap leaves out.

The document bootstrap holds the trained models fixed. Here seeds are treated as a sample too:

* a two-level bootstrap that resamples seed pairs and, independently, documents (the two are crossed: every
  seed is evaluated on every document), giving an interval for ΔP itself;
* a paired t interval on the per-seed log PPL ratios r_s = NLL_variant,s − NLL_baseline,s (their mean is D);
  it treats the evaluation set as fixed, so it speaks to new seeds on these documents;
* an exact one-sided sign test on the improved pairs.

With 3–5 seeds each of these is weak in its own way; `few_seed_limits` states how, in numbers.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from gatedv_stats import formatting as fmt
from gatedv_stats.stats import metrics
from gatedv_stats.errors import InputError
from gatedv_stats.pairing import PairedLosses
from gatedv_stats.stats.intervals import ConfidenceInterval, log_interval_as_change
from gatedv_stats.stats.resampling import resampled_sums
from gatedv_stats.stats.seed_tests import SeedPermutationTest, SeedSignTest, seed_permutation_test, seed_sign_test
from gatedv_stats.stats.validation import check_confidence_level, check_n_resamples, check_rng_seed

@dataclass(frozen=True)
class SeedDocumentInterval:
    """Two-level (seed × document) percentile bootstrap interval for ΔP."""

    delta_p: float  # observed ΔP = P̄_variant / P̄_baseline − 1
    confidence_interval: ConfidenceInterval  # for ΔP
    confidence_level: float
    n_resamples: int
    seed: int
    n_seeds: int
    n_docs: int
    distinct_seed_resamples: int  # C(2S − 1, S): how coarse the seed level of the bootstrap is
    seed_level_coverage: float  # approximate coverage of the percentile interval when seed variation dominates

    def to_dict(self) -> dict:
        """The published JSON keys (low, high, confidence, samples)."""
        return {"delta_p": self.delta_p, "low": self.confidence_interval.low, "high": self.confidence_interval.high,
                "confidence": self.confidence_level, "samples": self.n_resamples, "seed": self.seed,
                "n_seeds": self.n_seeds, "n_docs": self.n_docs,
                "distinct_seed_resamples": self.distinct_seed_resamples,
                "seed_level_coverage": self.seed_level_coverage}


@dataclass(frozen=True)
class PairedTInterval:
    """Paired t interval on the per-seed log PPL ratios (evaluation set fixed)."""

    mean_log_ratio: float  # mean of r_s, equal to D
    confidence_interval: ConfidenceInterval  # for the mean log ratio
    confidence_level: float
    df: int
    critical_t: float
    t_statistic: float
    p_value: float  # two-sided, H0: mean r_s = 0
    ratio_change: float  # exp(mean r_s) − 1: geometric-mean relative PPL change
    ratio_interval: ConfidenceInterval  # exp(interval) − 1

    def to_dict(self) -> dict:
        """The published JSON keys (low, high, confidence, ratio_low, ratio_high)."""
        return {"mean_log_ratio": self.mean_log_ratio, "low": self.confidence_interval.low,
                "high": self.confidence_interval.high, "confidence": self.confidence_level, "df": self.df,
                "critical_t": self.critical_t, "t_statistic": self.t_statistic, "p_value": self.p_value,
                "ratio_change": self.ratio_change, "ratio_low": self.ratio_interval.low,
                "ratio_high": self.ratio_interval.high}


@dataclass(frozen=True)
class SignTest:
    """Exact one-sided sign test: is a seed pair more often improved than not? (ties dropped)"""

    improved: int
    n_pairs: int  # pairs without a tie
    ties: int
    p_value: float  # P(X ≥ improved), X ~ Binomial(n_pairs, 1/2)
    min_attainable_p: float  # 2^−n_pairs: the best this many pairs can ever show

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class SeedUncertainty:
    """The seed-level view of one paired comparison."""

    baseline_arm: str
    variant_arm: str
    bootstrap: SeedDocumentInterval
    t_interval: PairedTInterval
    sign_test: SignTest  # one-sided, as the paper counts improved pairs
    permutation_test: SeedPermutationTest | None  # exact, two-sided; None beyond 20 seeds or with no differences
    sign_test_two_sided: SeedSignTest
    limits: tuple[str, ...]

    def to_dict(self) -> dict:
        return {
            "baseline_arm": self.baseline_arm,
            "variant_arm": self.variant_arm,
            "two_level_bootstrap": self.bootstrap.to_dict(),
            "t_interval": self.t_interval.to_dict(),
            "sign_test": self.sign_test.to_dict(),
            "seed_permutation_test": None if self.permutation_test is None else self.permutation_test.to_dict(),
            "seed_sign_test_two_sided": self.sign_test_two_sided.to_dict(),
            "limits": list(self.limits),
        }

    def summary(self) -> str:
        b, t, s = self.bootstrap, self.t_interval, self.sign_test
        pct = fmt.format_level(b.confidence_level)
        lines = [
            f"seed × document bootstrap ({fmt.format_count(b.n_resamples)} resamples, seed {b.seed}): "
            f"ΔP {fmt.format_delta_p(b.delta_p)}, {pct} interval {fmt.format_delta_p_interval(b.confidence_interval)}",
            f"paired t on per-seed log PPL ratios (df {t.df}): mean {fmt.format_nll_diff(t.mean_log_ratio)}, "
            f"{pct} interval {fmt.format_interval(*t.confidence_interval)}, p = {t.p_value:.4g}; as a PPL ratio "
            f"{fmt.format_delta_p(t.ratio_change)} {fmt.format_delta_p_interval(t.ratio_interval)}",
            f"sign test: {fmt.format_pairs(s.improved, s.n_pairs)} pairs improved"
            + (f" ({s.ties} tied)" if s.ties else "")
            + f", one-sided exact p = {s.p_value:.4g}",
            *([] if self.permutation_test is None else [self.permutation_test.summary()]),
            self.sign_test_two_sided.summary(),
            *(f"  note: {line}" for line in self.limits),
        ]
        return "\n".join(lines)


def seed_document_bootstrap(baseline: np.ndarray, variant: np.ndarray, n_targets: np.ndarray, *,
                            n_resamples: int = 2000, confidence_level: float = 0.95, seed: int = 0,
                            progress: bool | None = False) -> SeedDocumentInterval:
    """Percentile interval for ΔP from resampling seed pairs and, independently, documents.

    Each resample draws S seed pairs and N documents with replacement; per-seed PPLs are recomputed on the
    resampled documents and ΔP = mean PPL_variant / mean PPL_baseline − 1 over the resampled pairs.
    """
    baseline, variant, n = paired_arrays(baseline, variant, n_targets)
    if baseline.shape[0] < 2:
        raise InputError(f"seed × document bootstrap: needs at least 2 paired seeds, got {baseline.shape[0]}")
    check_n_resamples(n_resamples)
    check_confidence_level(confidence_level)
    check_rng_seed(seed)
    n_seeds, n_docs = baseline.shape
    observed = metrics.delta_p(metrics.perplexity(metrics.token_nll(baseline, n)).mean(),
                               metrics.perplexity(metrics.token_nll(variant, n)).mean())
    seed_counts = np.random.default_rng(seed).multinomial(n_seeds, np.full(n_seeds, 1.0 / n_seeds),
                                                          size=n_resamples)  # (B, S)
    # Per resample, the drawn documents' loss sums of every seed of both arms and their targets (documents drawn
    # as the document bootstrap draws them, from generators spawned from the same seed).
    sums = resampled_sums(np.column_stack([baseline.T, variant.T, n]), n_resamples=n_resamples, seed=seed,
                          progress=progress, desc="seed × document bootstrap")
    tokens = sums[:, -1:]
    ppl_baseline = metrics.perplexity(sums[:, :n_seeds] / tokens)  # (B, S)
    ppl_variant = metrics.perplexity(sums[:, n_seeds:2 * n_seeds] / tokens)
    estimates = (seed_counts * ppl_variant).sum(axis=1) / (seed_counts * ppl_baseline).sum(axis=1) - 1.0
    alpha = 1.0 - confidence_level
    low, high = np.quantile(estimates, [alpha / 2, 1 - alpha / 2])
    return SeedDocumentInterval(
        delta_p=float(observed), confidence_interval=ConfidenceInterval(float(low), float(high)),
        confidence_level=confidence_level, n_resamples=n_resamples, seed=seed, n_seeds=n_seeds, n_docs=n_docs,
        distinct_seed_resamples=math.comb(2 * n_seeds - 1, n_seeds),
        seed_level_coverage=percentile_seed_coverage(n_seeds, confidence_level),
    )


def paired_t_interval(log_ratios: np.ndarray, *, confidence_level: float = 0.95) -> PairedTInterval:
    """Student t interval and two-sided test on the per-seed log PPL ratios r_s (scipy `ttest_1samp`)."""
    r = np.asarray(log_ratios, dtype=np.float64)
    if r.ndim != 1 or r.size < 2:
        raise InputError(f"paired t interval: needs at least 2 paired seeds, got {r.size}")
    if not np.all(np.isfinite(r)):
        raise InputError("paired t interval: per-seed log PPL ratios must be finite")
    if np.ptp(r) == 0:
        raise InputError("paired t interval: every seed pair has the same log PPL ratio, so its spread is zero")
    check_confidence_level(confidence_level)
    result = stats.ttest_1samp(r, 0.0)
    interval = result.confidence_interval(confidence_level)
    mean = float(r.mean())
    return PairedTInterval(
        mean_log_ratio=mean, confidence_interval=ConfidenceInterval(float(interval.low), float(interval.high)),
        confidence_level=confidence_level, df=int(result.df),
        critical_t=float(stats.t.ppf(0.5 + confidence_level / 2, result.df)),
        t_statistic=float(result.statistic), p_value=float(result.pvalue), ratio_change=math.expm1(mean),
        ratio_interval=log_interval_as_change(interval.low, interval.high),
    )


def sign_test(baseline_ppl: np.ndarray, variant_ppl: np.ndarray) -> SignTest:
    """Exact one-sided binomial test (scipy `binomtest`) that the variant improves more pairs than not."""
    baseline_ppl = np.asarray(baseline_ppl, dtype=np.float64)
    variant_ppl = np.asarray(variant_ppl, dtype=np.float64)
    improved = metrics.improved_pairs(baseline_ppl, variant_ppl)
    ties = int(np.sum(baseline_ppl == variant_ppl))
    n_pairs = int(baseline_ppl.size) - ties
    if n_pairs == 0:
        raise InputError("sign test: every seed pair is tied, so there is nothing to test")
    p_value = stats.binomtest(improved, n_pairs, 0.5, alternative="greater").pvalue
    return SignTest(improved=improved, n_pairs=n_pairs, ties=ties, p_value=float(p_value),
                    min_attainable_p=0.5 ** n_pairs)


def percentile_seed_coverage(n_seeds: int, confidence_level: float = 0.95) -> float:
    """Approximate coverage of a percentile bootstrap over n seeds for a mean of normal seed effects.

    The bootstrap spread is the plug-in SD (ddof 0) and its quantiles are normal ones, so the interval covers
    when |t_{n−1}| ≤ z·sqrt((n−1)/n).
    """
    if n_seeds < 2:
        return math.nan
    z = stats.norm.ppf(0.5 + confidence_level / 2)
    return float(1.0 - 2.0 * stats.t.sf(z * math.sqrt((n_seeds - 1) / n_seeds), n_seeds - 1))


def few_seed_limits(n_seeds: int, confidence_level: float = 0.95) -> tuple[str, ...]:
    """Plain statements of what S paired seeds can and cannot show."""
    pct = fmt.format_level(confidence_level)
    coverage = round(100 * percentile_seed_coverage(n_seeds, confidence_level))
    alpha = 1.0 - confidence_level
    critical = stats.t.ppf(1 - alpha / 2, n_seeds - 1)
    z = stats.norm.ppf(1 - alpha / 2)
    one_sided = 0.5 ** n_seeds
    if one_sided > alpha:
        sign = (f"sign test: {n_seeds} pairs cannot reach one-sided p ≤ {alpha:g} even if every pair improves "
                f"(best possible p = {one_sided:.4g})")
    else:
        failures = max(k for k in range(n_seeds + 1) if stats.binom.cdf(k, n_seeds, 0.5) <= alpha)
        sign = (f"sign test: {n_seeds} pairs reach one-sided p ≤ {alpha:g} only if at most {failures} "
                f"fail to improve (best possible p = {one_sided:.4g})")
    return (
        f"t interval: {n_seeds - 1} degrees of freedom, critical t = {critical:.2f} vs {z:.2f} for many seeds, "
        f"so it is {critical / z:.1f}× wider than a normal interval; its normality assumption cannot be checked "
        f"with {n_seeds} seeds",
        sign,
        f"two-level bootstrap: only {math.comb(2 * n_seeds - 1, n_seeds)} distinct seed resamples, and when seed "
        f"variation dominates its {pct} interval covers only about {coverage}% "
        "(it ignores the t correction); read it as a lower bound on the uncertainty",
    )


def seed_uncertainty(paired: PairedLosses, *, n_resamples: int = 2000, confidence_level: float = 0.95,
                     seed: int = 0, progress: bool | None = False) -> SeedUncertainty:
    """Two-level bootstrap, paired t interval and sign test for one paired comparison (≥ 2 seed pairs)."""
    if paired.n_pairs < 2:
        raise InputError(f"{paired.baseline_arm} vs {paired.variant_arm}: seed-level uncertainty needs at least "
                         f"2 paired seeds, got {paired.n_pairs}")
    nll_baseline = metrics.token_nll(paired.baseline, paired.n_targets)
    nll_variant = metrics.token_nll(paired.variant, paired.n_targets)
    per_seed = nll_variant - nll_baseline
    alpha = 1.0 - confidence_level
    try:
        permutation = seed_permutation_test(per_seed, alpha=alpha)
    except InputError:  # beyond 20 seeds, or every per-seed difference 0
        permutation = None
    return SeedUncertainty(
        baseline_arm=paired.baseline_arm,
        variant_arm=paired.variant_arm,
        bootstrap=seed_document_bootstrap(paired.baseline, paired.variant, paired.n_targets,
                                          n_resamples=n_resamples, confidence_level=confidence_level, seed=seed,
                                          progress=progress),
        t_interval=paired_t_interval(nll_variant - nll_baseline, confidence_level=confidence_level),
        sign_test=sign_test(metrics.perplexity(nll_baseline), metrics.perplexity(nll_variant)),
        permutation_test=permutation,
        sign_test_two_sided=seed_sign_test(per_seed, alpha=alpha),
        limits=few_seed_limits(paired.n_pairs, confidence_level),
    )


def paired_arrays(baseline: np.ndarray, variant: np.ndarray,
                  n_targets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (S, N), (S, N), (N,) float64 arrays of a paired comparison, shapes checked."""
    baseline = np.asarray(baseline, dtype=np.float64)
    variant = np.asarray(variant, dtype=np.float64)
    n = np.asarray(n_targets, dtype=np.float64)
    if baseline.ndim != 2 or baseline.shape != variant.shape or n.shape != (baseline.shape[1],):
        raise InputError(f"loss sums {baseline.shape} / {variant.shape} and n_targets {n.shape} "
                         "must be (S, N), (S, N), (N,)")
    return baseline, variant, n

