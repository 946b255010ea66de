"""Sizes of one's own: `--size-knob` on params, train and sweep, `[sizes.NAME]` tables, per-size recipe defaults."""

from __future__ import annotations

import json

import pytest

from gatedv_stats.core.errors import InputError, ParameterError
from helpers import assert_input_error, invoke
from trainer.grid.experiment import experiment_toml, load_experiment
from trainer.model.knobs import resolve_variant
from trainer.model.sizes import parse_size_knob_options, resolve_size, size_config
from trainer.model.transformer import CONFIGS, build_model, count_parameters
from trainer.run.recipe import RECIPES, RunSpec

WIDE = ["n_layers=4", "d_model=256", "n_heads=4", "d_ff=768", "seq_len=1024", "vocab_size=512", "rope_base=50000"]


def _size_flags(options: list[str]) -> list[str]:
    return [f"--size-knob={option}" for option in options]


def test_a_new_size_is_its_base_plus_its_knobs():
    cfg, knobs = resolve_size("wide", parse_size_knob_options(WIDE))
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.seq_len, cfg.vocab_size) == (4, 256, 4, 768, 1024,
                                                                                                 512)
    assert cfg.rope_base == 50_000.0 and cfg.norm_eps == CONFIGS["small"].norm_eps
    assert knobs["n_layers"] == 4 and knobs["rope_base"] == 50_000.0
    assert size_config("deep", {"base": "tiny", "n_layers": 3}).d_model == CONFIGS["tiny"].d_model
    # a preset takes recipe knobs, and model knobs only where they leave it as it is
    assert resolve_size("small", {"d_model": 128, "n_kv_heads": 4, "updates": 10}) == (CONFIGS["small"],
                                                                                       {"updates": 10})


