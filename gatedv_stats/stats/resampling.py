"""Document bootstrap of the mean NLL difference (docs/method-statistics.md §5), models held fixed.

The statistic is the ratio Σ d_i / Σ n_i over a resample of documents drawn with replacement. A uniform draw
from N documents is a block of 2^k consecutive documents drawn with probability 2^k/N, then a uniform member,
whose index is k raw random bits: so each resample draws its per-block counts from a multinomial and its
offsets as masked raw generator output, about 3× cheaper than bounded integer draws, and each block's gather
(d + i·n packed as one complex, so that one gather serves both sums) stays in a core's L2 cache. Chunks of
resamples are dealt round-robin to a fixed number of generators spawned from the RNG seed and run on threads
(numpy releases the GIL in each bulk step), so the result depends on the RNG seed alone, not on the thread count.
"""

from __future__ import annotations

import functools
import math
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr, ndtri
from threadpoolctl import ThreadpoolController
from tqdm import tqdm

from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.core.validation import check_confidence_level, check_n_resamples, check_seed
from gatedv_stats.stats.intervals import ConfidenceInterval

METHODS = ("percentile", "bca")
CHUNK_ELEMENTS = 1 << 16  # draws from one block of documents per chunk of resamples (at least one resample)


@dataclass(frozen=True)
class BootstrapResult:
    """A bootstrap confidence interval, shaped like `scipy.stats.bootstrap`'s result."""

    statistic: float  # the statistic on the full sample
    confidence_interval: ConfidenceInterval
    bootstrap_distribution: np.ndarray  # (n_resamples,)
    n_resamples: int
    confidence_level: float
    rng_seed: int
    method: str

    @property
    def standard_error(self) -> float:
        return float(np.std(self.bootstrap_distribution, ddof=1))

    def to_dict(self) -> dict:
        """Every field but the distribution, with its standard error after the interval."""
        return {"statistic": self.statistic, "confidence_interval": list(self.confidence_interval),
                "standard_error": self.standard_error, "n_resamples": self.n_resamples,
                "confidence_level": self.confidence_level, "rng_seed": self.rng_seed, "method": self.method}


def ratio_statistic(d: np.ndarray, n_units: np.ndarray) -> float:
    """Σ d_i / Σ n_i."""
    return float(np.sum(d) / np.sum(n_units, dtype=np.float64))


