"""One comparison of two arms, for every metric: the seeds × units interval, the verdict read on the pair's scale,
then the figures that belong to the scale (`analysis.figures`: the paper's perplexity figures, or a score's
per-seed means, item counts and tests)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from gatedv_stats.analysis.comparison import Comparison, Figures
from gatedv_stats.analysis.figures import FIGURES
from gatedv_stats.analysis.noise_floor import NoiseFloor, check_floor
from gatedv_stats.core.defaults import DEFAULTS
from gatedv_stats.core.errors import NoSpreadError
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.stats.seed_document import SeedDocumentResult, seed_document_interval
from gatedv_stats.stats.verdict import Verdict, verdict


def compare(paired: Paired, *, n_resamples: int = DEFAULTS.n_resamples,
            confidence_level: float = DEFAULTS.confidence_level, rng_seed: int = DEFAULTS.rng_seed,
            method: str = "percentile", cluster: str | None = None, sesoi: float | None = None,
            floor: NoiseFloor | None = None, allow_mismatch: Sequence[str] = (),
            progress: bool | None = False) -> Comparison:
    """The comparison of `paired.variant` against `paired.baseline`, the options as in `gatedv_stats.api.compare`
    (`floor`: its `noise_floor`, the floor itself)."""
    if sesoi is not None:
        paired.scale.check_sesoi(sesoi)  # refused even where there is no interval to test it with
    paired = with_floor(paired, floor, allow_mismatch)
    labels = paired.labels(cluster)
    fit = seed_document_fit(paired, labels, confidence_level, floor=floor)
    decided = None if fit is None else decide(fit, paired, sesoi)
    figures = FIGURES[paired.scale.figures].of(
        paired, labels=labels, cluster=cluster, n_resamples=n_resamples, confidence_level=confidence_level,
        rng_seed=rng_seed, method=method, progress=progress)
    return comparison_of(paired, fit, decided, cluster, confidence_level, figures)


def comparison_of(paired: Paired, fit: SeedDocumentResult | None, decided: Verdict | None, cluster: str | None,
                  confidence_level: float, figures: Figures) -> Comparison:
    """The comparison of a pair with its fit, verdict (at `confidence_level`) and the scale's figures."""
    return Comparison(baseline_arm=paired.baseline_arm, variant_arm=paired.variant_arm, scale=paired.scale,
                      unit=paired.unit, seeds=tuple(int(seed) for seed in paired.seeds), n_units=paired.n_docs,
                      estimate=type(figures).estimate(paired), confidence_level=confidence_level, seed_document=fit,
                      verdict=decided, cluster=cluster, pairing_notes=paired.notes, sources=paired.sources,
                      figures=figures, eval_set=paired.eval_set, task=paired.task)


def with_floor(paired: Paired, floor: NoiseFloor | None, allow_mismatch: Sequence[str]) -> Paired:
    """The pair, with the setup differences accepted for its noise floor among its notes (a floor of another setup
    is refused)."""
    if floor is None:
        return paired
    return replace(paired, mismatches=paired.mismatches + check_floor(floor, paired, allow_mismatch))


def seed_document_fit(paired: Paired, labels: np.ndarray | None, confidence_level: float,
                      weights: np.ndarray | None = None, floor: NoiseFloor | None = None) -> SeedDocumentResult | None:
    """The seeds × units interval (weighted by `paired.n_units`, or by `weights` such as n_bytes; with a noise
    floor's seed variance), or None where it cannot exist: one seed pair without a floor, or no spread at all."""
    if paired.n_pairs < 2 and floor is None:
        return None
    try:
        return seed_document_interval(paired.baseline, paired.variant,
                                      paired.n_units if weights is None else weights, clusters=labels,
                                      confidence_level=confidence_level, noun=paired.noun,
                                      floor=None if floor is None else floor.seed, log_scale=paired.scale.log_ratio)
    except NoSpreadError:
        return None


def decide(fit: SeedDocumentResult, paired: Paired, sesoi: float | None = None, *, p_value: float | None = None,
           tost_p_value: float | None = None) -> Verdict:
    """The verdict of a fit on the pair's scale and unit; `p_value` and `tost_p_value` replace the fit's own
    (adjusted over several arms or tasks)."""
    return verdict(fit, paired.scale, sesoi=sesoi, unit=paired.unit, p_value=p_value, tost_p_value=tost_p_value)
