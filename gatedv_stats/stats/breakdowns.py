"""D per group of units (a document's domain, length bins, an item's subtask, any unit column), with intervals that
generalise and ones that hold the models fixed, from (S, N) values (loss sums, or scores), (N,) unit weights and the
column's (N,) per-unit values.

A group's D is Σ_{i∈g} d_i / Σ_{i∈g} n_i, the paper's statistic restricted to the group. With two or more seed
pairs each group gets the seed-and-document interval of its own documents at the Bonferroni level 1 − α/G
(simultaneous over the G groups) and a p-value, Holm-adjusted over the groups (Holm 1979). The
document-bootstrap interval resamples the group's documents with the models held fixed, as the whole-set
interval does.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, replace

import numpy as np
import pandas as pd

from gatedv_stats.core import formatting as fmt
from gatedv_stats.core.defaults import DEFAULTS
from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.core.validation import check_at_least
from gatedv_stats.stats import metrics
from gatedv_stats.stats.intervals import ConfidenceInterval
from gatedv_stats.stats.multiple import holm
from gatedv_stats.stats.resampling import document_bootstrap
from gatedv_stats.stats.seed_document import SeedDocumentResult, seed_document_interval

OTHER = "(other)"


@dataclass(frozen=True)
class GroupEffect:
    group: str
    n_docs: int
    n_units: int  # the group's targets, or its UTF-8 bytes when the comparison is per byte; its items
    estimate: float  # D over the group's units
    confidence_interval: ConfidenceInterval  # document bootstrap, models fixed
    bootstrap_seed: int
    seed_document_interval: ConfidenceInterval | None = None  # seeds and documents, at the Bonferroni level
    p_value: float | None = None  # two-sided, seeds and documents
    p_holm: float | None = None  # Holm-adjusted over the groups

    def to_dict(self, estimate_name: str = "nll_diff_mean") -> dict:
        """The published JSON keys (D under `estimate_name`; low, high: the models-fixed interval), then the
        seed-and-document ones."""
        low, high = self.seed_document_interval or (None, None)
        return {"group": self.group, "n_docs": self.n_docs, "n_units": self.n_units,
                estimate_name: self.estimate, "low": self.confidence_interval.low,
                "high": self.confidence_interval.high, "bootstrap_seed": self.bootstrap_seed,
                "seed_document_low": low, "seed_document_high": high, "p_value": self.p_value, "p_holm": self.p_holm}


@dataclass(frozen=True)
class Breakdown:
    """D per group of one unit column; groups below `min_docs` units are pooled into "other"."""

    column: str
    binned: bool  # a numeric column cut into quantile bins
    groups: tuple[GroupEffect, ...]
    pooled_groups: int  # small groups pooled into "other"
    left_out_docs: int  # documents of a pooled "other" still below min_docs, left out
    min_docs: int
    confidence_level: float
    n_resamples: int
    method: str
    rng_seed: int  # group k is resampled with rng_seed + k
    adjusted_level: float | None = None  # 1 − α/G of the seed-and-document intervals; None with one seed pair
    estimate_name: str = "nll_diff_mean"  # what D is called on the comparison's scale
    noun: str = "document"  # what a unit is called

    def to_dict(self) -> dict:
        """The published JSON keys (level, samples)."""
        data = {**asdict(self), "groups": [group.to_dict(self.estimate_name) for group in self.groups]}
        data["level"], data["samples"] = data.pop("confidence_level"), data.pop("n_resamples")
        del data["estimate_name"], data["noun"]
        return data

    def to_frame(self) -> pd.DataFrame:
        """One row per group: group, n_docs, n_units, D (under `estimate_name`), low, high (models fixed),
        bootstrap_seed, seed_document_low, seed_document_high, p_value, p_holm."""
        return pd.DataFrame([group.to_dict(self.estimate_name) for group in self.groups])

    def summary(self) -> str:
        pct = fmt.format_level(self.confidence_level)
        width = max([len("group")] + [len(group.group) for group in self.groups]) + 2
        units = "docs" if self.noun == "document" else f"{self.noun}s"
        simultaneous = (f"; seeds and {self.noun}s: {fmt.format_percent(self.adjusted_level, 2)} intervals "
                        f"(Bonferroni over {len(self.groups)} groups) and Holm-adjusted p"
                        if self.adjusted_level is not None else "")
        lines = [f"D by {self.column}" + (" (quantile bins)" if self.binned else "")
                 + f": models fixed: {pct} {self.noun}-bootstrap intervals ({self.method}, B = "
                 f"{fmt.format_count(self.n_resamples)}, seed {self.rng_seed} + group index){simultaneous}",
                 f"{'group':<{width}}{units:>7}  {'D':>10}  {'models fixed':<24}{f'seeds and {self.noun}s':<24}"
                 "Holm p"]
        for group in self.groups:
            generalising = ("—" if group.seed_document_interval is None else
                            fmt.format_interval(*group.seed_document_interval))
            holm = "—" if group.p_holm is None else f"{group.p_holm:.3g}"
            lines.append(f"{group.group:<{width}}{group.n_docs:>7}  {fmt.format_nll_diff(group.estimate):>10}  "
                         f"{fmt.format_interval(*group.confidence_interval):<24}{generalising:<24}{holm}")
        if self.pooled_groups:
            lines.append(f"note: {self.pooled_groups} groups with fewer than {self.min_docs} {self.noun}s pooled into "
                         f"{OTHER!r}")
        if self.left_out_docs:
            lines.append(f"note: {self.left_out_docs} {self.noun}s left out (their pooled group is still below "
                         f"{self.min_docs} {self.noun}s)")
        return "\n".join(lines)


def breakdown(baseline: np.ndarray, variant: np.ndarray, n_units: np.ndarray, column: str, values: np.ndarray, *,
              bins: int = 4, min_docs: int = 5, n_resamples: int = DEFAULTS.n_resamples,
              confidence_level: float = DEFAULTS.confidence_level, rng_seed: int = DEFAULTS.rng_seed,
              method: str = "percentile", log_scale: bool = True, estimate_name: str = "nll_diff_mean",
              noun: str = "document") -> Breakdown:
    """D and its bootstrap interval (units resampled) per value of the unit column named `column`, whose (N,)
    per-unit `values` are aligned with the columns of the (S, N) values `baseline`, `variant` (loss sums; with
    `log_scale` False scores) and the (N,) `n_units` (numeric columns, and n_targets / n_bytes: `bins` quantile
    bins). `estimate_name` and `noun` name D and the units in the output."""
    check_at_least("bins", bins, 1)
    check_at_least("min_docs", min_docs, 2)
    baseline, variant, n = metrics.paired_arrays(baseline, variant, n_units)
    values = np.asarray(values)
    if values.shape != n.shape:
        raise InputError(f"breakdown by {column}: {values.shape} values for {n.shape[0]} {noun}s; give one value "
                         f"per {noun}")
    binned = column in ("n_targets", "n_bytes") or pd.api.types.is_numeric_dtype(values)
    labels, natural_order = _quantile_bins(values, bins) if binned else _categories(values)
    counts = pd.Series(labels).value_counts()
    small = set(counts[counts < min_docs].index)
    labels = np.array([OTHER if label in small else label for label in labels], dtype=object)
    order = [label for label in natural_order if label in counts.index and label not in small]
    pooled = int(np.count_nonzero(labels == OTHER)) if small else 0  # the small groups' documents
    if pooled >= min_docs:
        order.append(OTHER)
    left_out = pooled if pooled < min_docs else 0
    differences = metrics.document_differences(baseline, variant)
    # with two seed pairs or more, each group's seed-and-document interval at the Bonferroni level over the groups
    adjusted_level = 1.0 - (1.0 - confidence_level) / len(order) if baseline.shape[0] >= 2 and order else None
    members = pd.Series(labels).groupby(labels).indices  # each group's documents, in document order
    groups = []
    for index, group in enumerate(order):
        docs = members[group]
        result = document_bootstrap(differences[docs], n[docs], n_resamples=n_resamples,
                                    confidence_level=confidence_level, rng_seed=rng_seed + index, method=method)
        fit: SeedDocumentResult | None = None
        if adjusted_level is not None:
            with contextlib.suppress(InputError):  # no spread within the group
                fit = seed_document_interval(baseline[:, docs], variant[:, docs], n[docs],
                                             confidence_level=adjusted_level, log_scale=log_scale)
        groups.append(GroupEffect(group=str(group), n_docs=int(docs.size),
                                  n_units=int(n[docs].sum()), estimate=result.statistic,
                                  confidence_interval=result.confidence_interval, bootstrap_seed=rng_seed + index,
                                  seed_document_interval=None if fit is None else fit.confidence_interval,
                                  p_value=None if fit is None else fit.p_value))
    groups = [replace(effect, p_holm=p_holm) for effect, p_holm in zip(groups, holm([g.p_value for g in groups]))]
    return Breakdown(column=column, binned=binned, groups=tuple(groups), pooled_groups=len(small),
                     left_out_docs=left_out, min_docs=min_docs, confidence_level=confidence_level,
                     n_resamples=n_resamples, method=method, rng_seed=rng_seed, adjusted_level=adjusted_level,
                     estimate_name=estimate_name, noun=noun)


def _quantile_bins(values: np.ndarray, bins: int) -> tuple[np.ndarray, list[str]]:
    numeric = pd.to_numeric(pd.Series(values), errors="coerce")
    if numeric.isna().any():
        raise ParameterError("by", "the column has missing or non-numeric values, so it cannot be cut into length "
                                   "bins")
    codes, edges = pd.qcut(numeric, q=bins, labels=False, retbins=True, duplicates="drop")
    if len(edges) < 2:  # a constant column: one group
        name = f"{edges[0]:g}"
        return np.full(len(numeric), name, dtype=object), [name]
    names = [f"{edges[k]:g}–{edges[k + 1]:g}" for k in range(len(edges) - 1)]
    return np.array([names[int(code)] for code in codes], dtype=object), names


def _categories(values: np.ndarray) -> tuple[np.ndarray, list[str]]:
    labels = pd.Series(values).astype(str).to_numpy(dtype=object)
    return labels, sorted(set(labels))
