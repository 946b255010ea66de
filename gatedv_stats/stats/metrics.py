"""Per-run and paired metrics of docs/method-statistics.md §5, over plain float64 arrays.

`loss_sums` are (S, N) arrays (row = seed, column = document) of summed token losses in nats;
`n_units` is (N,) — each document's targets (predicted tokens, or words), or its UTF-8 bytes when a comparison
is per byte (every per-token figure is then per byte).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from statsmodels.stats.proportion import proportion_confint

from gatedv_stats.core.defaults import DEFAULTS
from gatedv_stats.core.errors import InputError
from gatedv_stats.core.validation import check_confidence_level
from gatedv_stats.stats.intervals import ConfidenceInterval

ONE_SEED_NOTE = "one seed only: the standard deviation over seeds is undefined"


def paired_arrays(baseline: np.ndarray, variant: np.ndarray,
                  n_units: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Loss sums of both arms and the unit counts (targets or bytes) as float64 (S, N), (S, N), (N,) arrays,
    shapes checked."""
    baseline = np.asarray(baseline, dtype=np.float64)
    variant = np.asarray(variant, dtype=np.float64)
    n = np.asarray(n_units, dtype=np.float64)
    if baseline.ndim != 2 or baseline.shape != variant.shape or n.shape != (baseline.shape[1],):
        raise InputError(f"loss sums {baseline.shape} / {variant.shape} and n_units {n.shape} "
                         "must be (S, N), (S, N), (N,)")
    return baseline, variant, n


def token_nll(loss_sums: np.ndarray, n_units: np.ndarray) -> np.ndarray:
    """Token-averaged NLL of each run: Σ_i ℓ_i / Σ_i n_i over the last axis."""
    return np.asarray(loss_sums, dtype=np.float64).sum(axis=-1) / np.asarray(n_units, dtype=np.float64).sum()


def perplexity(nll: np.ndarray | float) -> np.ndarray:
    """PPL = exp(NLL)."""
    return np.exp(np.asarray(nll, dtype=np.float64))


def mean_perplexity(loss_sums: np.ndarray, n_units: np.ndarray) -> float:
    """P̄ = the mean over seeds of each run's PPL (not exp of the mean NLL)."""
    return float(perplexity(token_nll(loss_sums, n_units)).mean())


def bits_per_byte(loss_sums: np.ndarray, n_bytes: np.ndarray) -> np.ndarray:
    """Bits per UTF-8 byte of the target text: Σ ℓ / (ln 2 · Σ n_bytes)."""
    total_bytes = np.asarray(n_bytes, dtype=np.float64).sum()
    return np.asarray(loss_sums, dtype=np.float64).sum(axis=-1) / (math.log(2.0) * total_bytes)


def sample_sd(values: np.ndarray) -> float:
    """Sample standard deviation (ddof = 1); NaN for fewer than two values."""
    values = np.asarray(values, dtype=np.float64)
    return float(np.std(values, ddof=1)) if values.size > 1 else math.nan


@dataclass(frozen=True)
class ArmSummary:
    """One arm over its seeds: per-seed NLL and PPL, the mean PPL P̄ and its SD over seeds."""

    arm: str
    seeds: np.ndarray  # (S,) int64
    nll: np.ndarray  # (S,) token-averaged NLL per seed
    ppl: np.ndarray  # (S,) exp(nll)
    ppl_mean: float  # arithmetic mean of per-seed PPLs (not exp of the mean NLL)
    ppl_sd: float  # sample SD (ddof = 1); NaN with one seed
    bits_per_byte: np.ndarray | None = None  # (S,) when the documents carry n_bytes
    notes: tuple[str, ...] = field(default=())

    @property
    def n_seeds(self) -> int:
        return int(self.seeds.shape[0])

    def to_dict(self) -> dict:
        """The JSON view: arm, seeds, nll, ppl, ppl_mean, ppl_sd (null when undefined)."""
        return {"arm": self.arm, "seeds": self.seeds.tolist(), "nll": self.nll.tolist(), "ppl": self.ppl.tolist(),
                "ppl_mean": float(self.ppl_mean), "ppl_sd": None if math.isnan(self.ppl_sd) else float(self.ppl_sd)}


