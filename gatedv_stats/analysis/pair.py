"""Everything known about one paired comparison, assembled in one result (`gatedv analyze`, and each comparison
of a report).

On every scale, D per group of any unit column (a document's domain, an item's subtask). Beside the paper's
perplexity comparison (ΔP, D with its document bootstrap, wins): the BCa interval for D, the sign-flip permutation
test on d_i, the seed-level view (two-level bootstrap, paired t, sign test) and bits per byte when the loss files
carry `n_bytes`; a score's comparison carries its own (the seed permutation test, unit counts, McNemar).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gatedv_stats.analysis.compare import compare, seed_document_fit
from gatedv_stats.analysis.comparison import Comparison
from gatedv_stats.analysis.figures.perplexity import resampled_units
from gatedv_stats.analysis.noise_floor import NoiseFloor
from gatedv_stats.core import formatting as fmt
from gatedv_stats.core.defaults import DEFAULTS
from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.core.validation import check_at_least, check_n_resamples
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.stats.breakdowns import Breakdown, breakdown
from gatedv_stats.stats.intervals import ConfidenceInterval, log_interval_as_change
from gatedv_stats.stats.permutation import SignFlipTest, sign_flip_test
from gatedv_stats.stats.resampling import interval_from_distribution
from gatedv_stats.stats.seed_level import SeedUncertainty, seed_uncertainty


@dataclass(frozen=True)
class BitsPerByte:
    """Bits per UTF-8 byte of both arms (comparable across tokenizers, unlike PPL), with the seed-and-document
    interval of their difference."""

    baseline: tuple[float, ...]  # per seed
    variant: tuple[float, ...]
    baseline_mean: float
    variant_mean: float
    relative_change: float | None  # mean_variant / mean_baseline − 1; None when the baseline's is 0
    difference: float  # mean over seeds of variant − baseline, bits per byte
    difference_interval: ConfidenceInterval | None  # seeds and documents sampled; None with one seed pair
    relative_change_interval: ConfidenceInterval | None  # through the log ratio (delta method)

    def to_dict(self) -> dict:
        return {"baseline": list(self.baseline), "variant": list(self.variant), "baseline_mean": self.baseline_mean,
                "variant_mean": self.variant_mean, "relative_change": self.relative_change,
                "difference": self.difference,
                "difference_ci": None if self.difference_interval is None else list(self.difference_interval),
                "relative_change_ci": None if self.relative_change_interval is None else
                list(self.relative_change_interval)}

    def summary(self) -> str:
        relative = ("no relative change: the baseline's loss is 0" if self.relative_change is None else
                    f"{fmt.format_delta_p(self.relative_change)}")
        text = f"bits per byte: {self.baseline_mean:.4f} vs {self.variant_mean:.4f} ({relative}, mean over seeds)"
        if self.difference_interval is not None:
            text += (f"; difference {fmt.format_nll_diff(self.difference)} "
                     f"{fmt.format_interval(*self.difference_interval)} bits per byte")
            if self.relative_change_interval is not None:
                text += f", relative {fmt.format_delta_p_interval(self.relative_change_interval)}"
            text += " (seeds and documents sampled)"
        return text


@dataclass(frozen=True)
class PairAnalysis:
    """One paired comparison with every reviewer statistic; `rng_seed` and resample counts are recorded inside."""

    comparison: Comparison
    permutation: SignFlipTest  # sign flips of the per-unit differences, models fixed
    breakdowns: tuple[Breakdown, ...]
    notes: tuple[str, ...] = ()
    bca_interval: ConfidenceInterval | None = None  # BCa interval for D from the comparison's document bootstrap
    seed_level: SeedUncertainty | None = None  # None with a single seed pair or no spread over seeds
    bits_per_byte: BitsPerByte | None = None  # None without n_bytes

    def to_dict(self) -> dict:
        """`comparison` is exactly the `gatedv bootstrap --json` object; everything else sits under new keys."""
        return {
            "comparison": self.comparison.to_dict(),
            "bca_interval": None if self.bca_interval is None else list(self.bca_interval),
            "permutation_test": self.permutation.to_dict(),
            "seed_uncertainty": None if self.seed_level is None else self.seed_level.to_dict(),
            "bits_per_byte": None if self.bits_per_byte is None else self.bits_per_byte.to_dict(),
            "breakdowns": [item.to_dict() for item in self.breakdowns],
            "notes": list(self.notes),
            "inputs": self.comparison.sources,
        }

    def summary(self) -> str:
        reviewer = [] if self.bca_interval is None else [
            f"{fmt.format_level(self.comparison.bootstrap.confidence_level)} BCa interval for D: "
            f"{fmt.format_interval(*self.bca_interval)} (same resamples as above)"]
        reviewer += [test.summary() for test in (self.permutation, self.seed_level, self.bits_per_byte)
                     if test is not None]
        lines = [self.comparison.summary(), "", "reviewer statistics:", *reviewer]
        lines += [text for item in self.breakdowns for text in ("", item.summary())]
        return "\n".join(lines + [f"note: {note}" for note in self.notes])


def analyze(paired: Paired, *, n_resamples: int = DEFAULTS.n_resamples,
            confidence_level: float = DEFAULTS.confidence_level, rng_seed: int = DEFAULTS.rng_seed,
            n_permutations: int = DEFAULTS.n_permutations, by: tuple[str, ...] = (), bins: int = 4, min_docs: int = 5,
            cluster: str | None = None, sesoi: float | None = None, floor: NoiseFloor | None = None,
            allow_mismatch: Sequence[str] = (), progress: bool | None = False) -> PairAnalysis:
    """Every reviewer statistic for one pair of arms; all resampling is seeded from `rng_seed`. `by`: unit
    columns to break D down by, on every scale. `cluster` and `sesoi` as in `compare` (and `floor`,
    `allow_mismatch`); with `cluster` the models-fixed statistics resample clusters."""
    check_n_resamples(n_permutations, minimum=1, parameter="n_permutations")
    check_at_least("bins", bins, 1)
    check_at_least("min_docs", min_docs, 2)
    comparison = compare(paired, n_resamples=n_resamples, confidence_level=confidence_level, rng_seed=rng_seed,
                         cluster=cluster, sesoi=sesoi, floor=floor, allow_mismatch=allow_mismatch, progress=progress)
    breakdowns = tuple(breakdown(paired.baseline, paired.variant, paired.n_units, column, unit_column(paired, column),
                                 bins=bins, min_docs=min_docs, n_resamples=n_resamples,
                                 confidence_level=confidence_level, rng_seed=rng_seed,
                                 log_scale=paired.scale.log_ratio, estimate_name=paired.scale.estimate_name,
                                 noun=paired.noun) for column in by)
    differences, units_n = resampled_units(paired, paired.labels(cluster))
    permutation = sign_flip_test(differences, units_n, n_permutations=n_permutations, rng_seed=rng_seed,
                                 progress=progress)
    if paired.scale.figures != "perplexity":  # a score's comparison holds its own: the seed permutation test, McNemar
        return PairAnalysis(comparison=comparison, permutation=permutation, breakdowns=breakdowns)
    # the reviewer statistics of loss files beside the sign-flip test: BCa, the seed level and bits per byte
    notes = []
    try:
        bca = interval_from_distribution(differences, units_n, comparison.bootstrap.bootstrap_distribution,
                                         confidence_level=confidence_level, method="bca")
    except ValueError as error:  # resampling's message for a degenerate sample (e.g. one document, few resamples)
        bca = None
        notes.append(f"no BCa interval: {error.detail if isinstance(error, ParameterError) else error}")
    seed_level = None
    if paired.n_pairs < 2:
        notes.append("one seed pair: no seed-level interval, t interval or sign test (they need at least 2 pairs)")
    else:
        try:
            seed_level = seed_uncertainty(paired.baseline, paired.variant, paired.n_units,
                                          baseline_arm=paired.baseline_arm, variant_arm=paired.variant_arm,
                                          n_resamples=n_resamples, confidence_level=confidence_level,
                                          rng_seed=rng_seed, progress=progress)
        except InputError as error:  # e.g. identical arms: no spread over seeds, every pair tied
            notes.append(f"no seed-level statistics: {error}")
    return PairAnalysis(comparison=comparison, permutation=permutation, breakdowns=breakdowns, notes=tuple(notes),
                        bca_interval=bca, seed_level=seed_level, bits_per_byte=_bits_per_byte(paired, comparison))


def unit_column(paired: Paired, column: str) -> np.ndarray:
    """A per-unit column aligned with `paired.doc_ids`: a loss file's n_targets (not per byte, where the runs'
    targets may differ), or a column the files carry (domain, n_bytes; an item's subtask)."""
    weight = paired.scale.weight_name
    targets = {} if weight is None or paired.unit == "byte" else {weight: paired.n_units}
    if column in targets:
        return targets[column]
    if column == weight:
        raise ParameterError("by", "a per-byte comparison has no n_targets column (the runs' targets may differ); "
                                   "break D down by n_bytes instead")
    if column in paired.doc_columns.columns:
        return paired.doc_columns[column].to_numpy()
    available = ", ".join([*targets, *paired.doc_columns.columns])
    raise ParameterError("by", f"no {paired.noun} column {column!r} in the {paired.scale.files} (available: "
                         f"{available})")


def _bits_per_byte(paired: Paired, comparison: Comparison) -> BitsPerByte | None:
    """Per-token comparisons that carry n_bytes: bits per byte, its difference on the seed-and-document interval
    of the per-byte losses (the same estimator, weighted by bytes). A per-byte comparison already is one."""
    baseline, variant = comparison.baseline.bits_per_byte, comparison.variant.bits_per_byte
    if baseline is None or variant is None or paired.unit == "byte":
        return None
    n_bytes = paired.doc_columns["n_bytes"].to_numpy()
    per_byte = (None if not np.all(n_bytes > 0) else
                seed_document_fit(paired, None, comparison.bootstrap.confidence_level, weights=n_bytes))
    bits = 1.0 / math.log(2.0)
    baseline_mean, variant_mean = float(np.mean(baseline)), float(np.mean(variant))
    relative = variant_mean / baseline_mean - 1.0 if baseline_mean > 0 else None
    interval = None if per_byte is None else ConfidenceInterval(*(end * bits for end in per_byte.confidence_interval))
    relative_interval = None
    if per_byte is not None and relative is not None:
        # delta method: log(bpb_var / bpb_base) moves by D_byte / (nats per byte of the baseline)
        half = (per_byte.confidence_interval.high - per_byte.estimate) / (baseline_mean / bits)
        relative_interval = log_interval_as_change(math.log1p(relative) - half, math.log1p(relative) + half)
    return BitsPerByte(baseline=tuple(float(v) for v in baseline), variant=tuple(float(v) for v in variant),
                       baseline_mean=baseline_mean, variant_mean=variant_mean, relative_change=relative,
                       difference=variant_mean - baseline_mean, difference_interval=interval,
                       relative_change_interval=relative_interval)
