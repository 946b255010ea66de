"""`gatedv params`: Table 1 and the exact trainable-parameter counts of docs/method.md §2 (models on the meta
device)."""

from __future__ import annotations

import json

import pytest

from helpers import invoke
from trainer.model.transformer import VARIANTS

EXPECTED_COUNTS = {
    "small": {"baseline": 2_328_192, "g2-headwise": 2_331_264, "glu-full": 2_426_496, "g1-sigmoid": 2_426_496,
              "g1-softplus": 2_426_496, "glu-reduced": 2_325_120, "g1-headwise": 2_331_264},
    "medium": {"baseline": 26_158_464, "g2-headwise": 26_186_112, "glu-reduced": 26_186_112,
               "glu-full": 27_927_936, "g1-sigmoid": 27_927_936, "g1-softplus": 27_927_936, "g1-headwise": 26_186_112},
}
PARAMETER_FREE = ("gatedv", "q-silu", "qkv-silu", "v-tanh", "affine-match", "moment-silu", "o-silu")


@pytest.mark.parametrize("size", ["small", "medium"])
def test_params_json_gives_spec_counts_for_every_variant(size):
    result = invoke("params", "--config", size, "--variant", "all", "--json")
    assert result.exit_code == 0, result.output
    table = json.loads(result.output)[size]
    counts = table["parameters"]
    assert set(counts) == set(VARIANTS)
    for variant, expected in EXPECTED_COUNTS[size].items():
        assert counts[variant] == expected, variant
    for variant in PARAMETER_FREE:
        assert counts[variant] == EXPECTED_COUNTS[size]["baseline"], variant
    setup = {"small": (6, 128, 4, 32, 384), "medium": (12, 384, 6, 64, 1152)}[size]
    assert (table["n_layers"], table["d_model"], table["n_heads"], table["head_dim"], table["d_ff"]) == setup
    assert table["vocab_size"] == 8192 and table["norm_eps"] == 1e-6


def test_params_table_prints_both_sizes():
    result = invoke("params", "--variant", "gatedv")
    assert result.exit_code == 0, result.output
    assert "6 / 128" in result.output and "12 / 384" in result.output
    assert "2,328,192" in result.output and "26,158,464" in result.output


@pytest.mark.parametrize(
    "args,message",
    [(["--config", "large"], "--config: unknown size 'large'"),
     (["--variant", "v-relu"], "--variant: unknown variant")],
)
def test_params_bad_input_is_one_line_error(args, message):
    result = invoke("params", *args)
    assert result.exit_code == 2
    assert f"error: {message}" in result.output
    assert "Traceback" not in result.output
