"""The downstream-task interval on simulated 0/1 outcomes with a known difference (bench/task_calibration.py runs
the full grid): loose bounds that still fail on a miscalibrated interval."""

from __future__ import annotations

import numpy as np
import pytest

from gatedv_stats.testing import ItemScoreModel, item_calibration, simulate_item_scores

STUDIES = 400


@pytest.mark.parametrize(("model", "n_seeds", "subtasks"), [
    (ItemScoreModel(), 3, None),
    (ItemScoreModel(seed_sd=0.2, item_effect_sd=0.5), 5, None),
    (ItemScoreModel(item_effect_sd=0.3, subtask_sd=0.5, subtask_effect_sd=0.3), 3, np.arange(200) // 20),
])
def test_the_interval_covers_a_zero_difference_and_rarely_gives_a_false_verdict(model, n_seeds, subtasks):
    result = item_calibration(model, n_seeds, 200, np.random.default_rng(n_seeds), n_studies=STUDIES,
                              subtasks=subtasks)
    assert result.truth == 0.0
    assert 0.90 <= result.coverage <= 0.99
    assert result.better_rate + result.worse_rate <= 0.10


def test_a_real_difference_is_found_and_covered():
    result = item_calibration(ItemScoreModel(delta=0.4), 5, 1000, np.random.default_rng(9), n_studies=STUDIES)
    assert 0.05 < result.truth < 0.1  # about 7 points
    assert result.better_rate > 0.8 and result.worse_rate == 0.0
    assert 0.90 <= result.coverage <= 0.99


def test_null_scores_have_the_same_accuracy_in_both_arms():
    baseline, variant = simulate_item_scores(ItemScoreModel(item_effect_sd=0.5), 3, 500, np.random.default_rng(1),
                                             n_studies=40)
    assert set(np.unique(baseline)) == {0.0, 1.0}
    assert abs(variant.mean() - baseline.mean()) < 0.01 and abs(baseline.mean() - 0.5) < 0.02
