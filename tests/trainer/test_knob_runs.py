"""Variants of your own in runs: `train --knob` records name and knobs in run.json, the checkpoint and the loss
file; resume refuses other knobs; `[variants.NAME]` tables in sweep files, valid and invalid."""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest
import torch

from gatedv_stats.io.lossfiles import read_loss_file
from helpers import invoke
from trainer.grid.experiment import experiment_toml, load_experiment
from trainer.model.knobs import KNOBS
from trainer.model.transformer import build_model, count_parameters, model_config
from trainer.run.checkpoint import load_checkpoint
from trainer.run.recipe import RunSpec, recorded_spec

SHORT = ["--config", "tiny", "--seed", "3", "--lr", "0.01", "--updates", "2", "--eval-every", "1", "--batch-size", "2",
         "--device", "cpu"]
K_SILU = ["--variant", "k-silu", "--knob", "key_act=silu", "--knob", "qk_norm=true"]
K_SILU_KNOBS = {"key_act": "silu", "qk_norm": True}


def _train(data, out, *args: str):
    return invoke("train", "--data", str(data), "--out", str(out), *SHORT, *args)


@pytest.fixture(scope="module")
def knob_run(prepared_data, tmp_path_factory):
    """k-silu stopped after update 1, refused resumes with other knobs, then resumed with its own, evaluated."""
    out = tmp_path_factory.mktemp("knob-run") / "k-silu"
    stopped = _train(prepared_data, out, *K_SILU, "--stop-after", "1")
    assert stopped.exit_code == 0, stopped.output
    refused = {
        "fewer": _train(prepared_data, out, "--variant", "k-silu", "--knob", "key_act=silu", "--resume"),
        "preset": _train(prepared_data, out, "--variant", "baseline", "--resume"),
    }
    resumed = _train(prepared_data, out, "--variant", "k-silu", "--knob", "qk_norm=True", "--knob", "key_act=silu",
                     "--resume", "--json")
    assert resumed.exit_code == 0, resumed.output
    evaluated = invoke("evaluate", str(out / "checkpoint.pt"), "--eval-set", "dev", "--out", str(out / "dev.parquet"),
                       "--device", "cpu")
    assert evaluated.exit_code == 0, evaluated.output
    return out, refused, json.loads(resumed.stdout)


@pytest.mark.slow
def test_run_json_checkpoint_and_curve_carry_the_name_and_knobs(knob_run):
    out, _, resumed = knob_run
    assert resumed["status"] == "finished" and resumed["update"] == 2
    record = json.loads((out / "run.json").read_text())
    assert record["variant"] == "k-silu" and record["knobs"] == K_SILU_KNOBS
    assert record["model_config"]["key_act"] == "silu" and record["model_config"]["qk_norm"] is True
    assert record["model_config"]["variant"] == "k-silu"
    plain = count_parameters(build_model(model_config("tiny"), 0, "meta"))
    assert record["parameters"] == plain + 2 * 2 * 32  # a q and a k gain of head width 32 in each of 2 layers
    checkpoint = load_checkpoint(out / "checkpoint.pt")
    expected = dataclasses.replace(model_config("tiny"), key_act="silu", qk_norm=True, variant="k-silu")
    assert checkpoint.config == expected
    assert checkpoint.extra["run"]["variant"] == "k-silu" and checkpoint.extra["run"]["knobs"] == K_SILU_KNOBS
    assert set(pd.read_csv(out / "curve.csv")["arm"]) == {"k-silu"}


@pytest.mark.slow
def test_loss_file_metadata_names_the_variant_and_its_knobs(knob_run):
    out, _, _ = knob_run
    meta = read_loss_file(out / "dev.parquet").meta
    assert meta["arm"] == "k-silu" and meta["knobs"] == K_SILU_KNOBS
    assert meta["config"]["variant"] == "k-silu" and meta["config"]["key_act"] == "silu"


@pytest.mark.slow
def test_resume_refuses_another_knob_set_in_one_line(knob_run):
    out, refused, _ = knob_run
    checkpoint = out / "checkpoint.pt"
    assert refused["fewer"].exit_code == 2 and refused["fewer"].stderr == (
        f"error: {checkpoint}: the checkpoint's run differs (knobs {K_SILU_KNOBS!r} != {{'key_act': 'silu'}})\n")
    assert refused["preset"].exit_code == 2 and refused["preset"].stderr == (
        f"error: {checkpoint}: the checkpoint's run differs (variant 'k-silu' != 'baseline', "
        f"knobs {K_SILU_KNOBS!r} != {{}})\n")


def test_a_variant_of_your_own_shares_every_matrix_with_the_baseline_of_its_seed(prepared_data):
    spec = RunSpec.make(prepared_data, "tiny", "kv1", 5, knobs={"n_kv_heads": "1", "key_act": "silu"})
    assert spec.knobs == {"key_act": "silu", "n_kv_heads": 1}
    variant = build_model(spec.model_config(), 5).logical_weights()
    baseline = build_model(model_config("tiny"), 5).logical_weights()
    narrowed = {name for name in baseline if name.endswith(("attn.w_k", "attn.w_v"))}
    for name, weight in baseline.items():
        assert torch.equal(variant[name], weight) != (name in narrowed), name


def test_a_preset_spec_and_a_record_from_before_knobs_agree():
    spec = RunSpec.make("data", "tiny", "gatedv", 1, knobs={"value_act": "silu"})
    assert spec.knobs == {}
    old_record = {key: value for key, value in spec.to_dict().items() if key != "knobs"}
    assert recorded_spec(old_record) == spec.to_dict()


