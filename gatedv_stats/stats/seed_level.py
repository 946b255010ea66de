"""The seed-level view of one paired comparison: what the document bootstrap leaves out.

The document bootstrap holds the trained models fixed. Here seeds are treated as a sample too:

* the two-level seed × document bootstrap (`two_level_bootstrap`), an interval for ΔP itself;
* a paired t interval on the per-seed log PPL ratios r_s = NLL_variant,s − NLL_baseline,s (their mean is D);
  it treats the evaluation set as fixed, so it speaks to new seeds on these documents;
* an exact one-sided sign test on the improved pairs, as the paper counts them, beside the exact two-sided
  permutation and sign tests of `seed_tests`.

With 3–5 seeds each of these is weak in its own way; `few_seed_limits` states how, in numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats

from gatedv_stats.core import formatting as fmt
from gatedv_stats.core.errors import InputError
from gatedv_stats.pairing.losses import PairedLosses
from gatedv_stats.stats import metrics
from gatedv_stats.stats.seed_tests import (
    PairedTInterval,
    SeedPermutationTest,
    SignTest,
    paired_t_interval,
    seed_permutation_test,
    sign_test,
)
from gatedv_stats.stats.two_level_bootstrap import (
    TwoLevelBootstrapInterval,
    percentile_seed_coverage,
    two_level_bootstrap,
)


@dataclass(frozen=True)
class SeedUncertainty:
    """The seed-level view of one paired comparison."""

    baseline_arm: str
    variant_arm: str
    bootstrap: TwoLevelBootstrapInterval
    t_interval: PairedTInterval
    sign_test: SignTest  # one-sided ("greater"), as the paper counts improved pairs
    permutation_test: SeedPermutationTest | None  # exact, two-sided; None beyond 20 seeds or with no differences
    sign_test_two_sided: SignTest
    limits: tuple[str, ...]

    def to_dict(self) -> dict:
        s = self.sign_test
        return {
            "baseline_arm": self.baseline_arm,
            "variant_arm": self.variant_arm,
            "two_level_bootstrap": self.bootstrap.to_dict(),
            "t_interval": self.t_interval.to_dict(),
            # the paper's one-sided count, under its published keys
            "sign_test": {"improved": s.improved, "n_pairs": s.n_pairs, "ties": s.ties, "p_value": s.p_value,
                          "min_attainable_p": s.min_attainable_p},
            "seed_permutation_test": None if self.permutation_test is None else self.permutation_test.to_dict(),
            "seed_sign_test_two_sided": self.sign_test_two_sided.to_dict(),
            "limits": list(self.limits),
        }

    def summary(self) -> str:
        b, t, s = self.bootstrap, self.t_interval, self.sign_test
        pct = fmt.format_level(b.confidence_level)
        lines = [
            f"seed × document bootstrap ({fmt.format_count(b.n_resamples)} resamples, seed {b.rng_seed}): "
            f"ΔP {fmt.format_delta_p(b.delta_p)}, {pct} interval {fmt.format_delta_p_interval(b.confidence_interval)}",
            f"paired t on per-seed log PPL ratios (df {t.df}): mean {fmt.format_nll_diff(t.nll_diff_mean)}, "
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
                     rng_seed: int = 0, progress: bool | None = False) -> SeedUncertainty:
    """Two-level bootstrap, paired t interval and sign tests for one paired comparison (≥ 2 seed pairs)."""
    if paired.n_pairs < 2:
        raise InputError(f"{paired.baseline_arm} vs {paired.variant_arm}: seed-level uncertainty needs at least "
                         f"2 paired seeds, got {paired.n_pairs}")
    nll_baseline = metrics.token_nll(paired.baseline, paired.n_units)
    nll_variant = metrics.token_nll(paired.variant, paired.n_units)
    per_seed = nll_variant - nll_baseline
    alpha = 1.0 - confidence_level
    try:
        permutation = seed_permutation_test(per_seed, alpha=alpha)
    except InputError:  # beyond 20 seeds, or every per-seed difference 0
        permutation = None
    return SeedUncertainty(
        baseline_arm=paired.baseline_arm,
        variant_arm=paired.variant_arm,
        bootstrap=two_level_bootstrap(paired.baseline, paired.variant, paired.n_units, n_resamples=n_resamples,
                                      confidence_level=confidence_level, rng_seed=rng_seed, progress=progress),
        t_interval=paired_t_interval(per_seed, confidence_level=confidence_level),
        # the paper counts a pair improved when its variant's PPL is below its baseline's
        sign_test=sign_test(metrics.perplexity(nll_variant) - metrics.perplexity(nll_baseline),
                            alternative="greater", alpha=alpha),
        permutation_test=permutation,
        sign_test_two_sided=sign_test(per_seed, alpha=alpha),
        limits=few_seed_limits(paired.n_pairs, confidence_level),
    )