def arm_summary(arm: str, seeds: np.ndarray, loss_sums: np.ndarray, n_units: np.ndarray,
                n_bytes: np.ndarray | None = None) -> ArmSummary:
    """Summarise one arm from its (S, N) loss sums."""
    nll = token_nll(loss_sums, n_units)
    ppl = perplexity(nll)
    notes: tuple[str, ...] = (ONE_SEED_NOTE,) if ppl.shape[0] == 1 else ()
    if n_bytes is not None and not np.sum(n_bytes) > 0:
        n_bytes, notes = None, notes + ("n_bytes is 0 for every document: no bits per byte",)
    return ArmSummary(
        arm=arm,
        seeds=np.asarray(seeds, dtype=np.int64),
        nll=nll,
        ppl=ppl,
        ppl_mean=float(ppl.mean()),
        ppl_sd=sample_sd(ppl),
        bits_per_byte=None if n_bytes is None else bits_per_byte(loss_sums, n_bytes),
        notes=notes,
    )


def delta_p(baseline_ppl_mean: float, variant_ppl_mean: float) -> float:
    """ΔP = P̄_variant / P̄_baseline − 1, a fraction (negative = the variant is better)."""
    return float(variant_ppl_mean) / float(baseline_ppl_mean) - 1.0


def improved_pairs(baseline_ppl: np.ndarray, variant_ppl: np.ndarray) -> int:
    """Number of seeds whose variant PPL is strictly below the baseline PPL."""
    return int(np.sum(np.asarray(variant_ppl) < np.asarray(baseline_ppl)))


def nll_diff_mean(baseline_nll: np.ndarray, variant_nll: np.ndarray) -> float:
    """D = mean over seeds of NLL_variant − NLL_baseline."""
    return float(np.mean(np.asarray(variant_nll) - np.asarray(baseline_nll)))


def document_differences(baseline: np.ndarray, variant: np.ndarray) -> np.ndarray:
    """d_i = mean over seeds of ℓ_variant,i − ℓ_baseline,i; Σ d_i / Σ n_i equals D."""
    return np.mean(np.asarray(variant, dtype=np.float64) - np.asarray(baseline, dtype=np.float64), axis=0)


@dataclass(frozen=True)
class WinRate:
    """Documents on which the variant's seed-averaged per-token loss is strictly lower."""

    wins: int
    n_docs: int

    @property
    def win_rate(self) -> float:
        return self.wins / self.n_docs

    def confidence_interval(self, confidence_level: float = DEFAULTS.confidence_level) -> ConfidenceInterval:
        """Wilson score interval for the share of documents won (Wilson 1927), documents sampled, models fixed."""
        check_confidence_level(confidence_level)
        low, high = proportion_confint(self.wins, self.n_docs, alpha=1.0 - confidence_level, method="wilson")
        return ConfidenceInterval(float(low), float(high))

    def to_dict(self) -> dict:
        return {"wins": self.wins, "n_docs": self.n_docs, "win_rate": self.win_rate}


def document_wins(baseline: np.ndarray, variant: np.ndarray, n_units: np.ndarray) -> WinRate:
    """wins = #{i : mean_s ℓ_variant,s,i / n_i < mean_s ℓ_baseline,s,i / n_i}."""
    n_units = np.asarray(n_units, dtype=np.float64)
    per_token_variant = np.mean(variant, axis=0) / n_units
    per_token_baseline = np.mean(baseline, axis=0) / n_units
    return WinRate(wins=int(np.sum(per_token_variant < per_token_baseline)), n_docs=int(n_units.shape[0]))


@dataclass(frozen=True)
class PairedDelta:
    """ΔP of a variant against a reference arm, with the improved pairs over their shared seeds."""

    delta_p: float
    improved: int
    n_pairs: int


def paired_delta(reference: ArmSummary, variant: ArmSummary) -> PairedDelta:
    """ΔP of P̄ over each arm's own seeds; improved pairs over the seeds both arms have."""
    shared = np.intersect1d(reference.seeds, variant.seeds)
    ref_ppl = reference.ppl[np.isin(reference.seeds, shared)]
    var_ppl = variant.ppl[np.isin(variant.seeds, shared)]
    return PairedDelta(delta_p(reference.ppl_mean, variant.ppl_mean), improved_pairs(ref_ppl, var_ppl), len(shared))
