"""Pairing runs by seed and documents by doc_id."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gatedv_stats.core.errors import InputError
from gatedv_stats.io.runfiles import Run
from gatedv_stats.pairing.pair import pair_runs


def make_run(arm: str, seed: int, n_docs: int = 8, *, order_seed: int = 0, n_bytes: bool = False) -> Run:
    rng = np.random.default_rng(1000 * seed + len(arm))
    docs = pd.DataFrame({"doc_id": [f"doc{i:02d}" for i in range(n_docs)],
                         "n_targets": np.arange(n_docs, dtype=np.int64) + 100,
                         "loss_sum": rng.uniform(100.0, 500.0, n_docs)})
    if n_bytes:
        docs["n_bytes"] = np.arange(n_docs, dtype=np.int64) * 3 + 400
    docs = docs.sample(frac=1.0, random_state=order_seed).reset_index(drop=True)
    return Run(arm=arm, seed=seed, units=docs, meta={"arm": arm, "seed": seed}, source=f"{arm}-{seed}",
                   sha256=f"sha-{arm}-{seed}")


def test_arrays_follow_sorted_seeds_and_doc_ids_whatever_the_input_order():
    baseline = [make_run("baseline", seed, order_seed=seed) for seed in (5, 2, 9)]
    variant = [make_run("gatedv", seed, order_seed=seed + 1, n_bytes=True) for seed in (9, 5, 2)]
    paired = pair_runs(baseline, variant)
    assert paired.seeds.tolist() == [2, 5, 9] and paired.doc_ids.tolist() == sorted(paired.doc_ids)
    assert paired.sources["baseline"] == ["baseline-2", "baseline-5", "baseline-9"]
    assert paired.sources["variant_sha256"] == ["sha-gatedv-2", "sha-gatedv-5", "sha-gatedv-9"]
    for side, runs in (("baseline", baseline), ("variant", variant)):
        matrix = getattr(paired, side)
        for run in runs:
            row = paired.seeds.tolist().index(run.seed)
            for _, doc in run.docs.iterrows():  # brute force: every value lands in its (seed, doc) cell
                column = paired.doc_ids.tolist().index(doc["doc_id"])
                assert matrix[row, column] == doc["loss_sum"]
                assert paired.n_units[column] == doc["n_targets"]
    assert paired.baseline.dtype == np.float64 and paired.n_units.dtype == np.int64
    assert paired.doc_columns["n_bytes"].tolist() == [i * 3 + 400 for i in range(8)]  # from the runs that carry it
    assert paired.dropped_seeds == ()


def test_unpaired_seeds_are_an_error_unless_allowed():
    baseline = [make_run("baseline", seed) for seed in (1, 2, 3)]
    variant = [make_run("gatedv", seed) for seed in (2, 3, 4)]
    with pytest.raises(InputError, match="seeds present in one arm only: baseline 1; gatedv 4"):
        pair_runs(baseline, variant)
    paired = pair_runs(baseline, variant, allow_unpaired=True)
    assert paired.seeds.tolist() == [2, 3] and paired.dropped_seeds == (1, 4)
    for allowed in (False, True):  # dropping unpaired seeds would leave nothing: the error says how runs pair
        with pytest.raises(InputError) as caught:
            pair_runs(baseline[:1], variant[2:], allow_unpaired=allowed)
        assert str(caught.value) == ("no training seed is shared by baseline (1) and gatedv (4): runs pair by the "
                                     "seed recorded in their files (evaluate --hf and import take it as --seed)")


def test_duplicate_seeds_and_mixed_arms_are_errors():
    with pytest.raises(InputError, match="arm baseline seed 1 appears twice: baseline-1 and baseline-1"):
        pair_runs([make_run("baseline", 1), make_run("baseline", 1)], [make_run("gatedv", 1)])
    with pytest.raises(InputError, match=r"the variant runs hold several arms \(gatedv, q-silu\)"):
        pair_runs([make_run("baseline", 1)], [make_run("gatedv", 1), make_run("q-silu", 2)])
    with pytest.raises(InputError, match="no baseline runs given"):
        pair_runs([], [make_run("gatedv", 1)])


def test_an_arm_evaluated_on_several_sets_asks_for_eval_set_and_different_sets_for_allow_mismatch():
    def on(eval_set: str, run: Run) -> Run:
        return Run(arm=run.arm, seed=run.seed, units=run.docs, meta={**run.meta, "eval_set": eval_set},
                       source=f"{run.source}-{eval_set}", sha256=run.sha256)

    baseline = [on(eval_set, make_run("baseline", seed)) for seed in (1, 2) for eval_set in ("dev", "heldout")]
    variant = [on(eval_set, make_run("gatedv", seed)) for seed in (1, 2) for eval_set in ("dev", "heldout")]
    with pytest.raises(InputError, match=r"several evaluation sets: choose one with eval_set \(dev, heldout\)$"):
        pair_runs(baseline, variant)
    apart = ([on("dev", make_run("baseline", seed)) for seed in (1, 2)],
             [on("heldout", make_run("gatedv", seed)) for seed in (1, 2)])
    with pytest.raises(InputError, match=r"not evaluated alike \(allow_mismatch eval_set compares them anyway\)$"):
        pair_runs(*apart)
    assert pair_runs(*apart, allow_mismatch=("eval_set",)).n_pairs == 2


def test_documents_and_per_document_columns_must_agree():
    short = make_run("gatedv", 1, n_docs=6)
    with pytest.raises(InputError, match=r"2 doc_ids missing from gatedv-1 \(first: doc06, doc07\)"):
        pair_runs([make_run("baseline", 1)], [short])
    with_bytes = make_run("baseline", 1, n_bytes=True)
    other_bytes = make_run("gatedv", 1, n_bytes=True)
    other_bytes.docs.loc[other_bytes.docs["doc_id"] == "doc03", "n_bytes"] = 1
    with pytest.raises(InputError, match="n_bytes disagrees for 1 documents between baseline-1 and gatedv-1"):
        pair_runs([with_bytes], [other_bytes])
    paired = pair_runs([with_bytes], [make_run("gatedv", 1, n_bytes=True)])
    assert paired.doc_columns["n_bytes"].tolist() == [i * 3 + 400 for i in range(8)]
