"""Statistics over seed pairs: what the document bootstrap leaves out when it holds the trained models fixed.

Each works on the S seed pairs of one paired comparison, from (S, N) loss sums and (N,) unit counts or from the
per-seed differences D_s = NLL_var,s − NLL_base,s (the log PPL ratio r_s of seed pair s; their mean is D):

* the paired t interval on r_s, which holds the evaluation documents fixed (new seeds on these documents);
* the exact sign-flip permutation test of mean D_s = 0 and the binomial sign test of the improved pairs (the paper
  counts them one-sided), which assume no distribution but cannot go below p = 2^(1−S) two-sided;
* the two-level seed × document bootstrap, an interval for ΔP itself over new seeds and new documents, resampling
  seed pairs and, independently, documents (crossed: the "pigeonhole" bootstrap of Owen 2007); with few seeds its
  seed level is coarse, and `percentile_seed_coverage` says how far its percentile interval falls short.

`seed_uncertainty` gathers them for one comparison; with 3–5 seeds each is weak in its own way, and
`few_seed_limits` states how, in numbers.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from gatedv_stats.core import formatting as fmt
from gatedv_stats.core.defaults import DEFAULTS
from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.core.validation import check_confidence_level, check_n_resamples, check_open_unit, check_seed
from gatedv_stats.stats import metrics
from gatedv_stats.stats.intervals import ConfidenceInterval, log_interval_as_change
from gatedv_stats.stats.permutation import sign_flip_test
from gatedv_stats.stats.resampling import resampled_sums

MAX_EXACT_SEEDS = 20
"""Up to this many seed pairs every sign vector is enumerated (2^20 ≈ 10^6)."""

SIGN_TEST_ALTERNATIVES = ("two-sided", "greater", "less")
"""Of the number of improved pairs against Binomial(S', 1/2), as in scipy.stats.binomtest."""


# --- the tests over seed pairs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PairedTInterval:
    """Paired t interval on the per-seed log PPL ratios (evaluation set fixed)."""

    nll_diff_mean: float  # D: the mean of r_s
    confidence_interval: ConfidenceInterval  # for D
    confidence_level: float
    df: int
    critical_t: float
    t_statistic: float
    p_value: float  # two-sided, H0: mean r_s = 0
    ratio_change: float  # exp(mean r_s) − 1: geometric-mean relative PPL change
    ratio_interval: ConfidenceInterval  # exp(interval) − 1

    def to_dict(self) -> dict:
        """The published JSON keys (low, high, confidence, ratio_low, ratio_high)."""
        return {"nll_diff_mean": self.nll_diff_mean, "low": self.confidence_interval.low,
                "high": self.confidence_interval.high, "confidence": self.confidence_level, "df": self.df,
                "critical_t": self.critical_t, "t_statistic": self.t_statistic, "p_value": self.p_value,
                "ratio_change": self.ratio_change, "ratio_low": self.ratio_interval.low,
                "ratio_high": self.ratio_interval.high}


@dataclass(frozen=True)
class SeedPermutationTest:
    """Exact two-sided sign-flip permutation test of mean D_s = 0 over the paired seeds."""

    statistic: float  # mean of D_s (= D)
    p_value: float
    n_seeds: int
    n_sign_vectors: int  # 2^S
    min_attainable_p: float  # 2^(1−S)
    alpha: float
    can_reach_alpha: bool  # min_attainable_p ≤ alpha
    notes: tuple[str, ...]

    def to_dict(self) -> dict:
        return {**asdict(self), "notes": list(self.notes)}

    def summary(self) -> str:
        lines = [f"seed permutation test (exact, all {self.n_sign_vectors:,} sign vectors of {self.n_seeds} seed "
                 f"pairs): p = {self.p_value:.4g}, smallest possible p = {self.min_attainable_p:.4g}"]
        return "\n".join(lines + [f"  note: {note}" for note in self.notes])


@dataclass(frozen=True)
class SignTest:
    """Exact binomial sign test: are improved seed pairs (D_s < 0) more (or less) common than worse ones?"""

    improved: int
    worse: int
    ties: int  # pairs with D_s = 0, left out
    alternative: str  # "two-sided"; "greater": improved pairs are the more common; "less": the less common
    p_value: float
    min_attainable_p: float  # 2^(1 − untied pairs), at most 1, two-sided; 2^−(untied pairs) one-sided
    alpha: float
    can_reach_alpha: bool
    notes: tuple[str, ...]

    @property
    def n_pairs(self) -> int:
        """Pairs without a tie."""
        return self.improved + self.worse

    def to_dict(self) -> dict:
        """The published JSON keys (the alternative is named by the key the test is published under)."""
        return {key: value for key, value in asdict(self).items() if key != "alternative"} | {"notes": list(self.notes)}

    def summary(self) -> str:
        lines = [f"seed sign test: {self.improved} of {self.n_pairs} untied pairs improved"
                 + (f" ({self.ties} tied)" if self.ties else "")
                 + f", {_sided(self.alternative)} exact p = {self.p_value:.4g}, smallest possible p = "
                 f"{self.min_attainable_p:.4g}"]
        return "\n".join(lines + [f"  note: {note}" for note in self.notes])


def paired_t_interval(log_ratios: np.ndarray, *,
                      confidence_level: float = DEFAULTS.confidence_level) -> PairedTInterval:
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
        nll_diff_mean=mean, confidence_interval=ConfidenceInterval(float(interval.low), float(interval.high)),
        confidence_level=confidence_level, df=int(result.df),
        critical_t=float(stats.t.ppf(0.5 + confidence_level / 2, result.df)),
        t_statistic=float(result.statistic), p_value=float(result.pvalue), ratio_change=math.expm1(mean),
        ratio_interval=log_interval_as_change(interval.low, interval.high),
    )


