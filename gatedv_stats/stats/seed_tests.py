"""Seed-level tests, and what few seeds can show with them.

Each works on the per-seed differences D_s = NLL_var,s − NLL_base,s (the log PPL ratio r_s of seed pair s;
their mean is D) and holds the evaluation documents fixed, so it speaks to new seeds on these documents.

* Paired t interval on r_s: Student's t over the S seed pairs.
* Permutation test: under H0 the two arms of a pair are exchangeable, so each D_s is as likely to carry
  either sign; the two-sided p-value is the share of all 2^S sign vectors ε with |mean ε_s D_s| ≥ |mean D_s|.
  Its smallest possible value is 2/2^S = 2^(1−S): 0.25 with 3 seeds, 0.0625 with 5.
* Sign test: the number of improved pairs against Binomial(S', 1/2) over the S' untied pairs; its smallest
  possible value is 2^(1−S') two-sided, 2^−S' one-sided.

The last two make no distributional assumption.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.core.validation import check_confidence_level, check_open_unit
from gatedv_stats.stats.intervals import ConfidenceInterval, log_interval_as_change
from gatedv_stats.stats.permutation import sign_flip_test

MAX_EXACT_SEEDS = 20
"""Up to this many seed pairs every sign vector is enumerated (2^20 ≈ 10^6)."""

SIGN_TEST_ALTERNATIVES = ("two-sided", "greater", "less")
"""Of the number of improved pairs against Binomial(S', 1/2), as in scipy.stats.binomtest."""


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
        data = asdict(self)
        data["notes"] = list(self.notes)
        return data

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
        data = asdict(self)
        del data["alternative"]
        data["notes"] = list(self.notes)
        return data

    def summary(self) -> str:
        lines = [f"seed sign test: {self.improved} of {self.n_pairs} untied pairs improved"
                 + (f" ({self.ties} tied)" if self.ties else "")
                 + f", {_sided(self.alternative)} exact p = {self.p_value:.4g}, smallest possible p = "
                 f"{self.min_attainable_p:.4g}"]
        return "\n".join(lines + [f"  note: {note}" for note in self.notes])


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
        nll_diff_mean=mean, confidence_interval=ConfidenceInterval(float(interval.low), float(interval.high)),
        confidence_level=confidence_level, df=int(result.df),
        critical_t=float(stats.t.ppf(0.5 + confidence_level / 2, result.df)),
        t_statistic=float(result.statistic), p_value=float(result.pvalue), ratio_change=math.expm1(mean),
        ratio_interval=log_interval_as_change(interval.low, interval.high),
    )


def seed_permutation_test(per_seed_differences: np.ndarray, *, alpha: float = 0.05) -> SeedPermutationTest:
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
                               n_sign_vectors=exact.n_resamples, min_attainable_p=floor, alpha=alpha,
                               can_reach_alpha=floor <= alpha,
                               notes=_floor_note("permutation", f"{d.size} seed pairs", floor, alpha, "two-sided"))


def sign_test(per_seed_differences: np.ndarray, *, alternative: str = "two-sided", alpha: float = 0.05) -> SignTest:
    """Exact binomial sign test (scipy `binomtest`) on the signs of the per-seed differences, variant − baseline
    of any per-seed measure (only the signs count); ties are left out and `alpha` only shapes the notes.

    `alternative` is of the number of improved pairs (D_s < 0): "two-sided", "greater" (improved pairs are the
    more common) or "less".
    """
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
