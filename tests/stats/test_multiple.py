"""Holm and Benjamini–Hochberg adjusted p-values: equal to statsmodels' to the bit, ties, ones and empty families
included."""

from __future__ import annotations

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from gatedv_stats.stats.multiple import adjust_p_values, holm


@pytest.mark.parametrize("m", [1, 2, 3, 7, 50])
def test_holm_and_bh_equal_statsmodels_bit_for_bit(m):
    rng = np.random.default_rng(m)
    for draw in range(40):
        p = rng.uniform(0.0, 1.0, m) ** rng.uniform(0.5, 4.0)
        if draw % 4 == 0:  # ties and exact ones
            p[: m // 2] = p[0]
            p[-1] = 1.0
        ours = adjust_p_values(p)
        assert ours["holm"] == list(multipletests(p, method="holm")[1])
        assert ours["bh"] == list(multipletests(p, method="fdr_bh")[1])


def test_a_missing_test_takes_no_share_of_the_family():
    assert holm([0.01, None, 0.04]) == pytest.approx([0.02, None, 0.04])
    assert holm([None, None]) == [None, None] and adjust_p_values([]) == {"holm": [], "bh": []}