def bootstrap_ratio_distribution(d: np.ndarray, n_units: np.ndarray, *, n_resamples: int, rng_seed: int,
                                 progress: bool | None = False) -> np.ndarray:
    """Σ d_i / Σ n_i over `n_resamples` resamples of the documents with replacement; `rng_seed` fixes every draw."""
    d = np.asarray(d, dtype=np.float64)
    n = np.asarray(n_units, dtype=np.float64)
    count = d.shape[0]
    # Equal unit counts (the usual fixed-length windows) make every resample's denominator the same.
    constant_denominator = float(count * n[0]) if np.all(n == n[0]) else None
    table = d if constant_denominator is not None else d + 1j * n
    blocks = _document_blocks(count)
    rows = max(1, min(n_resamples, CHUNK_ELEMENTS // min(count, _BLOCK_SIZE)))
    distribution = np.empty(n_resamples, dtype=np.float64)

    def start_stream(generator: np.random.Generator) -> Callable[[int, int], None]:
        # Working arrays reused by every block of every chunk, so that no large array is allocated per draw
        # (freed and re-allocated, they made malloc return pages to the system and fault them in again).
        buffers = np.empty(rows * count, dtype=np.intp), np.empty(rows * count, dtype=table.dtype)

        def draw(start: int, size: int) -> None:
            sums = _resample_sums(generator, table, blocks, size, buffers)
            distribution[start:start + size] = (sums.real / sums.imag if constant_denominator is None
                                                else sums / constant_denominator)
        return draw

    _run_streams(n_resamples, rows, rng_seed, start_stream, count, progress=progress, desc="document bootstrap")
    return distribution


def resampled_sums(table: np.ndarray, *, n_resamples: int, rng_seed: int, progress: bool | None = False,
                   desc: str = "document bootstrap") -> np.ndarray:
    """(n_resamples, K): Σ_i c_i · table[i] for each resample, c_i how often it drew document i of the N rows of
    `table` (N, K) (N uniform draws with replacement, as `bootstrap_ratio_distribution` draws them). `rng_seed`
    fixes every draw, whatever the thread count."""
    table = np.asarray(table, dtype=np.float64)
    count = table.shape[0]
    blocks = _document_blocks(count)
    rows = max(1, min(n_resamples, _COUNT_ELEMENTS // min(count, _BLOCK_SIZE)))
    sums = np.empty((n_resamples, table.shape[1]), dtype=np.float64)

    def start_stream(generator: np.random.Generator) -> Callable[[int, int], None]:
        counts = np.empty(rows * min(count, _BLOCK_SIZE))  # reused by every block of every chunk

        def draw(start: int, size: int) -> None:
            sums[start:start + size] = _resample_table_sums(generator, table, blocks, size, counts)
        return draw

    # Each stream's products are small: BLAS threads of their own would only contend with the streams' threads.
    with _blas_controller().limit(limits=1, user_api="blas"):
        _run_streams(n_resamples, rows, rng_seed, start_stream, count, progress=progress, desc=desc)
    return sums


def _resample_table_sums(generator: np.random.Generator, table: np.ndarray,
                         blocks: tuple[list[int], np.ndarray, np.ndarray], rows: int, buffer: np.ndarray) -> np.ndarray:
    """(rows, K): Σ_i c_i · table[i] over `rows` resamples, the draws made (and the generator consumed) exactly as
    `_resample_sums` makes them; each block's counts (resample × document) times its rows of the table.
    `buffer`: at least rows · (largest block) float64 elements."""
    sizes, starts, probabilities = blocks
    per_block = generator.multinomial(table.shape[0], probabilities, size=rows).T  # draws per (block, resample)
    sums = np.zeros((rows, table.shape[1]))
    for size, start, block_counts in zip(sizes, starts, per_block):
        offsets = _uniform_offsets(generator, size, out=np.empty(int(block_counts.sum()), dtype=np.intp))
        ends = np.cumsum(block_counts)
        counts = buffer[:rows * size].reshape(rows, size)
        for row, (end, drawn) in enumerate(zip(ends, block_counts)):
            counts[row] = np.bincount(offsets[end - drawn:end], minlength=size)
        sums += counts @ table[start:start + size]
    return sums


@functools.cache
def _blas_controller() -> ThreadpoolController:
    return ThreadpoolController()


def _run_streams(n_resamples: int, rows: int, rng_seed: int,
                 start_stream: Callable[[np.random.Generator], Callable[[int, int], None]], count: int, *,
                 progress: bool | None, desc: str) -> None:
    """Deal chunks of `rows` resamples round-robin to generators spawned from `rng_seed` (chunk c to generator
    c % _STREAMS); each generator's `start_stream(generator)(start, size)` draws its chunks in order, on threads
    when the resamples of the `count` documents make `_THREADED_DRAWS` draws or more."""
    chunk_starts = range(0, n_resamples, rows)
    streams = range(min(_STREAMS, len(chunk_starts)))
    seeds = np.random.SeedSequence(rng_seed).spawn(len(streams))  # the first children of spawn(_STREAMS)
    bar_lock = threading.Lock()

    def run_stream(stream: int) -> None:
        draw = start_stream(np.random.default_rng(seeds[stream]))
        for start in chunk_starts[stream::_STREAMS]:
            size = min(rows, n_resamples - start)
            draw(start, size)
            with bar_lock:
                bar.update(size)

    threads = min(_thread_count(), len(streams)) if n_resamples * count >= _THREADED_DRAWS else 1
    with tqdm(total=n_resamples, disable=None if progress is None else not progress, unit="resample",
              desc=desc, leave=False) as bar:
        if threads == 1:
            list(map(run_stream, streams))
        else:
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(run_stream, streams))


# Largest block of documents: its slice of the table (512 KiB as complex) stays in a core's L2 cache while it is
# gathered; 2^14-2^16 measured fastest among 2^12-2^20 at N = 10^5 and 10^6.
_BLOCK_SIZE = 1 << 15
_STREAMS = 16  # generators spawned from the RNG seed; chunk c is drawn by generator c % _STREAMS
_THREADED_DRAWS = 1 << 20  # fewer draws in all run on the calling thread (a pool costs more than it saves)
_COUNT_ELEMENTS = 1 << 18  # (resample, document) counts of one block per chunk of `resampled_sums` (2 MiB)


def _thread_count() -> int:
    """Threads for the bootstrap: the CPUs this process may run on, at most one per stream."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(_STREAMS, cpus))


def _document_blocks(count: int) -> tuple[list[int], np.ndarray, np.ndarray]:
    """Consecutive blocks of documents with power-of-two sizes: their sizes, first documents and probabilities."""
    whole, rest = divmod(count, _BLOCK_SIZE)
    sizes = [_BLOCK_SIZE] * whole + [1 << bit for bit in reversed(range(rest.bit_length())) if rest >> bit & 1]
    starts = np.cumsum([0] + sizes[:-1])
    return sizes, starts, np.array(sizes, dtype=np.float64) / count


def _resample_sums(generator: np.random.Generator, table: np.ndarray,
                   blocks: tuple[list[int], np.ndarray, np.ndarray], rows: int,
                   buffers: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Σ table[i] over each of `rows` resamples of all documents, drawn uniformly with replacement.

    `buffers`: an index (intp) and a gather (table's dtype) array of at least rows · len(table) elements.
    """
    sizes, starts, probabilities = blocks
    counts = generator.multinomial(table.size, probabilities, size=rows).T  # draws per (block, resample)
    sums = np.zeros(rows, dtype=table.dtype)
    for size, start, block_counts in zip(sizes, starts, counts):
        draws = int(block_counts.sum())
        index, gathered = (buffer[:draws] for buffer in buffers)
        _uniform_offsets(generator, size, out=index)
        # every offset is in range; mode="clip" takes numpy's fast path (the bounds-checking default is 2× slower)
        np.take(table[start:start + size], index, mode="clip", out=gathered)
        sums += _segment_sums(gathered, block_counts)
    return sums


def _uniform_offsets(generator: np.random.Generator, size: int, out: np.ndarray) -> np.ndarray:
    """Fill `out` with integers uniform on [0, size) for a power-of-two size: low bits of raw generator output."""
    dtype = np.min_scalar_type(size - 1)
    raw = generator.bit_generator.random_raw(-(-out.size * dtype.itemsize // 8)).view(dtype)[:out.size]
    return np.bitwise_and(raw, size - 1, out=out)


def _segment_sums(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Sums of consecutive segments of `values` with the given lengths (an empty segment sums to 0)."""
    if lengths.size == 1:
        return values.sum(keepdims=True)
    nonempty = lengths > 0  # reduceat would return an element, not 0, for an empty segment
    sums = np.zeros(lengths.size, dtype=values.dtype)
    sums[nonempty] = np.add.reduceat(values, (np.cumsum(lengths) - lengths)[nonempty])
    return sums


def document_bootstrap(d: np.ndarray, n_units: np.ndarray, *, n_resamples: int = 2000,
                       confidence_level: float = 0.95, rng_seed: int = 0, method: str = "percentile",
                       progress: bool | None = False) -> BootstrapResult:
    """Bootstrap interval for D = Σ d_i / Σ n_i, resampling documents (percentile or BCa, as scipy defines them)."""
    d = np.asarray(d, dtype=np.float64)
    n_units = np.asarray(n_units, dtype=np.float64)
    if method not in METHODS:
        raise ParameterError("method", f"must be one of {', '.join(METHODS)} (got {method!r})")
    check_confidence_level(confidence_level)
    check_n_resamples(n_resamples)
    check_seed(rng_seed, "rng_seed")
    if d.ndim != 1 or d.shape != n_units.shape or d.size == 0:
        raise ValueError("d and n_units must be non-empty 1-D arrays of equal length")
    distribution = bootstrap_ratio_distribution(d, n_units, n_resamples=n_resamples, rng_seed=rng_seed,
                                                progress=progress)
    interval = interval_from_distribution(d, n_units, distribution, confidence_level=confidence_level, method=method)
    return BootstrapResult(statistic=ratio_statistic(d, n_units), confidence_interval=interval,
                           bootstrap_distribution=distribution, n_resamples=n_resamples,
                           confidence_level=confidence_level, rng_seed=rng_seed, method=method)


def interval_from_distribution(d: np.ndarray, n_units: np.ndarray, distribution: np.ndarray, *,
                               confidence_level: float, method: str = "percentile") -> ConfidenceInterval:
    """Two-sided interval from a bootstrap distribution of Σ d_i / Σ n_i (linear-interpolated quantiles)."""
    alpha = (1.0 - confidence_level) / 2.0
    probabilities = (_bca_probabilities(np.asarray(d, dtype=np.float64), np.asarray(n_units, dtype=np.float64),
                                        distribution, alpha) if method == "bca" else (alpha, 1.0 - alpha))
    return ConfidenceInterval(*map(float, np.quantile(distribution, probabilities)))


def _bca_probabilities(d: np.ndarray, n: np.ndarray, distribution: np.ndarray, alpha: float) -> tuple[float, float]:
    """Efron's bias-corrected and accelerated levels; the jackknife of a ratio has a closed form."""
    statistic = ratio_statistic(d, n)
    below = np.count_nonzero(distribution < statistic) + np.count_nonzero(distribution <= statistic)
    z0 = ndtri(below / (2.0 * distribution.size))
    if not math.isfinite(z0):
        raise ParameterError("n_resamples", f"the BCa interval needs resampled values on both sides of the estimate, "
                                            f"and all {distribution.size:,} fell on one side; use more resamples "
                                            "(e.g. 2,000)")
    if d.size < 2:
        raise InputError("the BCa interval needs at least two documents")
    jackknife = (d.sum() - d) / (n.sum() - n)
    spread = jackknife.mean() - jackknife
    scale = np.sum(spread ** 2) ** 1.5
    acceleration = np.sum(spread ** 3) / (6.0 * scale) if scale > 0 else 0.0
    shifted = z0 + np.array([ndtri(alpha), -ndtri(alpha)])
    low, high = ndtr(z0 + shifted / (1.0 - acceleration * shifted))
    if math.isnan(low) or math.isnan(high):
        raise InputError("the BCa interval is undefined for this sample (a degenerate bootstrap distribution)")
    return float(low), float(high)
