"""Many arms against a reference: Holm / BH against hand-written step procedures, raw tests against scipy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from gatedv_stats.analysis.arms import compare_arms
from gatedv_stats.core.errors import InputError
from gatedv_stats.io.runfiles import Run
from gatedv_stats.pairing.pair import pair_with_reference
from gatedv_stats.stats import metrics
from gatedv_stats.stats.multiple import adjust_p_values
from gatedv_stats.stats.permutation import sign_flip_test
from gatedv_stats.testing import synthetic_runs


def holm_by_hand(p):
    p = np.asarray(p)
    order = np.argsort(p)
    m = p.size
    adjusted = np.empty(m)
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, (m - rank) * p[index])
        adjusted[index] = min(1.0, running)
    return adjusted


def bh_by_hand(p):
    p = np.asarray(p)
    order = np.argsort(p)[::-1]
    m = p.size
    adjusted = np.empty(m)
    running = 1.0
    for position, index in enumerate(order):
        rank = m - position
        running = min(running, m * p[index] / rank)
        adjusted[index] = running
    return adjusted


@pytest.mark.parametrize("p", [[0.01, 0.04, 0.03, 0.2], [0.001, 0.5, 0.049, 0.012, 0.9, 0.02], [0.3]])
def test_adjustments_match_the_step_procedures(p):
    adjusted = adjust_p_values(p)
    assert adjusted["holm"] == pytest.approx(holm_by_hand(p), rel=1e-12)
    assert adjusted["bh"] == pytest.approx(bh_by_hand(p), rel=1e-12)


@pytest.fixture
def runs():
    return synthetic_runs({"baseline": [30.0, 30.5, 29.8, 30.2], "gatedv": [29.4, 29.9, 29.6, 29.7],
                           "q-silu": [30.4, 30.9, 30.1, 30.3], "v-tanh": [30.1, 30.4, 29.7, 30.3]},
                          n_docs=30, rng_seed=9, seeds=[1, 2, 3, 4])


def test_every_arm_is_tested_against_the_reference_and_adjusted(runs):
    pairs = pair_with_reference(runs, "baseline")
    assert [pair.variant_arm for pair in pairs] == ["gatedv", "q-silu", "v-tanh"]
    result = compare_arms(pairs, n_permutations=2000, rng_seed=1)
    t_raw, perm_raw = [], []
    for pair, row in zip(pairs, result.arms):
        nll_b = metrics.token_nll(pair.baseline, pair.n_units)
        nll_v = metrics.token_nll(pair.variant, pair.n_units)
        assert row.t_p_value == pytest.approx(stats.ttest_rel(nll_v, nll_b).pvalue, rel=1e-10)
        expected_perm = sign_flip_test(metrics.document_differences(pair.baseline, pair.variant), pair.n_units,
                                       n_permutations=2000, rng_seed=1).p_value
        assert row.permutation_p_value == expected_perm
        assert row.delta_p == pytest.approx(np.exp(nll_v).mean() / np.exp(nll_b).mean() - 1, rel=1e-12)
        t_raw.append(row.t_p_value)
        perm_raw.append(row.permutation_p_value)
    assert [row.t_p_holm for row in result.arms] == pytest.approx(holm_by_hand(t_raw))
    assert [row.t_p_bh for row in result.arms] == pytest.approx(bh_by_hand(t_raw))
    assert [row.permutation_p_holm for row in result.arms] == pytest.approx(holm_by_hand(perm_raw))
    assert [row.permutation_p_bh for row in result.arms] == pytest.approx(bh_by_hand(perm_raw))
    assert result.arms[0].improved_pairs == 4 and result.arms[1].improved_pairs == 0
    frame = result.to_frame()
    assert list(frame["arm"]) == ["gatedv", "q-silu", "v-tanh"] and "t_p_holm" in frame
    text = result.summary()
    assert "every arm against baseline (3 comparisons" in text and "4/4" in text and "0/4" in text


def test_one_seed_arms_get_no_t_test_but_keep_the_permutation_family(runs):
    single = [run for run in runs if run.seed == 1]
    result = compare_arms(pair_with_reference(single, "baseline"), n_permutations=500)
    assert all(row.t_p_value is None and row.t_p_holm is None for row in result.arms)
    assert all(0 < row.permutation_p_holm <= 1 for row in result.arms)
    assert any("no seed-level t test" in note for note in result.notes)
    assert "n/a" in result.summary()


def test_reference_errors(runs):
    with pytest.raises(InputError, match="no runs of arm 'lstm'"):
        pair_with_reference(runs, "lstm")
    with pytest.raises(InputError, match="only the reference arm"):
        pair_with_reference([run for run in runs if run.arm == "baseline"], "baseline")


def crossed_runs(rng, eval_set: str, arm: str, delta: float, n_seeds: int = 4, n_docs: int = 60) -> list[Run]:
    """Runs of the reference and one arm whose per-token difference is delta + seed + document + interaction."""
    n_targets = np.full(n_docs, 256)
    baseline = (3.0 + rng.normal(0, 0.3, n_docs)) * n_targets * np.ones((n_seeds, 1))
    y = (delta + rng.normal(0, 0.004, (n_seeds, 1)) + rng.normal(0, 0.02, n_docs)
         + rng.normal(0, 0.05, (n_seeds, n_docs)))
    runs = []
    for side, sums in (("baseline", baseline), (arm, baseline + y * n_targets)):
        for s in range(n_seeds):
            docs = pd.DataFrame({"doc_id": [f"d{i}" for i in range(n_docs)], "n_targets": n_targets,
                                 "loss_sum": sums[s]})
            runs.append(Run(arm=side, seed=s, units=docs, meta={"arm": side, "seed": s, "eval_set": eval_set},
                                source=f"{eval_set}/{side}/{s}", sha256="0" * 64))
    return runs


def test_arms_on_two_evaluation_sets_are_two_families_with_holm_adjusted_verdicts():
    from gatedv_stats.stats.seed_document import seed_document_interval

    rng = np.random.default_rng(12)
    heldout = crossed_runs(rng, "heldout", "better", -0.03) + crossed_runs(rng, "heldout", "same", 0.0)[4:]
    dev = crossed_runs(rng, "dev", "better", -0.03)
    pairs = pair_with_reference(heldout + dev, "baseline")
    assert [(pair.eval_set, pair.variant_arm) for pair in pairs] == [("heldout", "better"), ("heldout", "same"),
                                                                     ("dev", "better")]
    result = compare_arms(pairs, n_permutations=200)
    on_heldout = [arm for arm in result.arms if arm.eval_set == "heldout"]
    raw = [seed_document_interval(pair.baseline, pair.variant, pair.n_units).p_value for pair in pairs[:2]]
    assert [arm.seed_document_p_value for arm in on_heldout] == pytest.approx(raw)
    assert [arm.seed_document_p_holm for arm in on_heldout] == pytest.approx(holm_by_hand(raw))
    on_dev = next(arm for arm in result.arms if arm.eval_set == "dev")
    assert on_dev.seed_document_p_holm == pytest.approx(on_dev.seed_document_p_value)  # a family of one
    for arm in result.arms:
        expected = ("better" if arm.nll_diff_mean < 0 else "worse") if arm.seed_document_p_holm <= 0.05 \
            else "no detectable difference"
        assert arm.verdict == expected
    assert on_heldout[0].verdict == "better" and "held-out set:" in result.summary()
    assert "development set:" in result.summary()


def test_the_arms_table_keeps_its_columns_apart_whatever_the_widths():
    """A long arm name, a five-digit ΔP and tiny p-values widen their columns instead of running into the next."""
    import re

    runs = synthetic_runs({"baseline": [30.0, 30.5, 29.8], "a-long-arm-name-of-thirty-chars": [29.4, 29.9, 29.6],
                           "far-worse": [3e4, 3.1e4, 2.9e4]}, n_docs=30, rng_seed=9, seeds=[1, 2, 3])
    result = compare_arms(pair_with_reference(runs, "baseline"), n_permutations=500)
    lines = result.summary().splitlines()
    header = next(index for index, line in enumerate(lines) if line.startswith("arm "))
    table = lines[header : header + 3]
    cells = [re.split(r"\s{2,}", line.strip()) for line in table]
    assert [len(row) for row in cells] == [14, 14, 14], table
    assert cells[2][0] == "far-worse" and cells[2][3].startswith("+") and cells[2][3].endswith("%")
    pairs_end = table[0].index("pairs") + len("pairs")  # right-aligned: each row's 3 pairs end under the header
    assert [row[pairs_end - 2 : pairs_end] for row in table[1:]] == [" 3", " 3"]


def test_text_table_sizes_columns_to_their_widest_cell():
    from gatedv_stats.core.formatting import text_table

    assert text_table(("a", "b"), [("long cell", "1"), ("x", "12345")], "lr") == [
        "a              b", "long cell      1", "x          12345"]
