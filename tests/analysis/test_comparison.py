"""The assembled comparison: exact keys, agreement with its parts, and its invariances (hypothesis)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gatedv_stats.analysis.compare import compare
from gatedv_stats.io.runfiles import Run
from gatedv_stats.pairing.pair import pair_runs
from gatedv_stats.stats import metrics
from gatedv_stats.stats.resampling import document_bootstrap
from gatedv_stats.testing import synthetic_runs

SETTINGS = settings(max_examples=30, deadline=None)


def runs_from(losses: np.ndarray, n_targets: np.ndarray, arm: str, seeds: list[int]) -> list[Run]:
    doc_ids = [f"doc{i:03d}" for i in range(losses.shape[1])]
    return [Run(arm=arm, seed=seed, meta={"arm": arm, "seed": seed}, source=f"{arm}/{seed}", sha256="0" * 64,
                    units=pd.DataFrame({"doc_id": doc_ids, "n_targets": n_targets, "loss_sum": row}))
            for seed, row in zip(seeds, losses)]


@st.composite
def paired_losses(draw):
    n_seeds = draw(st.integers(1, 4))
    n_docs = draw(st.integers(2, 25))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n_targets = rng.integers(1, 257, size=n_docs)
    baseline = rng.uniform(0.5, 8.0, size=(n_seeds, n_docs)) * n_targets
    variant = baseline * rng.uniform(0.8, 1.2, size=(n_seeds, n_docs))
    return baseline, variant, n_targets, list(range(100, 100 + n_seeds))


def comparison_of(baseline, variant, n_targets, seeds, **kwargs):
    paired = pair_runs(runs_from(baseline, n_targets, "baseline", seeds), runs_from(variant, n_targets, "v", seeds))
    return compare(paired, n_resamples=kwargs.pop("samples", 200), **kwargs)


def test_to_dict_has_exactly_the_issue_keys_and_agrees_with_the_parts():
    runs = synthetic_runs({"baseline": [40.0, 41.0, 39.5], "gatedv": [39.0, 40.2, 39.4]}, n_docs=64, rng_seed=2)
    paired = pair_runs(runs[:3], runs[3:])
    result = compare(paired, n_resamples=500, confidence_level=0.9, rng_seed=8)
    payload = result.to_dict()
    assert list(payload)[:15] == ["baseline", "variant", "delta_p", "improved_pairs", "n_pairs", "nll_diff_mean",
                                  "nll_diff_ci", "ci_level", "ci_method", "bootstrap_samples", "bootstrap_seed", "wins",
                                  "n_docs", "win_rate", "verdict"]
    assert payload["delta_p"] == pytest.approx(np.mean([39.0, 40.2, 39.4]) / np.mean([40.0, 41.0, 39.5]) - 1, rel=1e-12)
    assert payload["improved_pairs"] == 3 and payload["n_pairs"] == 3 and payload["n_docs"] == 64
    d = metrics.document_differences(paired.baseline, paired.variant)
    expected = document_bootstrap(d, paired.n_units, n_resamples=500, confidence_level=0.9, rng_seed=8)
    assert payload["nll_diff_ci"] == list(expected.confidence_interval)
    assert payload["nll_diff_mean"] == pytest.approx(expected.statistic, rel=1e-12)
    assert (payload["ci_level"], payload["ci_method"], payload["bootstrap_samples"], payload["bootstrap_seed"]) == (
        0.9, "percentile", 500, 8)
    assert result.baseline.bits_per_byte is not None  # synthetic runs carry n_bytes
    text = result.summary()
    for fragment in ("gatedv vs baseline", "40.167 ± 0.764", "3/3", "90% interval", "B = 500, seed 8",
                     "baseline seed 0: synthetic[arm=baseline,seed=0]"):
        assert fragment in text, fragment


@SETTINGS
@given(paired_losses(), st.randoms(use_true_random=False))
def test_document_and_file_order_do_not_matter(data, shuffler):
    baseline, variant, n_targets, seeds = data
    reference = comparison_of(baseline, variant, n_targets, seeds).to_dict()
    base_runs = runs_from(baseline, n_targets, "baseline", seeds)
    var_runs = runs_from(variant, n_targets, "v", seeds)
    shuffled = []
    for runs in (base_runs, var_runs):
        runs = [Run(run.arm, run.seed, run.docs.sample(frac=1.0, random_state=shuffler.randrange(10**6)),
                        run.meta, run.source, run.sha256) for run in runs]
        shuffler.shuffle(runs)
        shuffled.append(runs)
    assert compare(pair_runs(*shuffled), n_resamples=200).to_dict() == reference


@SETTINGS
@given(paired_losses())
def test_identical_arms_give_no_difference(data):
    baseline, _, n_targets, seeds = data
    result = comparison_of(baseline, baseline.copy(), n_targets, seeds).to_dict()
    assert result["delta_p"] == 0.0 and result["wins"] == 0 and result["improved_pairs"] == 0
    low, high = result["nll_diff_ci"]
    assert low <= 0.0 <= high


@SETTINGS
@given(paired_losses())
def test_swapping_the_arms_inverts_the_ratio(data):
    baseline, variant, n_targets, seeds = data
    forward = comparison_of(baseline, variant, n_targets, seeds).to_dict()
    backward = comparison_of(variant, baseline, n_targets, seeds).to_dict()
    assert backward["delta_p"] == pytest.approx(1.0 / (1.0 + forward["delta_p"]) - 1.0, rel=1e-9, abs=1e-12)
    assert backward["nll_diff_mean"] == pytest.approx(-forward["nll_diff_mean"], rel=1e-9, abs=1e-12)
    low, high = forward["nll_diff_ci"]
    assert backward["nll_diff_ci"] == pytest.approx([-high, -low], rel=1e-9, abs=1e-12)  # same resamples, negated
