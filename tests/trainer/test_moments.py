"""Moment-matching coefficients (docs/method.md §6): against an independent computation, and stored by affine-match
runs."""

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import cli
from gatedv_stats.core.integrity import check_seal
from helpers import full_disk_line, invoke, tree
from trainer.data.prepared import PreparedData
from trainer.model.moments import MOMENTS_SEAL, N_WINDOWS, compute_moments
from trainer.model.transformer import build_model, model_config
from trainer.run.checkpoint import load_checkpoint
from trainer.run.recipe import RunSpec, Runtime
from trainer.run.train import train


def _independent_moments(data: PreparedData, seed: int, n_windows: int) -> np.ndarray:
    """Hooks on each layer's fused QKV map of the baseline; V = its last d columns; numpy mean / population SD."""
    model = build_model(model_config("tiny", "baseline"), seed)
    windows = data.sampler(seed).batch(0, n_windows)
    captured = {layer: [] for layer in range(len(model.layers))}
    for layer, block in enumerate(model.layers):
        block.attn.qkv.register_forward_hook(
            lambda module, inputs, output, layer=layer: captured[layer].append(output[..., -64:].double().numpy()))
    with torch.no_grad():
        model.hidden_states(windows[:, :-1])  # the readout is not needed
    rows = []
    for layer in range(len(model.layers)):
        v = np.concatenate(captured[layer]).ravel()
        phi = v / (1 + np.exp(-v))
        rows.append([v.mean(), v.std(ddof=0), phi.mean(), phi.std(ddof=0)])
    return np.array(rows)


def test_coefficients_match_an_independent_computation(prepared_data):
    data = PreparedData.open(prepared_data)
    moments = compute_moments(data, "tiny", 11, n_windows=6, batch_size=4)  # chunks of 4 + 2 windows
    np.testing.assert_allclose(moments.coefficients, _independent_moments(data, 11, 6), rtol=1e-5, atol=1e-7)
    assert moments.coefficients.shape == (2, 4) and N_WINDOWS == 128
    assert moments.to_dict()["coefficients"] == moments.coefficients.tolist()


def test_moments_command_prints_and_writes_json(prepared_data, tmp_path):
    result = CliRunner().invoke(cli.app, ["moments", "--data", str(prepared_data), "--config", "tiny", "--seed", "11",
                                          "--windows", "6", "--device", "cpu", "--out", str(tmp_path / "m.json"),
                                          "--json"])
    assert result.exit_code == 0, result.stderr
    printed = json.loads(result.stdout)
    written = json.loads((tmp_path / "m.json").read_text())
    assert printed == {key: value for key, value in written.items() if key != MOMENTS_SEAL}
    expected = _independent_moments(PreparedData.open(prepared_data), 11, 6)
    np.testing.assert_allclose(printed["coefficients"], expected, rtol=1e-5, atol=1e-7)
    assert printed["columns"] == ["mu_v", "sigma_v", "mu_phi", "sigma_phi"] and printed["n_windows"] == 6
    bad = CliRunner().invoke(cli.app, ["moments", "--data", str(prepared_data), "--config", "tiny", "--seed", "1",
                                       "--windows", "0"])
    assert bad.exit_code == 2 and bad.stderr.strip() == "error: --windows: must be at least 1, got 0"
    windows = PreparedData.open(prepared_data).sampler(1).n_windows
    huge = CliRunner().invoke(cli.app, ["moments", "--data", str(prepared_data), "--config", "tiny", "--seed", "1",
                                        "--windows", "999999999999", "--device", "cpu"])
    assert huge.exit_code == 2 and huge.stderr.strip() == (
        f"error: --windows: must be at most {windows:,}, the training windows in {prepared_data}, got 999,999,999,999")


@pytest.mark.slow
def test_affine_match_run_stores_its_seed_coefficients(prepared_data, tmp_path):
    spec = RunSpec.make(prepared_data, "tiny", "affine-match", 4, lr=0.01, updates=1, eval_every=1, batch_size=2)
    train(spec, tmp_path, runtime=Runtime(device="cpu", progress=False))
    stored = check_seal(json.loads((tmp_path / "moments.json").read_text()), MOMENTS_SEAL, tmp_path / "moments.json",
                        "", required=True)
    assert stored["seed"] == 4 and stored["n_windows"] == 128 and stored["size"] == "tiny"
    expected = _independent_moments(PreparedData.open(prepared_data), 4, 128)
    np.testing.assert_allclose(stored["coefficients"], expected, rtol=1e-5, atol=1e-7)
    # The coefficients are buffers of the trained model, unchanged by the update.
    model = load_checkpoint(tmp_path / "checkpoint.pt").model
    buffers = torch.stack([block.attn.moments for block in model.layers]).double().numpy()
    np.testing.assert_allclose(buffers, np.array(stored["coefficients"]), rtol=1e-6)
    assert all(not name.endswith("moments") for name, _ in model.named_parameters())


def test_an_unknown_size_is_named_by_its_flag(prepared_data):
    result = CliRunner().invoke(cli.app, ["moments", "--data", str(prepared_data), "--config", "huge", "--seed", "1"])
    assert result.exit_code == 2
    assert result.stderr == "error: --config: unknown size 'huge' (choose from tiny, small, medium)\n"


def test_moments_json_is_sealed_and_a_full_disk_keeps_the_file_before(prepared_data, tmp_path, full_disk):
    out = tmp_path / "m.json"
    args = ("moments", "--data", prepared_data, "--config", "tiny", "--seed", "11", "--windows", "2", "--device",
            "cpu", "--out", out)
    assert invoke(*args).exit_code == 0
    check_seal(json.loads(out.read_text()), MOMENTS_SEAL, out, "", required=True)
    before = tree(tmp_path)
    full_disk(after=0)
    full_disk_line(invoke(*args), f"{out}: could not be written", "the previous m.json is kept")
    assert tree(tmp_path) == before