@pytest.mark.parametrize("options,message", [
    (["--variant", "k-silu", "--knob", "key_act=tanh"], "--knob key_act: 'tanh' is not one of linear, silu"),
    (["--variant", "k-silu", "--knob", "key_act"], "--knob: 'key_act' is not KNOB=VALUE (gatedv params --knobs lists "
     "the knobs)"),
    (["--variant", "k-silu", "--knob", "key_fn=silu"], f"--knob key_fn: unknown knob (knobs: {', '.join(KNOBS)})"),
    (["--variant", "k-silu", "--knob", "n_kv_heads=3"], "--knob n_kv_heads: 3 does not divide the tiny model's 2 "
     "query heads"),
    (["--variant", "gatedv", "--knob", "key_act=silu"], "variant 'gatedv' is a preset and the knobs change it "
     "(key_act=silu); name the new model (a new name is the baseline plus its knobs)"),
    (["--variant", "k-silu"], "--variant: unknown variant 'k-silu'"),
])
def test_bad_knobs_on_train_are_one_line_and_write_nothing(prepared_data, tmp_path, options, message):
    result = _train(prepared_data, tmp_path / "run", *options)
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {message}")
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.output
    assert not (tmp_path / "run").exists()


GRID = """
name = "knobs"
data = "{data}"
config = "tiny"
seeds = [1]
lrs = [0.01]
updates = 1
eval_every = 1
batch_size = 2
eval_sets = ["dev"]
out = "runs"

[variants.baseline]
[variants.k-silu]
key_act = "silu"
"""


@pytest.fixture(scope="module")
def knob_grid(prepared_data, tmp_path_factory):
    path = tmp_path_factory.mktemp("knob-grid") / "knobs.toml"
    path.write_text(GRID.format(data=prepared_data))
    first = invoke("sweep", str(path), "--device", "cpu", "--json")
    assert first.exit_code == 0, first.output
    again = invoke("sweep", str(path), "--device", "cpu")
    assert again.exit_code == 0, again.output
    return path, json.loads(first.stdout), again.stdout


@pytest.mark.slow
def test_sweep_trains_a_table_variant_and_prints_each_variants_parameters(knob_grid):
    path, first, again = knob_grid
    count = count_parameters(build_model(model_config("tiny"), 0, "meta"))
    assert first["variants"] == {"baseline": {"parameters": count, "knobs": {}},
                                 "k-silu": {"parameters": count, "knobs": {"key_act": "silu"}}}
    assert [(run["variant"], run["action"]) for run in first["runs"]] == [("baseline", "trained"),
                                                                         ("k-silu", "trained")]
    run_dir = path.parent / "runs" / "k-silu" / "lr0.01" / "seed1"
    assert json.loads((run_dir / "run.json").read_text())["knobs"] == {"key_act": "silu"}
    assert read_loss_file(run_dir / "dev.parquet").meta["knobs"] == {"key_act": "silu"}
    assert f"  k-silu: {count:,} parameters (key_act=silu)" in again.splitlines()
    assert again.count(" skipped ") == 2  # the recorded knobs match the file's on the second sweep


@pytest.mark.slow
def test_experiment_files_with_tables_round_trip(knob_grid, tmp_path):
    path, _, _ = knob_grid
    experiment = load_experiment(path)
    assert experiment.variants == ("baseline", "k-silu") and experiment.knobs == {"k-silu": {"key_act": "silu"}}
    copy = tmp_path / "copy.toml"
    copy.write_text(experiment_toml(experiment, tmp_path))
    again = load_experiment(copy)
    assert (again.variants, again.knobs, again.lrs) == (experiment.variants, experiment.knobs, experiment.lrs)
    assert again.runs()[1].spec == experiment.runs()[1].spec


BAD_TABLES = [
    (("key_act = \"silu\"", "key_fn = \"silu\""),
     f"[variants.k-silu] key_fn: unknown knob (knobs: {', '.join(KNOBS)})"),
    (("key_act = \"silu\"", "key_act = \"tanh\""), "[variants.k-silu] key_act: 'tanh' is not one of linear, silu"),
    (("key_act = \"silu\"", "key_act = 1"), "[variants.k-silu] key_act: 1 is not one of linear, silu"),
    (("key_act = \"silu\"", "qk_norm = \"maybe\""), "[variants.k-silu] qk_norm: 'maybe' is not true or false"),
    (("key_act = \"silu\"", "n_kv_heads = 3"), "[variants.k-silu] n_kv_heads: 3 does not divide the tiny model's 2 "
     "query heads"),
    (("key_act = \"silu\"", ""), "[variants.k-silu] variant: unknown variant 'k-silu'"),
    (("[variants.baseline]", "[variants.baseline]\nvalue_act = \"silu\""), "[variants.baseline] variant 'baseline' is "
     "a preset and the knobs change it (value_act=silu)"),
    (("[variants.k-silu]", "[variants.\"k/silu\"]"), "[variants.k/silu] variant 'k/silu': a new name is up to 64"),
    (("out = \"runs\"", "out = \"runs\"\nvariants = [\"baseline\"]"), "; [variants.NAME] tables replace the "
     "variants list"),
    (("[variants.baseline]\n[variants.k-silu]\nkey_act = \"silu\"", "variants = { baseline = 1 }"),
     "variants must be a non-empty list of preset names or [variants.NAME] tables"),
]


@pytest.mark.parametrize("change,message", BAD_TABLES, ids=[m.split(" ", 1)[-1][:40] for _, m in BAD_TABLES])
def test_bad_variant_tables_are_one_line_naming_the_file_and_table(prepared_data, tmp_path, change, message):
    path = tmp_path / "bad.toml"
    text = GRID.format(data=prepared_data)
    assert change[0] in text
    path.write_text(text.replace(change[0], change[1], 1))
    result = invoke("sweep", str(path))
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {path}: ")
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()
