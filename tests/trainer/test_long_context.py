"""Longer contexts end to end: `gatedv prepare --context N`, windows of N + 1 tokens, runs refused on another context,
and the custom 4-layer, 256-wide model at a 1,024-token context prepared, trained memory-lean, resumed, evaluated
and compared."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import torch

from gatedv_stats.core.errors import InputError
from helpers import assert_input_error, invoke
from trainer.data.prepare import prepare
from trainer.data.prepared import PreparedData, read_eval_set, write_eval_set
from trainer.model.transformer import READOUT_CHUNK, build_model
from trainer.run.evaluate import document_loss_sums
from trainer.run.recipe import RunSpec

SHORT = ["n_layers=2", "d_model=64", "n_heads=2", "d_ff=128", "seq_len=64", "vocab_size=512"]


@pytest.fixture(scope="module")
def context_64(tmp_path_factory):
    """Windows of 65 tokens under a 512-entry tokenizer; a second or two on 2 cores."""
    out = tmp_path_factory.mktemp("context-64")
    prepare("builtin:python-stdlib", out, eval_docs=4, max_docs=60, vocab_size=512, context=64, progress=False)
    return out


def test_prepare_context_sets_every_window_and_the_manifest(context_64):
    data = PreparedData.open(context_64)
    assert data.manifest["context"] == 64 and data.context == 64
    for name in ("dev", "heldout"):
        assert data.eval_set(name).tokens.shape[1] == 65
    sampler = data.sampler(3)
    assert sampler.batch(0, 5).shape == (5, 65)
    starts = sampler.starts(7, 64)[1]
    docs = sampler.starts(7, 64)[0]
    assert (starts + 65 <= data.train_offsets[docs + 1]).all()
    assert data.manifest["counts"]["train"]["eligible_windows"] == sampler.n_windows


def test_another_context_prepares_again_and_the_same_is_reused(context_64, tmp_path):
    again = prepare("builtin:python-stdlib", context_64, eval_docs=4, max_docs=60, vocab_size=512, context=64,
                    progress=False)
    assert again.reused
    other = prepare("builtin:python-stdlib", tmp_path / "d", eval_docs=4, max_docs=60, vocab_size=512, context=32,
                    progress=False)
    assert not other.reused and other.manifest["context"] == 32
    assert PreparedData.open(tmp_path / "d").eval_set("dev").tokens.shape[1] == 33
    with pytest.raises(InputError, match="--context: must be an integer from 1 to 1,048,576, got 0"):
        prepare("builtin:python-stdlib", tmp_path / "e", context=0)
    assert_input_error(invoke("prepare", "builtin:python-stdlib", "--out", tmp_path / "f", "--context", "-3"),
                       "--context: must be an integer")


def test_eval_set_files_hold_windows_of_any_one_length(context_64, tmp_path):
    dev = PreparedData.open(context_64).eval_set("dev")
    path = tmp_path / "long.parquet"
    write_eval_set(path, "long", dev.doc_ids, dev.domains, dev.tokens, dev.n_bytes)
    assert read_eval_set(path).tokens.shape == dev.tokens.shape
    with pytest.raises(InputError, match="row 1: `tokens` must hold 257 token ids"):
        read_eval_set(path, window=257)


def test_runs_are_refused_on_data_of_another_context(context_64, prepared_data, tmp_path):
    flags = [f"--size-knob={option}" for option in SHORT]
    assert_input_error(invoke("train", "--data", prepared_data, "--config", "short", *flags, "--seed", "1", "--out",
                              tmp_path / "a"), "prepared with a context of 256 tokens, the model's seq_len is 64")
    assert_input_error(invoke("train", "--data", context_64, "--config", "tiny", "--seed", "1", "--out",
                              tmp_path / "b"), "prepared with a context of 64 tokens, the model's seq_len is 256")


def test_long_windows_are_scored_a_chunk_of_logits_at_a_time(context_64):
    """Per-window sums of the chunked evaluation equal the loss computed from whole logits."""
    spec = RunSpec.make(context_64, "short", "baseline", 1, size_knobs=dict(o.split("=") for o in SHORT))
    model = build_model(spec.model_config(), 1)
    tokens = PreparedData.open(context_64).eval_set("dev").tokens
    assert tokens.shape[1] - 1 > READOUT_CHUNK["cpu"] // 8  # windows of several chunks in a batch of 8
    sums = document_loss_sums(model, tokens, device=torch.device("cpu"), batch_size=8)
    batch = torch.as_tensor(tokens)
    with torch.no_grad():
        logits = model(batch[:, :-1])
    expected = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch[:, 1:], reduction="none").sum(1)
    np.testing.assert_allclose(sums, expected.double().numpy(), rtol=1e-5)


LONG = ["n_layers=4", "d_model=256", "n_heads=4", "d_ff=512", "seq_len=1024", "vocab_size=512", "rope_base=100000"]


def _train(data, out, variant: str, *extra) -> dict:
    result = invoke("train", "--data", data, "--config", "long", *(f"--size-knob={option}" for option in LONG),
                    "--variant", variant, "--seed", "1", "--updates", "20", "--batch-size", "4", "--grad-accum", "4",
                    "--checkpoint-activations", "--device", "cpu", "--out", out, "--json", *extra)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.slow
def test_a_custom_model_at_a_1024_token_context_trains_lean_resumes_evaluates_and_compares(tmp_path):
    began = time.perf_counter()
    data = tmp_path / "data"
    prepared = invoke("prepare", "builtin:python-stdlib", "--out", data, "--context", "1024", "--vocab-size", "512",
                      "--eval-docs", "2", "--max-docs", "80", "--json")
    assert prepared.exit_code == 0, prepared.output
    assert json.loads(prepared.stdout)["manifest"]["context"] == 1024
    whole = _train(data, tmp_path / "whole", "baseline")
    assert whole["status"] == "finished" and whole["update"] == 20
    assert _train(data, tmp_path / "resumed", "baseline", "--stop-after", "10")["status"] == "stopped"
    resumed = _train(data, tmp_path / "resumed", "baseline", "--resume")
    assert resumed["dev_nll"] == whole["dev_nll"]
    kept = [torch.load(tmp_path / run / "checkpoint.pt", weights_only=False) for run in ("whole", "resumed")]
    assert all(torch.equal(kept[0]["model"][name], value) for name, value in kept[1]["model"].items())
    assert json.dumps(kept[0]["curve"]) == json.dumps(kept[1]["curve"])  # NaN train loss at step 0: compare text
    moments = [[state["exp_avg"] for state in checkpoint["optimizer"]["state"].values()] for checkpoint in kept]
    assert all(torch.equal(a, b) for a, b in zip(*moments))
    record = json.loads((tmp_path / "resumed" / "run.json").read_text())
    assert record["model_config"]["seq_len"] == 1024 and record["size_knobs"]["n_layers"] == 4
    assert record["memory"] == {"grad_accum": 4, "checkpoint_activations": True, "compile": False}
    _train(data, tmp_path / "gatedv", "gatedv")
    for arm in ("resumed", "gatedv"):
        evaluated = invoke("evaluate", tmp_path / arm / "checkpoint.pt", "--eval-set", "heldout", "--out",
                           tmp_path / f"{arm}.parquet", "--device", "cpu", "--json")
        assert evaluated.exit_code == 0, evaluated.output
        assert json.loads(evaluated.stdout)["n_targets"] == 2 * 1024
    compared = invoke("bootstrap", "--baseline", tmp_path / "resumed.parquet", "--variant", tmp_path / "gatedv.parquet",
                      "--samples", "200", "--json")
    assert compared.exit_code == 0, compared.output
    verdict = json.loads(compared.stdout)
    assert verdict["n_pairs"] == 1 and verdict["n_docs"] == 2 and np.isfinite(verdict["delta_p"])
    print(f"1,024-token study: {time.perf_counter() - began:.0f} s")