def seed_permutation_test(per_seed_differences: np.ndarray, *,
                          alpha: float = 0.05) -> SeedPermutationTest:
    """Exact sign-flip test over 2 ≤ S ≤ MAX_EXACT_SEEDS paired seeds; `alpha` only shapes the notes."""
    alpha = check_open_unit("alpha", alpha)
    d = _per_seed(per_seed_differences, "seed permutation test", minimum=2)
    if d.size > MAX_EXACT_SEEDS:
        raise InputError(f"seed permutation test: enumerates sign vectors of up to {MAX_EXACT_SEEDS} seed pairs, "
                         f"got {d.size}; with that many seeds use the seed-and-document interval")
    if not np.any(d):
        raise InputError("seed permutation test: every per-seed difference is 0, so there is nothing to test")
    exact = sign_flip_test(d, np.ones_like(d), alternative="two-sided", exact_max_docs=d.size)
    floor = 2.0 ** (1 - d.size)
    return SeedPermutationTest(statistic=float(d.mean()), p_value=exact.p_value, n_seeds=int(d.size),
                               n_sign_vectors=exact.n_permutations, min_attainable_p=floor, alpha=alpha,
                               can_reach_alpha=floor <= alpha,
                               notes=_floor_note("permutation", f"{d.size} seed pairs", floor, alpha, "two-sided"))


def sign_test(per_seed_differences: np.ndarray, *, alternative: str = "two-sided",
              alpha: float = 0.05) -> SignTest:
    """Exact binomial sign test (scipy `binomtest`) of the number of improved pairs (D_s < 0) against the worse
    ones, D_s variant − baseline of any per-seed measure; ties are left out and `alpha` only shapes the notes."""
    if alternative not in SIGN_TEST_ALTERNATIVES:
        raise ParameterError("alternative",
                             f"must be one of {', '.join(SIGN_TEST_ALTERNATIVES)} (got {alternative!r})")
    alpha = check_open_unit("alpha", alpha)
    d = _per_seed(per_seed_differences, "seed sign test", minimum=1)
    improved, worse = int(np.sum(d < 0)), int(np.sum(d > 0))
    untied = improved + worse
    if untied == 0:
        raise InputError("seed sign test: every seed pair is tied, so there is nothing to test")
    floor = min(1.0, 2.0 ** (1 - untied)) if alternative == "two-sided" else 0.5 ** untied
    return SignTest(improved=improved, worse=worse, ties=int(d.size - untied), alternative=alternative,
                    p_value=float(stats.binomtest(improved, untied, 0.5, alternative=alternative).pvalue),
                    min_attainable_p=floor, alpha=alpha, can_reach_alpha=floor <= alpha,
                    notes=_floor_note("sign", f"{untied} untied seed pairs", floor, alpha, alternative))


def _per_seed(values: np.ndarray, what: str, minimum: int) -> np.ndarray:
    d = np.asarray(values, dtype=np.float64)
    if d.ndim != 1 or d.size < minimum:
        raise InputError(f"{what}: needs a 1-D array of at least {minimum} per-seed differences, got shape {d.shape}")
    if not np.all(np.isfinite(d)):
        raise InputError(f"{what}: per-seed differences must be finite")
    return d


