"""Model knobs on the command line: parsing and validation, the naming rules of variants, `gatedv params`
counts of variants of your own against a closed-form count."""

from __future__ import annotations

import json

import pytest

from gatedv_stats.core.errors import InputError
from helpers import invoke
from trainer.model.knobs import KNOBS, KnobError, parse_knob_options, resolve_variant
from trainer.model.transformer import CONFIGS, GATED_FFN_KINDS, VARIANTS


def expected_parameters(size: str, **knobs) -> int:
    """Trainable parameters written out matrix by matrix (docs/method.md §2), tied readout counted once."""
    cfg = CONFIGS[size]
    d, H, L = cfg.d_model, cfg.n_heads, cfg.n_layers
    dh = d // H
    kv, dv = knobs.get("n_kv_heads", H), knobs.get("value_head_dim", dh)
    attention = d * H * dh + d * kv * dh + d * kv * dv + H * dv * d  # W_Q, W_K, W_V, W_O
    attention += {"none": 0, "glu": d * kv * dv, "headwise": d * kv}[knobs.get("value_gate", "none")]
    attention += {"none": 0, "sigmoid": d * H * dv, "softplus": d * H * dv, "headwise": d * H}[
        knobs.get("output_gate", "none")]
    attention += 2 * dh if knobs.get("qk_norm") else 0
    ffn = (3 if knobs.get("ffn", "swiglu") in GATED_FFN_KINDS else 2) * d * knobs.get("d_ff", cfg.d_ff)
    return cfg.vocab_size * d + L * (2 * d + attention + ffn) + d


