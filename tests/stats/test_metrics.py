"""Every metric of docs/method-statistics.md §5 against a brute-force loop over the same inputs."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from gatedv_stats.stats import metrics


@pytest.fixture
def losses():
    rng = np.random.default_rng(7)
    n_targets = rng.integers(1, 300, size=50)
    baseline = rng.uniform(0.5, 6.0, size=(4, 50)) * n_targets
    variant = baseline * rng.uniform(0.9, 1.08, size=(4, 50))
    n_bytes = rng.integers(1, 2000, size=50)
    return baseline, variant, n_targets, n_bytes


def loop_nll(row, n_targets):
    total_loss = 0.0
    total_targets = 0
    for loss, count in zip(row, n_targets):
        total_loss += float(loss)
        total_targets += int(count)
    return total_loss / total_targets


def test_arm_summary_matches_a_loop(losses):
    baseline, _, n_targets, n_bytes = losses
    summary = metrics.arm_summary("baseline", [3, 4, 5, 6], baseline, n_targets, n_bytes)
    nll = [loop_nll(row, n_targets) for row in baseline]
    ppl = [math.exp(value) for value in nll]
    assert summary.nll == pytest.approx(nll, rel=1e-13)
    assert summary.ppl == pytest.approx(ppl, rel=1e-13)
    assert summary.ppl_mean == pytest.approx(statistics.fmean(ppl), rel=1e-13)
    # the mean of the PPLs, not exp(mean NLL)
    assert summary.ppl_mean != pytest.approx(math.exp(statistics.fmean(nll)), rel=1e-9)
    assert summary.ppl_sd == pytest.approx(statistics.stdev(ppl), rel=1e-11)
    bpb = [sum(row) / (math.log(2) * sum(int(b) for b in n_bytes)) for row in baseline]
    assert summary.bits_per_byte == pytest.approx(bpb, rel=1e-13)
    assert summary.notes == () and summary.n_seeds == 4
    assert summary.to_dict()["seeds"] == [3, 4, 5, 6] and set(summary.to_dict()) == {
        "arm", "seeds", "nll", "ppl", "ppl_mean", "ppl_sd"}


def test_one_seed_leaves_the_sd_undefined(losses):
    baseline, _, n_targets, _ = losses
    summary = metrics.arm_summary("baseline", [1], baseline[:1], n_targets)
    assert math.isnan(summary.ppl_sd) and summary.to_dict()["ppl_sd"] is None
    assert summary.notes == (metrics.ONE_SEED_NOTE,) and summary.bits_per_byte is None


def test_paired_metrics_match_loops(losses):
    baseline, variant, n_targets, _ = losses
    base = metrics.arm_summary("b", range(4), baseline, n_targets)
    var = metrics.arm_summary("v", range(4), variant, n_targets)
    assert metrics.delta_p(base.ppl_mean, var.ppl_mean) == pytest.approx(
        statistics.fmean(var.ppl) / statistics.fmean(base.ppl) - 1, rel=1e-12)
    assert metrics.improved_pairs(base.ppl, var.ppl) == sum(v < b for v, b in zip(var.ppl, base.ppl))
    d_loop = [statistics.fmean(variant[s, i] - baseline[s, i] for s in range(4)) for i in range(50)]
    d = metrics.document_differences(baseline, variant)
    assert d == pytest.approx(d_loop, rel=1e-12, abs=1e-12)
    D = metrics.nll_diff_mean(base.nll, var.nll)
    assert D == pytest.approx(statistics.fmean(v - b for v, b in zip(var.nll, base.nll)), rel=1e-12)
    assert D == pytest.approx(sum(d_loop) / sum(int(n) for n in n_targets), rel=1e-10)  # Σ d_i / Σ n_i = D
    wins = sum(statistics.fmean(variant[:, i]) / n_targets[i] < statistics.fmean(baseline[:, i]) / n_targets[i]
               for i in range(50))
    result = metrics.document_wins(baseline, variant, n_targets)
    assert (result.wins, result.n_docs, result.win_rate) == (wins, 50, wins / 50)
    assert 0 < wins < 50


def test_ties_are_neither_wins_nor_improvements(losses):
    baseline, _, n_targets, _ = losses
    assert metrics.document_wins(baseline, baseline.copy(), n_targets).wins == 0
    ppl = metrics.perplexity(metrics.token_nll(baseline, n_targets))
    assert metrics.improved_pairs(ppl, ppl.copy()) == 0
    assert metrics.sample_sd(np.array([2.0])) != metrics.sample_sd(np.array([2.0]))  # NaN
