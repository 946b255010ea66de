"""Diagnostics of a paired comparison's documents, read off its paired structure: the group-effect test of
`gatedv_stats.stats.cluster_diagnostic` on every column that may group the documents into clusters."""

from __future__ import annotations

from gatedv_stats.pairing.paired import Paired
from gatedv_stats.stats.cluster_diagnostic import GroupEffectTest, group_effects, grouping_columns


def paired_group_effects(paired: Paired, cluster: str | None = None) -> tuple[GroupEffectTest, ...]:
    """The group-effect tests of every grouping column of a pair's documents but the one it is clustered by."""
    columns = grouping_columns(paired.doc_columns, exclude=cluster)
    if not columns:
        return ()
    labels = {column: paired.doc_columns[column].astype(str).to_numpy() for column in columns}
    return group_effects((paired.variant - paired.baseline) / paired.n_units, labels, paired.n_units)
