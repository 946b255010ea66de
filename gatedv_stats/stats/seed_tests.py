"""Exact seed-level tests that make no distributional assumption, and say what few seeds can show.

Both work on the per-seed differences D_s = NLL_var,s − NLL_base,s (the log PPL ratio of seed pair s; their
mean is D) and hold the evaluation documents fixed.

* Permutation test: under H0 the two arms of a pair are exchangeable, so each D_s is as likely to carry
  either sign; the two-sided p-value is the share of all 2^S sign vectors ε with |mean ε_s D_s| ≥ |mean D_s|.
  Its smallest possible value is 2/2^S = 2^(1−S): 0.25 with 3 seeds, 0.0625 with 5.
* Sign test: the number of improved pairs against Binomial(S', 1/2) over the S' untied pairs, two-sided;
  its smallest possible value is 2^(1−S').
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from gatedv_stats.errors import InputError
from gatedv_stats.stats.permutation import sign_flip_test
from gatedv_stats.stats.validation import check_open_unit

MAX_EXACT_SEEDS = 20
"""Up to this many seed pairs every sign vector is enumerated (2^20 ≈ 10^6)."""


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
        return _as_dict(self)

    def summary(self) -> str:
        lines = [f"seed permutation test (exact, all {self.n_sign_vectors:,} sign vectors of {self.n_seeds} seed "
                 f"pairs): p = {self.p_value:.4g}, smallest possible p = {self.min_attainable_p:.4g}"]
        return "\n".join(lines + [f"  note: {note}" for note in self.notes])


@dataclass(frozen=True)
class SeedSignTest:
    """Exact two-sided sign test: are improved seed pairs (D_s < 0) more or less common than worse ones?"""

    improved: int
    worse: int
    ties: int  # pairs with D_s = 0, left out
    p_value: float
    min_attainable_p: float  # 2^(1 − untied pairs), at most 1
    alpha: float
    can_reach_alpha: bool
    notes: tuple[str, ...]

    def to_dict(self) -> dict:
        return _as_dict(self)

    def summary(self) -> str:
        lines = [f"seed sign test: {self.improved} of {self.improved + self.worse} untied pairs improved"
                 + (f" ({self.ties} tied)" if self.ties else "")
                 + f", two-sided exact p = {self.p_value:.4g}, smallest possible p = {self.min_attainable_p:.4g}"]
        return "\n".join(lines + [f"  note: {note}" for note in self.notes])


def _as_dict(result: SeedPermutationTest | SeedSignTest) -> dict:
    data = asdict(result)
    data["notes"] = list(result.notes)
    return data


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
                               notes=_floor_note("permutation", f"{d.size} seed pairs", floor, alpha))


def seed_sign_test(per_seed_differences: np.ndarray, *, alpha: float = 0.05) -> SeedSignTest:
    """Exact two-sided binomial sign test (scipy `binomtest`) on the signs of D_s; ties are left out."""
    alpha = check_open_unit("alpha", alpha)
    d = _per_seed(per_seed_differences, "seed sign test", minimum=1)
    improved, worse = int(np.sum(d < 0)), int(np.sum(d > 0))
    untied = improved + worse
    if untied == 0:
        raise InputError("seed sign test: every seed pair is tied, so there is nothing to test")
    floor = min(1.0, 2.0 ** (1 - untied))
    return SeedSignTest(improved=improved, worse=worse, ties=int(d.size - untied),
                        p_value=float(stats.binomtest(improved, untied, 0.5, alternative="two-sided").pvalue),
                        min_attainable_p=floor, alpha=alpha, can_reach_alpha=floor <= alpha,
                        notes=_floor_note("sign", f"{untied} untied seed pairs", floor, alpha))


def _per_seed(values: np.ndarray, what: str, minimum: int) -> np.ndarray:
    d = np.asarray(values, dtype=np.float64)
    if d.ndim != 1 or d.size < minimum:
        raise InputError(f"{what}: needs a 1-D array of at least {minimum} per-seed differences, got shape {d.shape}")
    if not np.all(np.isfinite(d)):
        raise InputError(f"{what}: per-seed differences must be finite")
    return d


def _floor_note(test: str, pairs: str, floor: float, alpha: float) -> tuple[str, ...]:
    if floor <= alpha:
        return ()
    return (f"with {pairs} the {test} test cannot reach p ≤ {alpha:g}: its smallest possible two-sided "
            f"p is {floor:.4g}, reached only when every pair moves the same way",)
