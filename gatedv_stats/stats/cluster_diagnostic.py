"""Whether documents (or items) that share a group — a web domain, a task's subtask — differ in their paired
difference far beyond what the documents themselves explain, so that they should be sampled as clusters.

`group_effect_test` runs a one-way ANOVA of the documents' seed-mean differences ȳ_i on the groups,

    F = [Σ_g n_g (ȳ_g − ȳ)² / (G − 1)] / [Σ_g Σ_{i∈g} (ȳ_i − ȳ_g)² / (N − G)],   p = P(F(G − 1, N − G) ≥ F):

the seed effect cancels and the interaction averages into ȳ_i, so with no group effect F follows F(G − 1, N − G)
for normal ȳ_i of equal variance (the random-effects test of σ²_group = 0). It is flagged when p < DIAGNOSTIC_LEVEL
(Bonferroni over the columns tested) and the seed-and-document SE of D with the groups as clusters is at least
MIN_SE_RATIO times the one without (on F alone with one seed pair, where there is no verdict). docs/statistics.md
("Documents that should be clusters") calibrates it, from bench/cluster_diagnostic.py.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from scipy import special

from gatedv_stats.core.errors import InputError
from gatedv_stats.core.validation import check_open_unit
from gatedv_stats.stats.crossed import clustered_moments, crossed_moments, label_codes

# Chosen by simulation (bench/cluster_diagnostic.py): without a group effect the note fires in at most 2.8% of
# studies (at most this level where the F test is exact); it fires in every study of the setting of 20 domains ×
# 50 documents whose domain effect misleads the unclustered verdict (`testing.CLUSTERED_STUDY`).
DIAGNOSTIC_LEVEL = 0.01
# Below, clustering widens the verdict's interval by less than a quarter (a 5% test then rejects in at most about
# 12% of studies); the ratio also keeps the note rare where documents' variances differ between groups and the
# F test alone is not exact (docs/statistics.md).
MIN_SE_RATIO = 1.25
GROUPING_COLUMNS = ("domain", "subtask")  # tested whatever their type; other columns only when they hold strings
MIN_GROUPS = 3  # a column is tested when at least this many of its values hold MIN_GROUP_SIZE documents or more,
MIN_GROUP_SIZE = 2  # and its values hold MIN_GROUP_SIZE documents on average (not an id per document)


@dataclass(frozen=True)
class GroupEffectTest:
    """The one-way ANOVA of the documents' seed-mean differences on one column's groups."""

    column: str | None
    n_groups: int
    n_docs: int
    f_statistic: float  # inf when the documents do not vary within their groups but the groups differ
    df_between: int
    df_within: int
    p_value: float
    se_ratio: float | None  # SE of D with the groups as clusters / without; None with one seed pair or no spread
    level: float  # what p_value is compared with
    flagged: bool
    noun: str = "documents"  # what the units are: documents, items

    def to_dict(self) -> dict:
        return {**asdict(self), "f_statistic": self.f_statistic if math.isfinite(self.f_statistic) else None}

    def summary(self) -> str:
        """What the test found, in one sentence."""
        name = self.column or "group"
        ratio = ("" if self.se_ratio is None else
                 f"; the seed-and-document SE of D is {self.se_ratio:.2f}× as large with {name} clusters")
        finding = "far beyond" if self.flagged else "not far beyond"
        return (f"the paired differences vary between the {self.n_groups:,} {name} groups {finding} what their "
                f"{self.n_docs:,} {self.noun} explain (one-way ANOVA F = {self.f_statistic:.3g} on {self.df_between:,} "
                f"and {self.df_within:,} df, p = {self.p_value:.2g}{ratio})")

    def warning(self, consequence: str | None = None) -> str:
        """The note a command prints when the test is flagged: the finding, what follows (by default for the
        verdict) and the remedy."""
        name = self.column or "group"
        consequence = consequence or (f"the verdict can name a winner by chance; treat each {name} as one sampled "
                                      f"unit with --cluster {name}")
        return f"{self.summary()}: {self.noun} sharing a {name} are not independent samples, so {consequence}"


def group_effect_test(differences: np.ndarray, labels: np.ndarray, n_units: np.ndarray | None = None, *,
                      level: float = DIAGNOSTIC_LEVEL, column: str | None = None,
                      noun: str = "documents") -> GroupEffectTest:
    """Test for a group effect in per-unit paired differences `differences` (S, N) (or (N,): one seed pair) with
    one label per document (N,); `n_units` (N,) weight D as the verdict does (None: equally, as item scores)."""
    check_open_unit("level", level)
    y = np.asarray(differences, dtype=np.float64)
    y = y[None, :] if y.ndim == 1 else y
    labels = np.asarray(labels)
    if y.ndim != 2 or labels.shape != (y.shape[1],):
        raise InputError(f"group effect: {labels.shape} labels for differences of shape {y.shape}; give one label "
                         "per document")
    if not np.all(np.isfinite(y)):
        raise InputError("group effect: the paired differences must be finite")
    n = np.ones(y.shape[1]) if n_units is None else np.asarray(n_units, dtype=np.float64)
    means = y.mean(axis=0)
    _, group_of, sizes = label_codes(labels, "group effect")
    n_groups, n_docs = sizes.size, means.size
    if n_groups < 2 or n_docs <= n_groups:
        raise InputError(f"group effect: needs at least 2 groups and more {noun} than groups, got {n_groups} groups "
                         f"of {n_docs} {noun}")
    group_means = np.bincount(group_of, weights=means) / sizes
    between = float(sizes @ (group_means - means.mean()) ** 2) / (n_groups - 1)
    within = float(np.sum((means - group_means[group_of]) ** 2)) / (n_docs - n_groups)
    f_statistic = between / within if within > 0.0 else math.inf if between > 0.0 else 0.0
    p_value = 1.0 if f_statistic == 0.0 else float(special.fdtrc(n_groups - 1, n_docs - n_groups, f_statistic))
    se_ratio = None  # with one seed pair there is no verdict whose SE the groups could widen
    if y.shape[0] >= 2:
        documents = float(crossed_moments(y, n / n.sum()).var_d)
        clusters = float(clustered_moments(y, n, labels).var_d)
        se_ratio = math.sqrt(clusters / documents) if documents > 0.0 else None
    flagged = p_value < level and (se_ratio is None or se_ratio >= MIN_SE_RATIO)
    return GroupEffectTest(column=column, n_groups=n_groups, n_docs=n_docs, f_statistic=f_statistic,
                           df_between=n_groups - 1, df_within=n_docs - n_groups, p_value=p_value, se_ratio=se_ratio,
                           level=level, flagged=flagged, noun=noun)


def grouping_columns(columns: pd.DataFrame, exclude: str | None = None) -> tuple[str, ...]:
    """The document columns that may group documents into clusters: `domain`, `subtask` and any string column,
    with at least MIN_GROUPS groups of MIN_GROUP_SIZE documents or more, and MIN_GROUP_SIZE on average."""
    found = []
    for name in columns.columns:
        values = columns[name]
        if name == exclude or (name not in GROUPING_COLUMNS and not isinstance(values.dtype, pd.CategoricalDtype)
                               and not pd.api.types.is_string_dtype(values.dtype)):  # true of the object dtype too
            continue
        sizes = values.astype(str).value_counts().to_numpy()
        if int(np.sum(sizes >= MIN_GROUP_SIZE)) >= MIN_GROUPS and len(values) >= MIN_GROUP_SIZE * sizes.size:
            found.append(str(name))
    return tuple(found)


def group_effects(differences: np.ndarray, labels: Mapping[str, np.ndarray], n_units: np.ndarray | None = None, *,
                  noun: str = "documents") -> tuple[GroupEffectTest, ...]:
    """`group_effect_test` for each column's labels, each at DIAGNOSTIC_LEVEL divided by the columns tested."""
    level = DIAGNOSTIC_LEVEL / max(len(labels), 1)
    return tuple(group_effect_test(differences, values, n_units, level=level, column=column, noun=noun)
                 for column, values in labels.items())
