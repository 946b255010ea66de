"""One comparison of two arms, for every metric: the seeds × units interval, the verdict read on the pair's scale,
then the figures that belong to the scale (the paper's perplexity figures, or a task's item counts and tests)."""

from __future__ import annotations

import numpy as np

from gatedv_stats.analysis.perplexity import Comparison, perplexity_comparison
from gatedv_stats.analysis.task_scores import TaskComparison, task_comparison
from gatedv_stats.core.defaults import DEFAULTS
from gatedv_stats.core.errors import NoSpreadError
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.stats.seed_document import SeedDocumentResult, seed_document_interval
from gatedv_stats.stats.verdict import Verdict, verdict


def compare(paired: Paired, *, n_resamples: int = DEFAULTS.n_resamples,
            confidence_level: float = DEFAULTS.confidence_level, rng_seed: int = DEFAULTS.rng_seed,
            method: str = "percentile", cluster: str | None = None, sesoi: float | None = None,
            progress: bool | None = False) -> Comparison | TaskComparison:
    """The comparison of `paired.variant` against `paired.baseline`.

    `cluster`: a unit column (a document's domain, an item's subtask) whose values group the units into the
    sampled clusters. `sesoi`: the smallest effect of interest on the pair's scale (a relative ΔP for perplexity,
    a difference in the metric's units for a task), which lets the verdict say "equivalent". `n_resamples`,
    `rng_seed` and `method` set the document bootstrap of the perplexity figures (models fixed).
    """
    if sesoi is not None:
        paired.scale.check_sesoi(sesoi)  # refused even where there is no interval to test it with
    labels = paired.labels(cluster)
    fit = seed_document_fit(paired, labels, confidence_level)
    decided = None if fit is None else decide(fit, paired, sesoi)
    if paired.scale.log_ratio:
        return perplexity_comparison(paired, fit, decided, labels=labels, cluster=cluster, n_resamples=n_resamples,
                                     confidence_level=confidence_level, rng_seed=rng_seed, method=method,
                                     progress=progress)
    return task_comparison(paired, fit, decided, cluster=cluster, confidence_level=confidence_level)


def seed_document_fit(paired: Paired, labels: np.ndarray | None, confidence_level: float,
                      weights: np.ndarray | None = None) -> SeedDocumentResult | None:
    """The seeds × units interval (weighted by `paired.n_units`, or by `weights` such as n_bytes), or None where it
    cannot exist: one seed pair, or no spread at all."""
    if paired.n_pairs < 2:
        return None
    try:
        return seed_document_interval(paired.baseline, paired.variant,
                                      paired.n_units if weights is None else weights, clusters=labels,
                                      confidence_level=confidence_level, noun=paired.noun)
    except NoSpreadError:
        return None


def decide(fit: SeedDocumentResult, paired: Paired, sesoi: float | None = None, *, p_value: float | None = None,
           tost_p_value: float | None = None) -> Verdict:
    """The verdict of a fit on the pair's scale and unit; `p_value` and `tost_p_value` replace the fit's own
    (adjusted over several arms or tasks)."""
    return verdict(fit, paired.scale, sesoi=sesoi, unit=paired.unit, p_value=p_value, tost_p_value=tost_p_value)
