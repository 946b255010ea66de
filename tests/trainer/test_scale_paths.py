"""The faster paths for big studies against what they replace: the sign-flip test's packed sign bits, the two-level
bootstrap's document draws, worker processes for a report's pairs, pairing without re-indexing, the forest plot's
cap, and arms in natural order.

Where a path draws a new random stream (the Monte Carlo sign vectors, the two-level bootstrap's documents), it is
checked to compute the same statistic on its own draws (a brute-force loop) and to agree with the previous method
within Monte Carlo error; everything else must be identical.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from scipy.special import ndtri

from gatedv_stats.analysis import experiment
from gatedv_stats.analysis.experiment import AnalysisSettings, analyze_experiment
from gatedv_stats.io.discovery import ExperimentInputs
from gatedv_stats.pairing.pair import pair_runs, pair_with_reference
from gatedv_stats.pairing.selection import arm_order, natural_key, other_arms
from gatedv_stats.reporting import plots
from gatedv_stats.reporting.sections.reviewer import reviewer_section
from gatedv_stats.stats import permutation, resampling
from gatedv_stats.stats.permutation import sign_flip_test
from gatedv_stats.stats.seed_level import two_level_bootstrap
from gatedv_stats.testing import synthetic_runs

Z = 4.5  # Monte Carlo tolerances in standard errors: a false alarm has probability below 1e-5


# --- the sign-flip test ---

def brute_force_null_sums(d: np.ndarray, n_vectors: int, seed: int) -> np.ndarray:
    """Σ ε_i d_i written out: vector r is the bits of its raw generator words, bit i flips document i."""
    words = -(-d.size // 64)
    raw = np.random.default_rng(seed).bit_generator.random_raw(n_vectors * words).astype("<u8")
    bits = np.unpackbits(raw.view(np.uint8).reshape(n_vectors, 8 * words), axis=1, bitorder="little")[:, :d.size]
    return (1.0 - 2.0 * bits) @ d


@pytest.mark.parametrize("n_docs", [21, 64, 1000, 5003])
@pytest.mark.parametrize("small_segments", [False, True])
def test_packed_sign_vectors_give_the_brute_force_sums(monkeypatch, n_docs, small_segments):
    if small_segments:  # many segments, tables rebuilt for every chunk, chunks of 3 vectors
        monkeypatch.setattr(permutation, "_SEGMENT_GROUPS", 7)
        monkeypatch.setattr(permutation, "_KEPT_TABLE_ENTRIES", 0)
        monkeypatch.setattr(permutation, "_CHUNK_LOOKUPS", 21)
    d = np.random.default_rng(n_docs).normal(-0.3, 5.0, n_docs)
    ours = np.concatenate(list(permutation._flipped_sums(d, 50, rng_seed=9, progress=False)))
    assert ours.shape == (50,)
    np.testing.assert_allclose(ours, brute_force_null_sums(d, 50, seed=9), rtol=0, atol=1e-9 * np.abs(d).sum())


def test_the_chunking_does_not_change_the_p_value(monkeypatch):
    rng = np.random.default_rng(3)
    d, n = rng.normal(-0.05, 1.0, 3000), rng.integers(64, 257, 3000)
    first = sign_flip_test(d, n, n_permutations=3000, rng_seed=5)
    monkeypatch.setattr(permutation, "_CHUNK_LOOKUPS", 1000)
    monkeypatch.setattr(permutation, "_SEGMENT_GROUPS", 50)
    assert sign_flip_test(d, n, n_permutations=3000, rng_seed=5) == first


def previous_sign_flip_p(d: np.ndarray, n: np.ndarray, n_permutations: int, seed: int) -> float:
    """The previous Monte Carlo test: ±1 signs from bounded integer draws, one matrix product per chunk."""
    rng = np.random.default_rng(seed)
    observed, tolerance = d.sum() / n.sum(), 1e-10 * np.abs(d).sum() / n.sum()
    extreme = 0
    for start in range(0, n_permutations, 500):
        signs = 1.0 - 2.0 * rng.integers(0, 2, size=(min(500, n_permutations - start), d.size))
        extreme += int(np.sum(np.abs(signs @ d / n.sum()) >= abs(observed) - tolerance))
    return (extreme + 1) / (n_permutations + 1)


@pytest.mark.parametrize("shift", [0.0, 0.02, 0.04])
def test_sign_flip_p_agrees_with_the_previous_method(shift):
    rng = np.random.default_rng(17)
    n = rng.integers(64, 257, 2000).astype(float)
    d = (rng.normal(0.0, 1.0, 2000) + shift) * np.sqrt(n)
    ours = sign_flip_test(d, n, n_permutations=20_000, rng_seed=1).p_value
    previous = previous_sign_flip_p(d, n, 20_000, seed=2)
    p = max((ours + previous) / 2, 1e-4)
    assert abs(ours - previous) < Z * math.sqrt(2 * p * (1 - p) / 20_000)
    assert sign_flip_test(d, n, n_permutations=20_000, rng_seed=1).p_value == ours  # seeded


# --- the two-level bootstrap's document draws ---

def test_table_sums_use_the_document_bootstraps_draws():
    """The same generator state gives the same resamples: Σ d and Σ n from the counts equal the gathered sums."""
    rng = np.random.default_rng(4)
    count = 70_000  # two full blocks and the binary digits of the rest
    d, n = rng.normal(0.0, 1.0, count), rng.integers(64, 257, count).astype(float)
    blocks = resampling._document_blocks(count)
    buffers = np.empty(6 * count, dtype=np.intp), np.empty(6 * count, dtype=complex)
    gathered = resampling._resample_sums(np.random.default_rng(8), d + 1j * n, blocks, 6, buffers)
    counted = resampling._resample_table_sums(np.random.default_rng(8), np.column_stack([d, n]), blocks, 6,
                                              np.empty(6 * resampling._BLOCK_SIZE))
    np.testing.assert_allclose(counted[:, 0], gathered.real, rtol=1e-10, atol=1e-9)
    np.testing.assert_array_equal(counted[:, 1], gathered.imag)  # integer sums: exact


def test_resampled_sums_do_not_depend_on_the_thread_count(monkeypatch):
    table = np.random.default_rng(2).normal(size=(40_000, 3))
    monkeypatch.setattr(resampling, "_THREADED_DRAWS", 0)
    threaded = resampling.resampled_sums(table, n_resamples=300, rng_seed=7)
    monkeypatch.setattr(resampling, "_thread_count", lambda: 1)
    np.testing.assert_array_equal(resampling.resampled_sums(table, n_resamples=300, rng_seed=7), threaded)
    counts = resampling.resampled_sums(np.eye(50), n_resamples=200, rng_seed=7)
    assert np.all(counts.sum(axis=1) == 50)  # every resample draws N documents


def previous_two_level_distribution(baseline, variant, n, n_resamples, seed) -> np.ndarray:
    """The previous draws: seed pairs and documents both from one default_rng(seed), documents as a multinomial."""
    n_seeds, n_docs = baseline.shape
    rng = np.random.default_rng(seed)
    estimates = []
    for start in range(0, n_resamples, 100):
        size = min(100, n_resamples - start)
        seed_counts = rng.multinomial(n_seeds, np.full(n_seeds, 1.0 / n_seeds), size=size)
        doc_counts = rng.multinomial(n_docs, np.full(n_docs, 1.0 / n_docs), size=size).astype(float)
        tokens = doc_counts @ n
        ppl_baseline = np.exp((doc_counts @ baseline.T) / tokens[:, None])
        ppl_variant = np.exp((doc_counts @ variant.T) / tokens[:, None])
        estimates.append((seed_counts * ppl_variant).sum(axis=1) / (seed_counts * ppl_baseline).sum(axis=1) - 1)
    return np.concatenate(estimates)


def test_two_level_bootstrap_agrees_with_the_previous_draws():
    rng = np.random.default_rng(21)
    n_seeds, n_docs, samples = 8, 600, 4000
    n = rng.integers(64, 257, n_docs).astype(float)
    difficulty = rng.normal(3.0, 0.3, n_docs)
    baseline = n * (difficulty + rng.normal(0, 0.01, (n_seeds, 1)) + rng.normal(0, 0.05, (n_seeds, n_docs)))
    variant = n * (difficulty - 0.01 + rng.normal(0, 0.01, (n_seeds, 1)) + rng.normal(0, 0.05, (n_seeds, n_docs)))
    previous = previous_two_level_distribution(baseline, variant, n, samples, seed=3)
    ours = two_level_bootstrap(baseline, variant, n, n_resamples=samples, rng_seed=4)
    sd = previous.std(ddof=1)
    levels = np.array([0.025, 0.975])
    quantile_se = np.sqrt(levels * (1 - levels) / samples) / stats.norm.pdf(ndtri(levels)) * sd
    difference = np.abs(np.subtract(ours.confidence_interval, np.quantile(previous, levels)))
    assert np.all(difference < Z * np.sqrt(2) * quantile_se), difference / quantile_se
    assert ours == two_level_bootstrap(baseline, variant, n, n_resamples=samples, rng_seed=4)


# --- worker processes, pairing, forest cap, natural order ---

def experiment_inputs(n_docs: int, domains: int, arms: dict) -> ExperimentInputs:
    runs = synthetic_runs(arms, n_docs=n_docs, rng_seed=5)
    labels = [f"domain-{k % domains:03d}" for k in range(n_docs)]
    for run in runs:
        run.docs["domain"] = labels
        run.meta["eval_set"] = "heldout"
    return ExperimentInputs(runs=tuple(runs), curves=pd.DataFrame(columns=["arm", "seed", "lr", "step", "dev_nll"]),
                            run_infos=(), bench=(), files=())


@pytest.mark.slow
def test_pairs_analyzed_on_worker_processes_are_identical(monkeypatch):
    inputs = experiment_inputs(300, 6, {"baseline": [30.0, 30.4, 29.9], "v2": [29.5, 29.7, 30.0],
                                        "v10": [30.1, 30.6, 30.2]})
    settings = AnalysisSettings(n_resamples=300, rng_seed=3)
    here = analyze_experiment(inputs, settings, workers=1)
    monkeypatch.setattr(experiment, "PARALLEL_MIN_LOSS_SUMS", 0)
    with np.errstate(over="raise"):  # the workers run under the caller's floating-point settings
        elsewhere = analyze_experiment(inputs, settings, workers=2)
    assert [pair.variant for pair in here.groups[0].pairs] == ["v2", "v10"]
    for ours, theirs in zip(here.groups[0].pairs, elsewhere.groups[0].pairs):
        assert ours.analysis.to_dict() == theirs.analysis.to_dict()
        np.testing.assert_array_equal(ours.analysis.comparison.bootstrap.bootstrap_distribution,
                                      theirs.analysis.comparison.bootstrap.bootstrap_distribution)


def test_pairing_does_not_depend_on_the_row_order():
    runs = synthetic_runs({"baseline": [30.0, 30.4], "v1": [29.5, 29.7]}, n_docs=200, rng_seed=2)
    shuffled = [run.__class__(**{**run.__dict__, "units": run.docs.sample(frac=1.0, random_state=run.seed + 7)})
                for run in runs]
    ours = pair_runs([run for run in runs if run.arm == "baseline"], [run for run in runs if run.arm == "v1"])
    theirs = pair_runs([run for run in shuffled if run.arm == "baseline"],
                       [run for run in shuffled if run.arm == "v1"])
    assert list(ours.doc_ids) == sorted(runs[0].docs["doc_id"])
    for name in ("doc_ids", "n_units", "baseline", "variant"):
        np.testing.assert_array_equal(getattr(ours, name), getattr(theirs, name))
    pd.testing.assert_frame_equal(ours.doc_columns, theirs.doc_columns)


def test_a_forest_of_many_groups_shows_the_largest_and_says_so():
    inputs = experiment_inputs(500, 50, {"baseline": [30.0, 30.4], "v1": [29.5, 29.7]})
    analysis = analyze_experiment(inputs, AnalysisSettings(n_resamples=100))
    section = reviewer_section(analysis)
    figure = section.figures[0]
    assert f"its {plots.FOREST_MAX_GROUPS} with the most documents are shown (40 of 50 groups" in figure.caption
    shown = [item for item in figure.spec["datasets"].values() if item and "group" in item[0]]
    assert len(shown) == 1 and len(shown[0]) == plots.FOREST_MAX_GROUPS
    frame = pd.DataFrame({"comparison": ["a"] * 5 + ["b"] * 2, "group": list("pqrstuv"),
                          "n_docs": [3, 9, 1, 9, 5, 1, 2]})
    assert list(plots.largest_groups(frame, limit=3)["group"]) == ["q", "s", "t", "u", "v"]  # ties: the first


def test_arms_are_listed_in_natural_order():
    arms = ["v10", "baseline", "v2", "v1", "gatedv", "v11", "x9b10", "x9b2"]
    assert other_arms(arms, "baseline") == ["gatedv", "v1", "v2", "v10", "v11", "x9b2", "x9b10"]
    assert arm_order(arms, "v2")[:3] == ["v2", "gatedv", "baseline"]
    assert sorted(["seed-10", "seed-9", "seed-09"], key=natural_key) == ["seed-09", "seed-9", "seed-10"]
    runs = synthetic_runs({arm: [30.0, 30.2] for arm in ("baseline", "v10", "v2", "v1")}, n_docs=30, rng_seed=1)
    assert [pair.variant_arm for pair in pair_with_reference(runs, "baseline")] == ["v1", "v2", "v10"]


@pytest.mark.slow
def test_workers_that_cannot_start_leave_the_analysis_to_this_process(monkeypatch):
    inputs = experiment_inputs(200, 4, {"baseline": [30.0, 30.4], "v1": [29.5, 29.7], "v2": [30.1, 30.6]})
    settings = AnalysisSettings(n_resamples=100)
    here = analyze_experiment(inputs, settings)

    def broken(*args):
        raise experiment.BrokenProcessPool("a worker died")

    monkeypatch.setattr(experiment, "PARALLEL_MIN_LOSS_SUMS", 0)
    monkeypatch.setattr(experiment, "spawn_pool", broken)
    with pytest.warns(UserWarning, match="a worker died.*analyzing them here"):
        fallback = analyze_experiment(inputs, settings, workers=2)
    assert [pair.analysis.to_dict() for pair in fallback.groups[0].pairs] == \
        [pair.analysis.to_dict() for pair in here.groups[0].pairs]