def _sided(alternative: str) -> str:
    return "two-sided" if alternative == "two-sided" else "one-sided"


def _floor_note(test: str, pairs: str, floor: float, alpha: float, alternative: str) -> tuple[str, ...]:
    if floor <= alpha:
        return ()
    return (f"with {pairs} the {test} test cannot reach p ≤ {alpha:g}: its smallest possible {_sided(alternative)} "
            f"p is {floor:.4g}, reached only when every pair moves the same way",)


# --- the two-level seed × document bootstrap ---------------------------------------------------------------------


@dataclass(frozen=True)
class TwoLevelBootstrapInterval:
    """Two-level (seed × document) percentile bootstrap interval for ΔP."""

    delta_p: float  # observed ΔP = P̄_variant / P̄_baseline − 1
    confidence_interval: ConfidenceInterval  # for ΔP
    confidence_level: float
    n_resamples: int
    rng_seed: int
    n_seeds: int
    n_docs: int
    distinct_seed_resamples: int  # C(2S − 1, S): how coarse the seed level of the bootstrap is
    seed_level_coverage: float  # approximate coverage of the percentile interval when seed variation dominates

    def to_dict(self) -> dict:
        """The published JSON keys (low, high, confidence, samples)."""
        return {"delta_p": self.delta_p, "low": self.confidence_interval.low, "high": self.confidence_interval.high,
                "confidence": self.confidence_level, "samples": self.n_resamples, "rng_seed": self.rng_seed,
                "n_seeds": self.n_seeds, "n_docs": self.n_docs,
                "distinct_seed_resamples": self.distinct_seed_resamples,
                "seed_level_coverage": self.seed_level_coverage}


def two_level_bootstrap(baseline: np.ndarray, variant: np.ndarray, n_units: np.ndarray, *,
                        n_resamples: int = DEFAULTS.n_resamples,
                        confidence_level: float = DEFAULTS.confidence_level, rng_seed: int = DEFAULTS.rng_seed,
                        progress: bool | None = False) -> TwoLevelBootstrapInterval:
    """Percentile interval for ΔP from resampling seed pairs and, independently, documents.

    Each resample draws S seed pairs and N documents with replacement; per-seed PPLs are recomputed on the
    resampled documents and ΔP = mean PPL_variant / mean PPL_baseline − 1 over the resampled pairs.
    """
    baseline, variant, n = metrics.paired_arrays(baseline, variant, n_units)
    if baseline.shape[0] < 2:
        raise InputError(f"seed × document bootstrap: needs at least 2 paired seeds, got {baseline.shape[0]}")
    check_n_resamples(n_resamples)
    check_confidence_level(confidence_level)
    check_seed(rng_seed, "rng_seed")
    n_seeds, n_docs = baseline.shape
    observed = metrics.delta_p(metrics.mean_perplexity(baseline, n), metrics.mean_perplexity(variant, n))
    seed_counts = np.random.default_rng(rng_seed).multinomial(n_seeds, np.full(n_seeds, 1.0 / n_seeds),
                                                              size=n_resamples)  # (B, S)
    # Per resample, the drawn documents' loss sums of every seed of both arms and their units (documents drawn
    # as the document bootstrap draws them, from generators spawned from the same RNG seed).
    sums = resampled_sums(np.column_stack([baseline.T, variant.T, n]), n_resamples=n_resamples, rng_seed=rng_seed,
                          progress=progress, desc="seed × document bootstrap")
    tokens = sums[:, -1:]
    ppl_baseline = metrics.perplexity(sums[:, :n_seeds] / tokens)  # (B, S)
    ppl_variant = metrics.perplexity(sums[:, n_seeds:2 * n_seeds] / tokens)
    estimates = (seed_counts * ppl_variant).sum(axis=1) / (seed_counts * ppl_baseline).sum(axis=1) - 1.0
    alpha = 1.0 - confidence_level
    low, high = np.quantile(estimates, [alpha / 2, 1 - alpha / 2])
    return TwoLevelBootstrapInterval(
        delta_p=float(observed), confidence_interval=ConfidenceInterval(float(low), float(high)),
        confidence_level=confidence_level, n_resamples=n_resamples, rng_seed=rng_seed, n_seeds=n_seeds, n_docs=n_docs,
        distinct_seed_resamples=math.comb(2 * n_seeds - 1, n_seeds),
        seed_level_coverage=percentile_seed_coverage(n_seeds, confidence_level),
    )


