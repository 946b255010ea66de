"""Per-document evaluation: loss sums against a direct computation, the loss-file metadata of docs/method.md §5,
batching, --value-act."""

import hashlib
import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import cli
from gatedv_stats.io.lossfiles import read_loss_file
from trainer.checkpoint import load_checkpoint
from trainer.data import PreparedData, write_eval_set
from trainer.model import Transformer, build_model, model_config
from trainer.train import RunSpec, Runtime, train


@pytest.fixture(scope="module")
def checkpoint(prepared_data, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    spec = RunSpec.make(prepared_data, "tiny", "baseline", 2, lr=0.01, updates=2, eval_every=2, batch_size=2)
    train(spec, run_dir, runtime=Runtime(device="cpu", progress=False))
    return run_dir / "checkpoint.pt"


def _direct_loss_sums(model: Transformer, tokens: np.ndarray) -> np.ndarray:
    """One document at a time: −Σ log softmax(logits)[target] in float64."""
    sums = []
    with torch.no_grad():
        for window in torch.as_tensor(tokens):
            logits = model(window[None, :-1])[0].double()
            log_probs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
            sums.append(-log_probs[torch.arange(len(window) - 1), window[1:]].sum().item())
    return np.array(sums)


def _evaluate(checkpoint, out, *args):
    result = CliRunner().invoke(cli.app, ["evaluate", str(checkpoint), "--out", str(out), "--device", "cpu", "--json",
                                          *args])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout), read_loss_file(out)


def test_loss_sums_equal_a_direct_computation_with_the_spec_metadata(checkpoint, prepared_data, tmp_path):
    summary, run = _evaluate(checkpoint, tmp_path / "dev.parquet", "--set", "dev")
    data = PreparedData.open(prepared_data)
    dev = data.eval_set("dev")
    model = load_checkpoint(checkpoint).model
    np.testing.assert_allclose(run.docs["loss_sum"], _direct_loss_sums(model, dev.tokens), rtol=1e-5)
    assert list(run.docs["doc_id"]) == dev.doc_ids and list(run.docs["domain"]) == dev.domains
    assert (run.docs["n_targets"] == 256).all() and list(run.docs["n_bytes"]) == list(dev.n_bytes)
    meta = run.meta
    assert (meta["arm"], meta["seed"], meta["lr"], meta["step"], meta["eval_set"]) == ("baseline", 2, 0.01, 2, "dev")
    assert meta["eval_set_sha256"] == dev.sha256
    assert meta["tokenizer_sha256"] == hashlib.sha256((prepared_data / "tokenizer.json").read_bytes()).hexdigest()
    assert meta["checkpoint_sha256"] == hashlib.sha256(checkpoint.read_bytes()).hexdigest()
    assert meta["data_manifest_sha256"] == data.manifest_sha256
    assert meta["value_act"] is None and meta["trained_value_act"] == "linear"
    assert meta["config"] == model_config("tiny", "baseline").to_dict() and meta["gatedv_version"]
    assert summary["nll"] == pytest.approx(run.docs["loss_sum"].sum() / run.docs["n_targets"].sum(), rel=1e-12)


def test_value_act_override_changes_only_the_values(checkpoint, tmp_path):
    _, linear = _evaluate(checkpoint, tmp_path / "linear.parquet", "--set", "heldout")
    _, swapped = _evaluate(checkpoint, tmp_path / "silu.parquet", "--set", "heldout", "--value-act", "silu")
    # The same weights in a model built as GatedV (SiLU values, everything else the baseline's).
    gated = build_model(model_config("tiny", "gatedv"), 0)
    gated.load_state_dict(load_checkpoint(checkpoint).model.state_dict())
    heldout = PreparedData.open(load_checkpoint(checkpoint).extra["run"]["data"]).eval_set("heldout")
    np.testing.assert_allclose(swapped.docs["loss_sum"], _direct_loss_sums(gated, heldout.tokens), rtol=1e-5)
    assert not np.allclose(swapped.docs["loss_sum"], linear.docs["loss_sum"], rtol=1e-3)
    assert swapped.meta["value_act"] == "silu" and swapped.meta["trained_value_act"] == "linear"
    assert swapped.meta["eval_set"] == "heldout"


def test_documents_go_through_in_batches(checkpoint, tmp_path, monkeypatch):
    _, whole = _evaluate(checkpoint, tmp_path / "whole.parquet", "--set", "dev", "--batch-size", "16")
    sizes = []
    hidden_states = Transformer.hidden_states
    monkeypatch.setattr(Transformer, "hidden_states", lambda self, idx: sizes.append(len(idx)) or hidden_states(self, idx))
    _, batched = _evaluate(checkpoint, tmp_path / "batched.parquet", "--set", "dev", "--batch-size", "3")
    assert sizes == [3, 3, 2]  # 8 documents, never more than 3 windows of logits at once
    np.testing.assert_allclose(batched.docs["loss_sum"], whole.docs["loss_sum"], rtol=1e-6)


@pytest.mark.parametrize(("args", "message"), [
    (["--value-act", "tanh"], "--value-act: 'tanh' is not linear or silu"),
    (["--set", "nowhere.parquet"], "--set: 'nowhere.parquet' is neither a set of "),
    (["--set", "held-out"], "(dev, heldout) nor an evaluation-set file"),
    (["--batch-size", "0"], "--batch-size: must be at least 1, got 0"),
])
def test_bad_evaluation_input_is_one_line(checkpoint, tmp_path, args, message):
    result = CliRunner().invoke(cli.app, ["evaluate", str(checkpoint), "--out", str(tmp_path / "x.parquet"), *args])
    assert result.exit_code == 2 and result.stderr.startswith("error: ")
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.parquet").exists()


def test_a_missing_or_foreign_checkpoint_is_named(tmp_path):
    runner = CliRunner()
    missing = runner.invoke(cli.app, ["evaluate", str(tmp_path / "none.pt"), "--out", str(tmp_path / "x.parquet")])
    assert missing.exit_code == 2 and missing.stderr.strip() == f"error: {tmp_path / 'none.pt'}: no such checkpoint"
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    junk = runner.invoke(cli.app, ["evaluate", str(tmp_path / "junk.pt"), "--out", str(tmp_path / "x.parquet")])
    assert junk.exit_code == 2 and "junk.pt: not a gatedv checkpoint" in junk.stderr


def test_a_custom_set_with_foreign_token_ids_is_refused(checkpoint, prepared_data, tmp_path):
    dev = PreparedData.open(prepared_data).eval_set("dev")
    tokens = dev.tokens.copy()
    tokens[0, 5] = 9000
    path = tmp_path / "foreign.parquet"
    write_eval_set(path, "foreign", dev.doc_ids, dev.domains, tokens, dev.n_bytes)
    result = CliRunner().invoke(cli.app, ["evaluate", str(checkpoint), "--set", str(path), "--out",
                                          str(tmp_path / "x.parquet")])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {path}: token id 9000 is outside the model's vocabulary of 8192"
    # The same set within the vocabulary evaluates under its own name.
    write_eval_set(path, "foreign", dev.doc_ids, dev.domains, dev.tokens, dev.n_bytes)
    summary, run = _evaluate(checkpoint, tmp_path / "custom.parquet", "--set", str(path))
    assert run.meta["eval_set"] == "foreign" and summary["n_docs"] == len(dev.doc_ids)
