"""The paper's printed numbers (docs/method.md §8) follow from its published means through our arithmetic and
formats."""

from __future__ import annotations

import numpy as np
import pytest

from gatedv_stats.analysis.compare import compare
from gatedv_stats.core import formatting as fmt
from gatedv_stats.pairing.pair import pair_runs
from gatedv_stats.stats.metrics import delta_p
from gatedv_stats.testing import ppls_with_moments, synthetic_runs


@pytest.mark.parametrize(("baseline", "variant", "printed"), [
    (59.118, 57.916, "\u22122.03%"),  # Table 3 small
    (20.233, 19.748, "\u22122.40%"),  # Table 3 medium
    (58.580, 59.522, "+1.61%"),  # Table 4 q-silu
    (58.580, 58.039, "\u22120.92%"),  # Table 4 gatedv
    (58.580, 58.458, "\u22120.21%"),  # Table 4 qkv-silu
    (56.441, 55.269, "\u22122.08%"),  # Table 4 LR study, 0.0012
    (56.180, 54.450, "\u22123.08%"),  # 0.0024
    (58.770, 57.384, "\u22122.36%"),  # 0.0048
    (65.168, 64.063, "\u22121.70%"),  # 0.0096
])
def test_delta_p_from_published_means(baseline, variant, printed):
    assert fmt.format_delta_p(delta_p(baseline, variant)) == printed


# Table 5: each control against the baseline and GatedV of the Table 4 LR study at the same rate.
@pytest.mark.parametrize(("control", "baseline", "gatedv", "vs_baseline", "vs_gatedv"), [
    (55.551, 56.180, 54.450, "\u22121.12%", "+2.02%"),  # affine-match, 0.0024
    (55.983, 56.180, 54.450, "\u22120.35%", "+2.82%"),  # moment-silu, 0.0024
    (58.920, 58.770, 57.384, "+0.26%", "+2.68%"),  # affine-match, 0.0048
    (58.399, 58.770, 57.384, "\u22120.63%", "+1.77%"),  # moment-silu, 0.0048
])
def test_table5_columns(control, baseline, gatedv, vs_baseline, vs_gatedv):
    assert fmt.format_delta_p(delta_p(baseline, control)) == vs_baseline
    assert fmt.format_delta_p(delta_p(gatedv, control)) == vs_gatedv


@pytest.mark.parametrize(("seeds", "baseline", "variant", "printed"), [
    (5, (59.118, 0.530), (57.916, 0.782), ("59.118 ± 0.530", "57.916 ± 0.782", "\u22122.03%", "5/5")),
    (3, (20.233, 0.068), (19.748, 0.047), ("20.233 ± 0.068", "19.748 ± 0.047", "\u22122.40%", "3/3")),
])
def test_table3_rows_from_loss_sums(seeds, baseline, variant, printed):
    """Per-document loss sums built to the paper's per-seed moments give the printed Table 3 row."""
    runs = synthetic_runs({"baseline": ppls_with_moments(*baseline, seeds),
                           "gatedv": ppls_with_moments(*variant, seeds)}, n_docs=256, rng_seed=seeds)
    result = compare(pair_runs(runs[:seeds], runs[seeds:]), n_resamples=200)
    row = (fmt.format_ppl(result.baseline.ppl_mean, result.baseline.ppl_sd),
           fmt.format_ppl(result.variant.ppl_mean, result.variant.ppl_sd),
           fmt.format_delta_p(result.delta_p), fmt.format_pairs(result.improved_pairs, result.n_pairs))
    assert row == printed
    # D is the mean over seeds of log(P_variant / P_baseline).
    expected_d = np.mean(np.log(result.variant.ppl) - np.log(result.baseline.ppl))
    assert result.estimate == pytest.approx(expected_d, rel=1e-10)


def test_other_printed_formats():
    assert fmt.format_nll_diff(-0.020591) == "\u22120.020591"
    assert fmt.format_interval(-0.021869, -0.019356) == "[\u22120.021869, \u22120.019356]"
    assert fmt.format_interval(-0.025507, -0.023153) == "[\u22120.025507, \u22120.023153]"
    assert fmt.format_count(1672) + " of " + fmt.format_count(2048) == "1,672 of 2,048"
    assert fmt.format_percent(1672 / 2048) == "81.6%"
    assert fmt.format_ppl(102.565, 31.053) == "102.565 ± 31.053"  # Table 9
    assert fmt.format_ppl(4300.232, 899.037) == "4,300.232 ± 899.037"
    assert fmt.format_ppl(59.118, float("nan")) == "59.118"
    assert fmt.format_pairs(0, 3) == "0/3"
    assert fmt.format_delta_p(-0.00001) == "+0.00%" and fmt.format_delta_p(0.0161) == "+1.61%"


def test_moments_builder_is_exact():
    values = ppls_with_moments(58.580, 0.557, 3)
    assert (np.mean(values) == pytest.approx(58.580, abs=1e-12)
            and np.std(values, ddof=1) == pytest.approx(0.557, abs=1e-12))
    assert ppls_with_moments(20.0, 1.0, 1) == [20.0]