@pytest.mark.parametrize("size,knobs,message", [
    ("small", {"d_model": 256}, "size 'small' is a preset and the size knobs change it (d_model=256)"),
    ("small", {"base": "tiny"}, "base is a knob of a new size only"),
    ("wide", {"d_model": 250}, "size 'wide': model config d_model: 250 is not divisible by n_heads=4"),
    ("wide", {"d_model": 4, "n_heads": 4}, "size 'wide': model config: head width 1 must be even for RoPE"),
    ("all", {"n_layers": 2}, "size 'all': a new name is up to 64 letters"),
])
def test_bad_sizes_are_one_line_errors_naming_the_size(size, knobs, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        resolve_size(size, knobs)


def test_a_new_size_name_needs_a_knob():
    with pytest.raises(ParameterError, match="a new name needs at least one size knob"):
        resolve_size("wide", {})


@pytest.mark.parametrize("option,message", [
    ("n_layers", "--size-knob: 'n_layers' is not KEY=VALUE"),
    ("depth=4", "--size-knob depth: unknown size knob"),
    ("n_layers=0", "--size-knob n_layers: '0' is not a positive integer"),
    ("rope_base=-1", "--size-knob rope_base: '-1' is not a positive number"),
    ("rope_base=inf", "--size-knob rope_base: 'inf' is not a positive number"),
    ("base=huge", "--size-knob base: 'huge' is not one of tiny, small, medium"),
    ("warmup=-1", "--size-knob warmup: '-1' is not an integer of at least 0"),
])
def test_every_bad_size_knob_is_one_input_error_naming_it(option, message):
    with pytest.raises(InputError) as caught:
        parse_size_knob_options([option])
    assert str(caught.value).startswith(message)
    assert_input_error(invoke("params", "--config", "wide", f"--size-knob={option}"), message)


def test_params_counts_a_size_of_ones_own_exactly():
    result = invoke("params", "--config", "wide", "--variant", "gatedv", *_size_flags(WIDE), "--json")
    assert result.exit_code == 0, result.output
    table = json.loads(result.stdout)["wide"]
    cfg, _ = resolve_variant("wide", "gatedv", {}, parse_size_knob_options(WIDE))
    assert table["parameters"]["gatedv"] == count_parameters(build_model(cfg, 0, "meta"))
    assert (table["n_layers"], table["d_model"], table["seq_len"], table["rope_base"]) == (4, 256, 1024, 50_000.0)
    text = invoke("params", "--config", "wide", "--variant", "baseline", *_size_flags(WIDE)).stdout
    assert "4 / 256" in text and "1024" in text and "RoPE base" in text
    assert_input_error(invoke("params", *_size_flags(WIDE)), "--size-knob: needs one --config name")
    assert_input_error(invoke("params", "--config", "wide"), "unknown size 'wide'", "needs at least one --size-knob")


def test_variant_knobs_act_on_the_size():
    sizes = parse_size_knob_options(WIDE)
    cfg, knobs = resolve_variant("wide", "wide-geglu", {"ffn": "geglu", "d_ff": "matched"}, sizes)
    assert cfg.d_ff == 768 and cfg.d_model == 256 and knobs == {"ffn": "geglu", "d_ff": "matched"}
    cfg, _ = resolve_variant("wide", "wide-mlp", {"ffn": "gelu", "d_ff": "matched"}, sizes)
    assert cfg.d_ff == 1152
    with pytest.raises(InputError, match="n_kv_heads: 3 does not divide the wide model's 4 query heads"):
        resolve_variant("wide", "gqa3", {"n_kv_heads": 3}, sizes)


def test_the_recipe_defaults_come_from_the_size(tmp_path):
    spec = RunSpec.make(tmp_path, "wide", "baseline", 1, size_knobs={**parse_size_knob_options(WIDE),
                                                                     "batch_size": 4, "updates": 40, "warmup": 0})
    assert (spec.batch_size, spec.updates, spec.warmup, spec.lr) == (4, 40, 0, RECIPES["small"].lr)
    assert spec.size_knobs["batch_size"] == 4 and spec.model_config().n_layers == 4
    given = RunSpec.make(tmp_path, "wide", "baseline", 1, batch_size=2, updates=20,
                         size_knobs={"n_layers": 2, "base": "tiny", "lr": 0.01})
    assert (given.batch_size, given.updates, given.warmup, given.lr) == (2, 20, 2, 0.01)
    assert given.eval_every == 20  # the base's interval, at most the run
    preset = RunSpec.make(tmp_path, "tiny", "baseline", 1, size_knobs={"updates": 30})
    assert preset.updates == 30 and preset.size_knobs == {"updates": 30} and preset.model_config() == CONFIGS["tiny"]


def _experiment(tmp_path, body: str):
    path = tmp_path / "grid.toml"
    path.write_text('data = "data"\nseeds = [1]\nlrs = [0.001]\nout = "runs"\n' + body)
    return path


def test_experiment_sizes_tables_set_the_size_and_round_trip(tmp_path):
    path = _experiment(tmp_path, 'config = "wide"\nvariants = ["baseline", "gatedv"]\n[sizes.wide]\n'
                       + "\n".join(WIDE) + "\nbatch_size = 4\n[sizes.unused]\nn_layers = 2\n")
    grid = load_experiment(path)
    assert grid.size_knobs["d_model"] == 256 and grid.size_knobs["batch_size"] == 4
    spec = grid.runs()[1].spec
    assert spec.size == "wide" and spec.batch_size == 4 and spec.model_config().value_act == "silu"
    assert grid.describe_variants()["gatedv"]["parameters"] == count_parameters(build_model(spec.model_config(), 0,
                                                                                            "meta"))
    again = tmp_path / "again.toml"
    again.write_text(experiment_toml(grid, tmp_path))
    assert load_experiment(again).size_knobs == grid.size_knobs
    assert load_experiment(path, {"n_layers": 2}).runs()[0].spec.model_config().n_layers == 2
    assert invoke("sweep", path, "--status", "--size-knob", "n_layers=2").exit_code == 0
    assert_input_error(invoke("sweep", path, "--status", "--size-knob", "n_heads=3"),
                       "[sizes.wide] size 'wide': model config d_model: 256 is not divisible by n_heads=3")


@pytest.mark.parametrize("body,message", [
    ('config = "wide"\nvariants = ["baseline"]\n', "config: unknown size 'wide'"),
    ('config = "wide"\nvariants = ["baseline"]\n[sizes.wide]\nd_model = 250\n', "[sizes.wide] size 'wide': model "
                                                                              "config d_model: 250"),
    ('config = "small"\nvariants = ["baseline"]\n[sizes.small]\nn_layers = 2\n', "[sizes.small] size 'small' is a "
                                                                               "preset"),
    ('config = "small"\nvariants = ["baseline"]\nsizes = 3\n', "sizes must be [sizes.NAME] tables"),
    ('config = "wide"\nvariants = ["baseline"]\n[sizes.wide]\ndepth = 2\n', "[sizes.wide] depth: unknown size knob"),
])
def test_bad_sizes_tables_are_one_line_errors_naming_the_table(tmp_path, body, message):
    path = _experiment(tmp_path, body)
    with pytest.raises(InputError) as caught:
        load_experiment(path)
    assert str(caught.value).startswith(f"{path}: ") and message in str(caught.value)
    assert_input_error(invoke("sweep", path, "--status"), message)


def test_train_refuses_a_size_whose_context_is_not_the_datas(prepared_data, tmp_path):
    assert_input_error(invoke("train", "--data", prepared_data, "--config", "short", "--size-knob", "seq_len=128",
                              "--seed", "1", "--out", tmp_path / "run"),
                       "prepared with a context of 256 tokens, the model's seq_len is 128",
                       "prepare the data with --context 128")
    assert_input_error(invoke("train", "--data", prepared_data, "--config", "narrow", "--size-knob", "vocab_size=512",
                              "--seed", "1", "--out", tmp_path / "run"), "its tokenizer has 8,192 entries")
    assert_input_error(invoke("train", "--data", prepared_data, "--config", "tiny", "--size-knob", "n_layers=3",
                              "--seed", "1", "--out", tmp_path / "run"), "size 'tiny' is a preset")
