"""One pair's analysis reads its document columns out of the pair, and hands the array-level statistics (breakdown,
seed-level view, sign-flip test) the pair's arrays."""

from __future__ import annotations

import numpy as np
import pytest

from gatedv_stats.analysis.pair import analyze, unit_column
from gatedv_stats.core.errors import InputError
from gatedv_stats.pairing.pair import pair_runs
from gatedv_stats.stats.breakdowns import breakdown
from gatedv_stats.stats.permutation import sign_flip_test
from gatedv_stats.stats.seed_level import seed_uncertainty
from gatedv_stats.testing import synthetic_runs


def paired_with_domains(n_docs=24, unit="auto"):
    runs = synthetic_runs({"baseline": [30.0, 30.4, 29.9], "gatedv": [29.5, 29.7, 30.0]}, n_docs=n_docs, rng_seed=2)
    for run in runs:
        run.docs["domain"] = [f"site{i % 3}" for i in range(n_docs)]
    return pair_runs([r for r in runs if r.arm == "baseline"], [r for r in runs if r.arm == "gatedv"], unit=unit)


def test_unit_column_reads_the_pairs_columns_and_names_what_is_missing():
    paired = paired_with_domains()
    assert unit_column(paired, "n_targets") is paired.n_units
    assert list(unit_column(paired, "domain")) == list(paired.doc_columns["domain"])
    with pytest.raises(InputError, match="^by: no document column 'topic' in the loss files "
                                         r"\(available: n_targets, domain, n_bytes\)$"):
        unit_column(paired, "topic")
    per_byte = paired_with_domains(unit="byte")
    with pytest.raises(InputError, match="^by: a per-byte comparison has no n_targets column"):
        unit_column(per_byte, "n_targets")
    with pytest.raises(InputError, match=r"available: domain, n_bytes\)$"):
        unit_column(per_byte, "topic")


def test_analyze_hands_the_pairs_arrays_to_the_statistics():
    paired = paired_with_domains()
    result = analyze(paired, n_resamples=100, rng_seed=3, n_permutations=500, by=("domain", "n_targets"))
    arrays = (paired.baseline, paired.variant, paired.n_units)
    assert result.breakdowns == (
        breakdown(*arrays, "domain", paired.doc_columns["domain"].to_numpy(), n_resamples=100, rng_seed=3),
        breakdown(*arrays, "n_targets", paired.n_units, n_resamples=100, rng_seed=3),
    )
    assert result.seed_level == seed_uncertainty(*arrays, baseline_arm="baseline", variant_arm="gatedv",
                                                 n_resamples=100, rng_seed=3)
    d = (paired.variant - paired.baseline).mean(axis=0)
    assert result.permutation == sign_flip_test(d, paired.n_units, n_permutations=500, rng_seed=3)
    assert result.permutation.n_permutations == 500 and result.permutation.to_dict()["resamples"] == 500
    with pytest.raises(InputError, match="^by: no document column 'topic'"):
        analyze(paired, n_resamples=100, by=("topic",))
    assert np.isfinite(result.seed_level.t_interval.p_value)