def _one_line_error(result, message: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stderr == f"error: {message}\n"
    assert "Traceback" not in result.output and result.stdout == ""


def test_knob_values_are_parsed_by_type_in_knob_order():
    knobs = parse_knob_options(["qk_norm=TRUE", "n_kv_heads=2", "d_ff=matched", " key_act = silu", "value_head_dim=16"])
    assert knobs == {"key_act": "silu", "d_ff": "matched", "n_kv_heads": 2, "value_head_dim": 16, "qk_norm": True}
    assert list(knobs) == [name for name in KNOBS if name in knobs]
    assert parse_knob_options(["qk_norm=false", "d_ff=576"]) == {"d_ff": 576, "qk_norm": False}
    assert parse_knob_options([]) == {}


BAD_OPTIONS = [
    (["key_act"], "--knob: 'key_act' is not KNOB=VALUE (gatedv params --knobs lists the knobs)"),
    (["=silu"], "--knob: '=silu' is not KNOB=VALUE (gatedv params --knobs lists the knobs)"),
    (["key_act="], "--knob: 'key_act=' is not KNOB=VALUE (gatedv params --knobs lists the knobs)"),
    (["key_fn=silu"], f"--knob key_fn: unknown knob (knobs: {', '.join(KNOBS)})"),
    (["n_layers=3"], f"--knob n_layers: unknown knob (knobs: {', '.join(KNOBS)})"),
    (["key_act=tanh"], "--knob key_act: 'tanh' is not one of linear, silu"),
    (["output_gate=relu"], "--knob output_gate: 'relu' is not one of none, sigmoid, softplus, headwise"),
    (["n_kv_heads=two"], "--knob n_kv_heads: 'two' is not a positive integer"),
    (["value_head_dim=0"], "--knob value_head_dim: '0' is not a positive integer"),
    (["n_kv_heads=1.5"], "--knob n_kv_heads: '1.5' is not a positive integer"),
    (["d_ff=wide"], "--knob d_ff: 'wide' is not a positive integer or matched"),
    (["d_ff=99999999999999999999"],
     "--knob d_ff: '99999999999999999999' is above the largest allowed value, 281,474,976,710,656"),
    (["qk_norm=yes"], "--knob qk_norm: 'yes' is not true or false"),
    (["key_act=silu", "key_act=linear"], "--knob key_act: given twice"),
]


@pytest.mark.parametrize("options,message", BAD_OPTIONS, ids=[" ".join(o) for o, _ in BAD_OPTIONS])
def test_every_bad_knob_is_one_input_error_naming_it(options, message):
    with pytest.raises(InputError) as caught:
        parse_knob_options(options)
    assert str(caught.value) == message
    _one_line_error(invoke("params", "--config", "small", "--variant", "mine", *[f"--knob={o}" for o in options]),
                    message)


NAMING = [
    ("gatedv", {"key_act": "silu"}, "variant 'gatedv' is a preset and the knobs change it (key_act=silu); name "
     "the new model (a new name is the baseline plus its knobs)"),
    ("baseline", {"n_kv_heads": 1}, "variant 'baseline' is a preset and the knobs change it (n_kv_heads=1); name "
     "the new model (a new name is the baseline plus its knobs)"),
    ("k/silu", {"key_act": "silu"}, "variant 'k/silu': a new name is up to 64 letters, digits, '.', '_' or '-', "
     "starting with a letter or digit, and not 'all'"),
    ("all", {"key_act": "silu"}, "variant 'all': a new name is up to 64 letters, digits, '.', '_' or '-', "
     "starting with a letter or digit, and not 'all'"),
    ("gqa3", {"n_kv_heads": 3}, "n_kv_heads: 3 does not divide the small model's 4 query heads"),
]


@pytest.mark.parametrize("variant,knobs,message", NAMING, ids=[v for v, _, _ in NAMING])
def test_a_changed_preset_or_a_bad_new_name_is_refused(variant, knobs, message):
    with pytest.raises(InputError) as caught:
        resolve_variant("small", variant, knobs)
    assert str(caught.value) == message
    if variant != "all":  # `params --variant all` is every preset (its --knob error: below)
        options = [f"--knob={name}={value}" for name, value in knobs.items()]
        flagged = f"--knob {message}" if isinstance(caught.value, KnobError) else message  # the size's limits
        _one_line_error(invoke("params", "--config", "small", "--variant", variant, *options), flagged)


def test_knobs_that_leave_a_preset_as_it_is_are_dropped_and_a_new_name_needs_one():
    cfg, recorded = resolve_variant("small", "gatedv", {"value_act": "silu", "n_kv_heads": 4, "d_ff": "matched"})
    assert recorded == {} and cfg == resolve_variant("small", "gatedv")[0] and cfg.variant == "gatedv"
    cfg, recorded = resolve_variant("medium", "k-silu", {"key_act": "silu"})
    assert recorded == {"key_act": "silu"} and cfg.variant == "k-silu" and cfg.key_act == "silu"
    assert cfg.d_model == 384 and cfg.value_act == "linear"  # the size's baseline plus the knob
    with pytest.raises(InputError, match=r"^variant: unknown variant 'k-silu' \(presets: baseline, .*a new name "
                       r"needs at least one knob\)$"):
        resolve_variant("small", "k-silu")
    _one_line_error(invoke("params", "--variant", "k-silu"), "--variant: unknown variant 'k-silu' (choose from "
                    f"{', '.join(VARIANTS)}, all; a new name needs at least one --knob)")
    _one_line_error(invoke("params", "--knob", "key_act=silu"),
                    "--knob: needs one --variant name (a new one, or the preset they leave as it is), not all")


CUSTOM = [
    {"key_act": "silu"},
    {"n_kv_heads": 1},
    {"n_kv_heads": 2, "value_act": "silu"},
    {"value_head_dim": 16},
    {"qk_norm": True},
    {"output_gate": "headwise", "output_act": "silu"},
    {"value_gate": "glu", "value_head_dim": 20, "output_gate": "sigmoid"},
    {"ffn": "relu"},
    {"ffn": "geglu", "d_ff": 500},
]


@pytest.mark.parametrize("size", ["small", "medium"])
@pytest.mark.parametrize("knobs", CUSTOM, ids=[",".join(f"{k}={v}" for k, v in c.items()) for c in CUSTOM])
def test_params_counts_a_variant_of_your_own_exactly(size, knobs):
    options = [arg for name, value in knobs.items() for arg in ("--knob", f"{name}={str(value).lower()}")]
    result = invoke("params", "--config", size, "--variant", "mine", *options, "--json")
    assert result.exit_code == 0, result.output
    table = json.loads(result.stdout)[size]
    assert table["parameters"] == {"mine": expected_parameters(size, **knobs)}
    assert table["knobs"] == {"mine": knobs}


@pytest.mark.parametrize("size,baseline,relu", [("small", 2_328_192, 2_328_192 - 6 * 128 * 384),
                                                ("medium", 26_158_464, 26_158_464 - 12 * 384 * 1152)])
def test_matched_ffn_width_keeps_the_baseline_count(size, baseline, relu):
    """d_ff=matched gives an ungated MLP 3/2 of the SwiGLU width: the same parameters, exactly."""
    assert expected_parameters(size) == baseline
    result = invoke("params", "--config", size, "--variant", "gelu-matched", "--knob", "ffn=gelu", "--knob",
                    "d_ff=matched", "--json")
    table = json.loads(result.stdout)[size]
    assert table["parameters"]["gelu-matched"] == baseline
    assert table["knobs"]["gelu-matched"] == {"ffn": "gelu", "d_ff": CONFIGS[size].d_ff * 3 // 2}
    alone = json.loads(invoke("params", "--config", size, "--variant", "relu", "--knob", "ffn=relu", "--json").stdout)
    assert alone[size]["parameters"]["relu"] == relu == expected_parameters(size, ffn="relu")


@pytest.mark.parametrize("variant,knobs", [("o-silu", {"output_act": "silu"}),
                                           ("g1-headwise", {"output_gate": "headwise"}),
                                           ("glu-reduced", {"value_gate": "glu", "value_head_dim": 21})])
def test_preset_counts_agree_with_the_closed_form(variant, knobs):
    table = json.loads(invoke("params", "--config", "small", "--variant", variant, "--json").stdout)["small"]
    assert table["parameters"][variant] == expected_parameters("small", **knobs)
    assert table["knobs"][variant] == knobs


def test_params_table_names_the_knobs_of_a_variant_of_your_own():
    result = invoke("params", "--config", "small", "--variant", "k-silu", "--knob", "key_act=silu")
    assert result.exit_code == 0, result.output
    row = [line for line in result.stdout.splitlines() if "k-silu" in line]
    assert row and row[0].split() == ["k-silu", "(key_act=silu)", "2,328,192"]


def test_params_knobs_lists_every_knob_with_its_allowed_values():
    text = invoke("params", "--knobs")
    assert text.exit_code == 0, text.output
    lines = {line.split()[0]: line for line in text.stdout.splitlines()[1:] if line.split()}
    for name, knob in KNOBS.items():
        assert name in lines and knob.allowed in lines[name], name
    assert "none, sigmoid, softplus, headwise" in lines["output_gate"] and "matched" in lines["d_ff"]
    listing = json.loads(invoke("params", "--knobs", "--json").stdout)
    assert list(listing) == list(KNOBS)
    assert listing["output_act"] == {"allowed": "linear, silu", "baseline": "linear", "help": KNOBS["output_act"].help}
    assert listing["qk_norm"]["baseline"] is False and listing["n_kv_heads"]["allowed"] == "a positive integer"
