"""Paired permutation (sign-flip) test of the mean NLL difference D on the per-document differences d_i.

Under the null hypothesis that the two arms are exchangeable on every document, each d_i is as likely to
carry either sign; the reference distribution of D = Σ ε_i d_i / Σ n_i is formed over sign vectors ε. The
test holds the trained models fixed (like the document bootstrap): it speaks to this evaluation set's
documents, not to new seeds.

A Monte Carlo sign vector is raw generator output, one bit per document (1: flipped), so Σ ε_i d_i is Σ d_i
minus twice the sum over the flipped documents; that sum is one table lookup per byte of bits, from a table
holding the sums of all 256 subsets of each group of 8 documents. This costs N/8 lookups per vector instead of N
bounded integer draws and N multiply-adds.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass

import numpy as np
from tqdm.auto import tqdm

from gatedv_stats.core import formatting as fmt
from gatedv_stats.core.defaults import DEFAULTS
from gatedv_stats.core.errors import InputError
from gatedv_stats.core.validation import check_n_resamples, check_seed, renamed_keyword

ALTERNATIVES = ("two-sided", "less", "greater")
EXACT_MAX_DOCS = 20
"""Up to this many documents every one of the 2^N sign vectors is enumerated."""

_CHUNK_ELEMENTS = 1 << 21  # sign-matrix elements per vectorised chunk of the exact enumeration (16 MiB of float64)
_GROUP = 8  # documents per table row: one byte of sign bits
_SEGMENT_GROUPS = 4096  # table rows gathered together (8 MiB of subset sums), so a chunk's lookups stay in cache
_CHUNK_LOOKUPS = 1 << 20  # table lookups per segment and chunk of sign vectors
_KEPT_TABLE_ENTRIES = 1 << 23  # subset sums kept for the whole test (64 MiB); beyond, rebuilt per chunk


@dataclass(frozen=True)
class SignFlipTest:
    """Result of the sign-flip test; `p_value` is exact or a Monte Carlo estimate (see `method`)."""

    statistic: float  # observed D = Σ d_i / Σ n_i (nats per token; negative favours the variant)
    p_value: float
    alternative: str
    method: str  # "exact" (all 2^N sign vectors) or "monte-carlo"
    n_docs: int
    n_permutations: int  # sign vectors evaluated
    rng_seed: int | None  # generator seed of the Monte Carlo draw; None when exact

    @property
    def n_resamples(self) -> int:
        """Deprecated name of `n_permutations` (the sign vectors evaluated), kept for one release."""
        warnings.warn("SignFlipTest.n_resamples is deprecated; use n_permutations", DeprecationWarning, stacklevel=2)
        return self.n_permutations

    def to_dict(self) -> dict:
        """The published JSON keys (`resamples` for the sign vectors evaluated)."""
        data = asdict(self)
        data["resamples"] = data.pop("n_permutations")
        return data

    def summary(self) -> str:
        how = (
            f"exact over 2^{self.n_docs} sign vectors"
            if self.method == "exact"
            else f"Monte Carlo, {self.n_permutations:,} sign vectors, seed {self.rng_seed}"
        )
        return (f"sign-flip permutation test on d_i ({self.alternative}): D {fmt.format_nll_diff(self.statistic)}, "
                f"p = {self.p_value:.4g} ({how})")


@renamed_keyword("n_resamples", "n_permutations")
def sign_flip_test(
    differences: np.ndarray,
    n_units: np.ndarray,
    *,
    alternative: str = "two-sided",
    exact_max_docs: int = EXACT_MAX_DOCS,
    n_permutations: int = DEFAULTS.n_permutations,
    rng_seed: int = DEFAULTS.rng_seed,
    progress: bool | None = False,
) -> SignFlipTest:
    """Sign-flip test of D = Σ d_i / Σ n_i, d_i = mean over seeds of the variant-minus-baseline loss sums.

    `alternative`: "two-sided" (|D*| ≥ |D|), "less" (D* ≤ D: the variant is better) or "greater".
    Exact when N ≤ `exact_max_docs`; otherwise `n_permutations` sign vectors from
    `numpy.random.default_rng(rng_seed)` and p = (1 + #extreme) / (1 + n_permutations), which never reports an
    impossible p of zero. `n_resamples` is a deprecated name of `n_permutations`, accepted for one release.
    """
    d = np.asarray(differences, dtype=np.float64)
    n = np.asarray(n_units, dtype=np.float64)
    if d.ndim != 1 or d.shape != n.shape or d.size == 0:
        raise InputError(f"sign-flip test: differences {d.shape} and n_units {n.shape} must be equal 1-D shapes "
                         "with ≥ 1 document")
    if not np.all(np.isfinite(d)):
        raise InputError("sign-flip test: per-document differences must be finite")
    if alternative not in ALTERNATIVES:
        raise InputError(f"sign-flip test: alternative must be one of {', '.join(ALTERNATIVES)}, got {alternative!r}")
    check_n_resamples(n_permutations, minimum=1, parameter="n_permutations")
    check_seed(rng_seed, "rng_seed")

    total = n.sum()
    observed = float(d.sum() / total)
    # Sums of the same terms in another order differ by rounding only; treat those as ties.
    tolerance = 1e-10 * float(np.abs(d).sum() / total)
    exact = d.size <= exact_max_docs
    n_vectors = (1 << d.size) if exact else n_permutations
    null_sums = (signs @ d for signs in _sign_vectors(d.size, n_vectors, progress)) if exact else \
        _flipped_sums(d, n_vectors, rng_seed, progress)
    count = sum(_count_extreme(sums / total, observed, alternative, tolerance) for sums in null_sums)
    return SignFlipTest(
        statistic=observed,
        p_value=float(count / n_vectors if exact else (count + 1) / (n_permutations + 1)),
        alternative=alternative,
        method="exact" if exact else "monte-carlo",
        n_docs=int(d.size),
        n_permutations=int(n_vectors),
        rng_seed=None if exact else int(rng_seed),
    )


def _sign_vectors(n_docs: int, n_vectors: int, progress: bool | None) -> Iterator[np.ndarray]:
    """(chunk, n_docs) matrices of ±1 holding every sign vector in binary order."""
    chunk = max(1, _CHUNK_ELEMENTS // n_docs)
    bit = np.arange(n_docs, dtype=np.int64)
    for start in tqdm(range(0, n_vectors, chunk), desc="sign-flip (exact)", disable=_quiet(progress), leave=False):
        codes = np.arange(start, min(start + chunk, n_vectors), dtype=np.int64)
        yield 1.0 - 2.0 * ((codes[:, None] >> bit) & 1)


def _flipped_sums(d: np.ndarray, n_vectors: int, rng_seed: int, progress: bool | None) -> Iterator[np.ndarray]:
    """Σ ε_i d_i of `n_vectors` random sign vectors, a chunk at a time.

    Vector r is the bits of ceil(N/64) consecutive raw outputs of default_rng(rng_seed) (little-endian; bit i is
    document i, 1 = flipped), whatever the chunking. The flipped documents' sum is gathered per byte of bits from
    the sums of the 256 subsets of its 8 documents, segment by segment, one table row for all vectors at once.
    """
    groups = -(-d.size // _GROUP)
    padded = np.pad(d, (0, groups * _GROUP - d.size))
    words = -(-d.size // 64)
    segments = [range(start, min(start + _SEGMENT_GROUPS, groups)) for start in range(0, groups, _SEGMENT_GROUPS)]
    kept = [_subset_sums(padded, segment) for segment in segments] if groups << _GROUP <= _KEPT_TABLE_ENTRIES else None
    rows = max(1, min(n_vectors, _CHUNK_LOOKUPS // len(segments[0])))
    rng = np.random.default_rng(rng_seed)
    # index and gather buffers reused by every chunk (fresh large arrays would be faulted in again each time)
    index, gathered = np.empty(len(segments[0]) * rows, dtype=np.intp), np.empty(len(segments[0]) * rows)
    for start in tqdm(range(0, n_vectors, rows), desc="sign-flip (Monte Carlo)", disable=_quiet(progress),
                      leave=False):
        size = min(rows, n_vectors - start)
        bits = rng.bit_generator.random_raw(size * words).astype("<u8", copy=False).reshape(size, words)
        flip_bytes = bits.view(np.uint8)  # (size, 8 · words): byte j holds documents 8j … 8j + 7
        flipped = np.zeros(size)
        for k, segment in enumerate(segments):
            table = kept[k] if kept is not None else _subset_sums(padded, segment)
            rows_index = index[:len(segment) * size].reshape(len(segment), size)
            np.add(flip_bytes[:, segment.start:segment.stop].T, (np.arange(len(segment)) << _GROUP)[:, None],
                   out=rows_index)
            values = gathered[:rows_index.size].reshape(rows_index.shape)
            # every index is in range; mode="clip" takes numpy's fast path
            np.take(table, rows_index, mode="clip", out=values)
            flipped += values.sum(axis=0)
        yield d.sum() - 2.0 * flipped


def _subset_sums(padded: np.ndarray, segment: range) -> np.ndarray:
    """Flattened (groups, 256) table: entry (g, b) is the sum of the documents of group g whose bits are set in b,
    built by doubling (subsets with bit k = those without it, plus document k)."""
    documents = padded[segment.start * _GROUP:segment.stop * _GROUP].reshape(-1, _GROUP)
    table = np.zeros((documents.shape[0], 1 << _GROUP))
    for bit in range(_GROUP):
        np.add(table[:, :1 << bit], documents[:, bit:bit + 1], out=table[:, 1 << bit:2 << bit])
    return table.ravel()


def _quiet(progress: bool | None) -> bool | None:
    return None if progress is None else not progress  # tqdm: None = only on a terminal


def _count_extreme(null: np.ndarray, observed: float, alternative: str, tolerance: float) -> int:
    if alternative == "two-sided":
        return int(np.count_nonzero(np.abs(null) >= abs(observed) - tolerance))
    if alternative == "less":
        return int(np.count_nonzero(null <= observed + tolerance))
    return int(np.count_nonzero(null >= observed - tolerance))