def percentile_seed_coverage(n_seeds: int, confidence_level: float = DEFAULTS.confidence_level) -> float:
    """Approximate coverage of a percentile bootstrap over n seeds for a mean of normal seed effects.

    The bootstrap spread is the plug-in SD (ddof 0) and its quantiles are normal ones, so the interval covers
    when |t_{n−1}| ≤ z·sqrt((n−1)/n).
    """
    if n_seeds < 2:
        return math.nan
    z = stats.norm.ppf(0.5 + confidence_level / 2)
    return float(1.0 - 2.0 * stats.t.sf(z * math.sqrt((n_seeds - 1) / n_seeds), n_seeds - 1))


# --- the seed-level view of one comparison -----------------------------------------------------------------------


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
        return "\n".join([
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
        ])


def few_seed_limits(n_seeds: int, confidence_level: float = DEFAULTS.confidence_level) -> tuple[str, ...]:
    """Plain statements of what S paired seeds can and cannot show."""
    pct = fmt.format_level(confidence_level)
    coverage = round(100 * percentile_seed_coverage(n_seeds, confidence_level))
    alpha = 1.0 - confidence_level
    critical = stats.t.ppf(1 - alpha / 2, n_seeds - 1)
    z = stats.norm.ppf(1 - alpha / 2)
    one_sided = 0.5 ** n_seeds
    if one_sided > alpha:
        sign = f"cannot reach one-sided p ≤ {alpha:g} even if every pair improves"
    else:
        failures = max(k for k in range(n_seeds + 1) if stats.binom.cdf(k, n_seeds, 0.5) <= alpha)
        sign = f"reach one-sided p ≤ {alpha:g} only if at most {failures} fail to improve"
    return (
        f"t interval: {n_seeds - 1} degrees of freedom, critical t = {critical:.2f} vs {z:.2f} for many seeds, "
        f"so it is {critical / z:.1f}× wider than a normal interval; its normality assumption cannot be checked "
        f"with {n_seeds} seeds",
        f"sign test: {n_seeds} pairs {sign} (best possible p = {one_sided:.4g})",
        f"two-level bootstrap: only {math.comb(2 * n_seeds - 1, n_seeds)} distinct seed resamples, and when seed "
        f"variation dominates its {pct} interval covers only about {coverage}% "
        "(it ignores the t correction); read it as a lower bound on the uncertainty",
    )


def seed_uncertainty(baseline: np.ndarray, variant: np.ndarray, n_units: np.ndarray, *,
                     baseline_arm: str = "baseline", variant_arm: str = "variant",
                     n_resamples: int = DEFAULTS.n_resamples, confidence_level: float = DEFAULTS.confidence_level,
                     rng_seed: int = DEFAULTS.rng_seed, progress: bool | None = False) -> SeedUncertainty:
    """Two-level bootstrap, paired t interval and sign tests for one paired comparison (≥ 2 seed pairs), from the
    (S, N) loss sums of both arms and the (N,) unit counts; the arms' names label the result and its messages."""
    baseline, variant, n = metrics.paired_arrays(baseline, variant, n_units)
    n_pairs = baseline.shape[0]
    if n_pairs < 2:
        raise InputError(f"{baseline_arm} vs {variant_arm}: seed-level uncertainty needs at least 2 paired seeds, "
                         f"got {n_pairs}")
    nll_baseline = metrics.token_nll(baseline, n)
    nll_variant = metrics.token_nll(variant, n)
    per_seed = nll_variant - nll_baseline
    alpha = 1.0 - confidence_level
    try:
        permutation = seed_permutation_test(per_seed, alpha=alpha)
    except InputError:  # beyond 20 seeds, or every per-seed difference 0
        permutation = None
    return SeedUncertainty(
        baseline_arm=baseline_arm,
        variant_arm=variant_arm,
        bootstrap=two_level_bootstrap(baseline, variant, n, n_resamples=n_resamples,
                                      confidence_level=confidence_level, rng_seed=rng_seed, progress=progress),
        t_interval=paired_t_interval(per_seed, confidence_level=confidence_level),
        # the paper counts a pair improved when its variant's PPL is below its baseline's
        sign_test=sign_test(metrics.perplexity(nll_variant) - metrics.perplexity(nll_baseline),
                            alternative="greater", alpha=alpha),
        permutation_test=permutation,
        sign_test_two_sided=sign_test(per_seed, alpha=alpha),
        limits=few_seed_limits(n_pairs, confidence_level),
    )
