"""Paired permutation (sign-flip) test of the mean NLL difference D on the per-document differences d_i.

Under the null hypothesis that the two arms are exchangeable on every document, each d_i is as likely to
carry either sign; the reference distribution of D = Σ ε_i d_i / Σ n_i is formed over sign vectors ε. The
test holds the trained models fixed (like the document bootstrap): it speaks to this evaluation set's
documents, not to new seeds.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass

import numpy as np
from tqdm.auto import tqdm

from gatedv_stats import formatting as fmt
from gatedv_stats.errors import InputError
from gatedv_stats.stats.validation import check_at_least, check_rng_seed

ALTERNATIVES = ("two-sided", "less", "greater")
EXACT_MAX_DOCS = 20
"""Up to this many documents every one of the 2^N sign vectors is enumerated."""

_CHUNK_ELEMENTS = 1 << 21  # sign-matrix elements per vectorised chunk (16 MiB of float64)


@dataclass(frozen=True)
class SignFlipTest:
    """Result of the sign-flip test; `p_value` is exact or a Monte Carlo estimate (see `method`)."""

    statistic: float  # observed D = Σ d_i / Σ n_i (nats per token; negative favours the variant)
    p_value: float
    alternative: str
    method: str  # "exact" (all 2^N sign vectors) or "monte-carlo"
    n_docs: int
    n_resamples: int  # sign vectors evaluated
    seed: int | None  # generator seed of the Monte Carlo draw; None when exact

    def to_dict(self) -> dict:
        """The published JSON keys (`resamples` for the sign vectors evaluated)."""
        data = asdict(self)
        data["resamples"] = data.pop("n_resamples")
        return data

    def summary(self) -> str:
        how = (
            f"exact over 2^{self.n_docs} sign vectors"
            if self.method == "exact"
            else f"Monte Carlo, {self.n_resamples:,} sign vectors, seed {self.seed}"
        )
        return (f"sign-flip permutation test on d_i ({self.alternative}): D {fmt.format_nll_diff(self.statistic)}, "
                f"p = {self.p_value:.4g} ({how})")


def sign_flip_test(
    differences: np.ndarray,
    n_targets: np.ndarray,
    *,
    alternative: str = "two-sided",
    exact_max_docs: int = EXACT_MAX_DOCS,
    n_resamples: int = 10_000,
    seed: int = 0,
    progress: bool | None = False,
) -> SignFlipTest:
    """Sign-flip test of D = Σ d_i / Σ n_i, d_i = mean over seeds of the variant-minus-baseline loss sums.

    `alternative`: "two-sided" (|D*| ≥ |D|), "less" (D* ≤ D: the variant is better) or "greater".
    Exact when N ≤ `exact_max_docs`; otherwise `n_resamples` sign vectors from `numpy.random.default_rng(seed)`
    and p = (1 + #extreme) / (1 + n_resamples), which never reports an impossible p of zero.
    """
    d = np.asarray(differences, dtype=np.float64)
    n = np.asarray(n_targets, dtype=np.float64)
    if d.ndim != 1 or d.shape != n.shape or d.size == 0:
        raise InputError(f"sign-flip test: differences {d.shape} and n_targets {n.shape} must be equal 1-D shapes "
                         "with ≥ 1 document")
    if not np.all(np.isfinite(d)):
        raise InputError("sign-flip test: per-document differences must be finite")
    if alternative not in ALTERNATIVES:
        raise InputError(f"sign-flip test: alternative must be one of {', '.join(ALTERNATIVES)}, got {alternative!r}")
    check_at_least("n_resamples", n_resamples, 1)
    check_rng_seed(seed)

    total = n.sum()
    observed = float(d.sum() / total)
    # Sums of the same terms in another order differ by rounding only; treat those as ties.
    tolerance = 1e-10 * float(np.abs(d).sum() / total)
    exact = d.size <= exact_max_docs
    n_vectors = (1 << d.size) if exact else n_resamples
    count = sum(_count_extreme(signs @ d / total, observed, alternative, tolerance)
                for signs in _sign_vectors(d.size, n_vectors, exact, seed, progress))
    return SignFlipTest(
        statistic=observed,
        p_value=float(count / n_vectors if exact else (count + 1) / (n_resamples + 1)),
        alternative=alternative,
        method="exact" if exact else "monte-carlo",
        n_docs=int(d.size),
        n_resamples=int(n_vectors),
        seed=None if exact else int(seed),
    )


def _sign_vectors(n_docs: int, n_vectors: int, exact: bool, seed: int, progress: bool | None) -> Iterator[np.ndarray]:
    """(chunk, n_docs) matrices of ±1: every vector in binary order when exact, else draws from default_rng(seed)."""
    chunk = max(1, _CHUNK_ELEMENTS // n_docs)
    bit = np.arange(n_docs, dtype=np.int64)
    rng = np.random.default_rng(seed)
    quiet = None if progress is None else not progress  # tqdm: None = only on a terminal
    desc = "sign-flip (exact)" if exact else "sign-flip (Monte Carlo)"
    for start in tqdm(range(0, n_vectors, chunk), desc=desc, disable=quiet, leave=False):
        size = min(chunk, n_vectors - start)
        if exact:
            codes = np.arange(start, start + size, dtype=np.int64)
            yield 1.0 - 2.0 * ((codes[:, None] >> bit) & 1)
        else:
            yield 1.0 - 2.0 * rng.integers(0, 2, size=(size, n_docs))


def _count_extreme(null: np.ndarray, observed: float, alternative: str, tolerance: float) -> int:
    if alternative == "two-sided":
        return int(np.count_nonzero(np.abs(null) >= abs(observed) - tolerance))
    if alternative == "less":
        return int(np.count_nonzero(null <= observed + tolerance))
    return int(np.count_nonzero(null >= observed - tolerance))
