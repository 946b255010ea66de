"""The group-effect tests of a pair's documents: every grouping column but the clustered one, from the pair's
arrays as the array-level `group_effects` takes them."""

from __future__ import annotations

from dataclasses import replace

from gatedv_stats.analysis.figures.perplexity import paired_group_effects
from gatedv_stats.pairing.pair import pair_runs
from gatedv_stats.stats.cluster_diagnostic import group_effects
from gatedv_stats.testing import synthetic_runs


def paired_with_domains(n_docs=30):
    runs = synthetic_runs({"baseline": [30.0, 30.4, 29.9], "gatedv": [29.5, 29.7, 30.0]}, n_docs=n_docs, rng_seed=4)
    for run in runs:
        run.docs["domain"] = [f"site{i % 5}" for i in range(n_docs)]
    return pair_runs([r for r in runs if r.arm == "baseline"], [r for r in runs if r.arm == "gatedv"])


def test_paired_group_effects_tests_each_grouping_column_but_the_clustered_one():
    paired = paired_with_domains()
    paired = replace(paired, doc_columns=paired.doc_columns.assign(topic=[f"topic{i % 3}" for i in range(30)]))
    differences = (paired.variant - paired.baseline) / paired.n_units
    tests = paired_group_effects(paired)
    assert [test.column for test in tests] == ["domain", "topic"]
    assert tests == group_effects(differences, {"domain": paired.doc_columns["domain"].astype(str).to_numpy(),
                                                "topic": paired.doc_columns["topic"].astype(str).to_numpy()},
                                  paired.n_units)
    assert [test.column for test in paired_group_effects(paired, "domain")] == ["topic"]
    no_groups = replace(paired, doc_columns=paired.doc_columns[["n_bytes"]])
    assert paired_group_effects(no_groups) == ()  # no column groups the documents
