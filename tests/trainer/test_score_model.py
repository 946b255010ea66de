"""`score_model`: a causal LM scored in memory. Against `gatedv evaluate --hf` on its saved copy (a tiny Llama on
the stored ids and on the window text, our nanoGPT-style Transformer against its Llama export, a byte GPT-2 on whole
documents), the unwrapping of a callable's output, the model's modes and device left as they were, batches halved
on running out of memory, a one-line refusal of each bad input, and `examples/own-loop.py` run to its verdict."""

from __future__ import annotations

import json
import runpy
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import gatedv_stats as gv
from gatedv_stats.core.errors import InputError, ParameterError, RunFailure
from gatedv_stats.io.lossfiles import read_loss_file
from helpers import invoke
from tiny_hf import byte_tokenizer, data_tokenizer, tiny_llama
from trainer.data.prepared import PreparedData
from trainer.hf.score import score_model, state_dict_sha256

# What `evaluate --hf` records about how the documents were scored, and the in-memory scorer must record alike.
SHARED_KEYS = ("eval_set", "eval_set_sha256", "data_manifest_sha256", "tokenizer_sha256", "tokenizer_files",
               "scored_as", "scoring", "context", "stride", "bos_token_id", "target_unit", "loss_unit", "dtype",
               "model_type", "transformers_version", "corpus", "corpus_listing_sha256", "skipped_documents")
OUT_OF_MEMORY = "CUDA out of memory. Tried to allocate 2.00 GiB"


def saved_copy(model, tokenizer, path, tokenizer_json=None):
    """`model` and `tokenizer` saved as a model directory; `tokenizer_json` copied byte for byte over the saved
    tokenizer.json (the data directory's own, so that `evaluate --hf` scores the stored ids)."""
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    if tokenizer_json is not None:
        shutil.copyfile(tokenizer_json, path / "tokenizer.json")
    return path


def evaluate_saved(model_dir, data, out, *args):
    result = invoke("evaluate", "--hf", model_dir, "--data", data, "--out", out, "--device", "cpu", *args)
    assert result.exit_code == 0, result.stderr
    return read_loss_file(out)


def assert_same_scores(ours, theirs, tolerance=1e-6):
    for column in ("doc_id", "n_targets", "n_bytes", "domain"):
        assert list(ours.docs[column]) == list(theirs.docs[column]), column
    difference = np.abs(ours.docs["loss_sum"].to_numpy() - theirs.docs["loss_sum"].to_numpy()).max()
    assert difference <= tolerance, difference
    for key in SHARED_KEYS:
        assert ours.meta.get(key) == theirs.meta.get(key), (key, ours.meta.get(key), theirs.meta.get(key))


@pytest.mark.parametrize("route", ["stored ids", "window text"])
def test_a_llama_in_memory_scores_what_evaluate_hf_scores_on_its_saved_copy(prepared_data, tmp_path, route):
    model = tiny_llama()
    tokenizer = data_tokenizer(prepared_data)
    stored = route == "stored ids"
    model_dir = saved_copy(model, tokenizer, tmp_path / "saved", prepared_data / "tokenizer.json" if stored else None)
    model.train()
    model.model.layers[0].mlp.eval()  # a module the loop keeps in eval mode stays so
    modes = [module.training for module in model.modules()]
    weights = state_dict_sha256(model)
    out = tmp_path / "ours.parquet"
    ours = score_model(model, None if stored else tokenizer, prepared_data, out, arm="llama", seed=3, step=120,
                       progress=False)
    theirs = evaluate_saved(model_dir, prepared_data, tmp_path / "theirs.parquet")
    assert_same_scores(ours, theirs)
    assert ours.meta["scored_as"] == ("stored token ids" if stored else "window text, encoded by the model's "
                                                                        "tokenizer")
    assert (ours.arm, ours.seed, ours.meta["step"], ours.source) == ("llama", 3, 120, str(out))
    assert ours.meta["model_state_sha256"] == weights and ours.meta["model_class"].endswith(".LlamaForCausalLM")
    # Left as it was: the modes of every module, the weights, the device; gradients on again.
    assert [module.training for module in model.modules()] == modes
    assert state_dict_sha256(model) == weights and model.device == torch.device("cpu")
    assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()


def test_our_nanogpt_style_transformer_scores_what_its_llama_export_scores(prepared_data, tmp_path):
    from trainer.hf.export import to_llama
    from trainer.model.transformer import build_model, model_config

    model = build_model(model_config("tiny"), 5)
    llama_dir = tmp_path / "llama"
    to_llama(model).save_pretrained(llama_dir)
    shutil.copyfile(prepared_data / "tokenizer.json", llama_dir / "tokenizer.json")
    (llama_dir / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    ours = score_model(model, None, prepared_data, tmp_path / "ours.parquet", arm="base", seed=5,
                       eval_set="heldout", progress=False)
    theirs = evaluate_saved(llama_dir, prepared_data, tmp_path / "theirs.parquet", "--eval-set", "heldout")
    for key in ("eval_set", "eval_set_sha256", "tokenizer_sha256", "scored_as", "scoring", "context", "stride"):
        assert ours.meta[key] == theirs.meta[key], key
    assert ours.meta["scored_as"] == "stored token ids" and ours.meta["model_type"] is None
    np.testing.assert_allclose(ours.docs["loss_sum"], theirs.docs["loss_sum"], rtol=0, atol=1e-6)
    # The stored ids are the windows `gatedv evaluate` scores: 256 targets each.
    assert (ours.docs["n_targets"] == 256).all()


def test_whole_documents_through_sliding_windows_as_evaluate_hf(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    tokenizer = byte_tokenizer()
    torch.manual_seed(1)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=128, n_embd=32, n_layer=2, n_head=2,
                                       bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id))
    corpus = tmp_path / "corpus.jsonl"
    texts = ["caf\u00e9 " * 90, "def f(x):\n    return x\n" * 12, "", "short"]
    corpus.write_text("".join(json.dumps({"id": f"d{i}", "text": text}) + "\n" for i, text in enumerate(texts)))
    ours = score_model(model, tokenizer, corpus, arm="bytes", seed=0, context=100, stride=60, batch_size=3,
                       progress=False)
    theirs = evaluate_saved(saved_copy(model, tokenizer, tmp_path / "saved"), corpus, tmp_path / "theirs.parquet",
                            "--context", "100", "--stride", "60", "--batch-size", "3")
    assert_same_scores(ours, theirs)
    assert list(ours.docs["doc_id"]) == ["d0", "d1", "d3"] and ours.meta["scoring"] == "document"
    assert ours.meta["empty_documents"] == 1 and ours.meta["bos_token_id"] == tokenizer.bos_token_id


def test_a_callables_tuple_or_model_output_is_unwrapped(prepared_data):
    model = tiny_llama().eval()
    plain = score_model(model, None, prepared_data, arm="a", seed=0, progress=False)
    # A bound method of a transformers model returns its ModelOutput.
    calls = {"tuple": lambda ids: (model(input_ids=ids).logits, None), "method": model.forward}
    runs = {name: score_model(call, None, prepared_data, arm="a", seed=0, progress=False)
            for name, call in calls.items()}
    for run in runs.values():
        np.testing.assert_array_equal(run.docs["loss_sum"], plain.docs["loss_sum"])
        assert run.meta["context"] == plain.meta["context"] == PreparedData.open(prepared_data).context
    # A bound method is its module's weights; a bare function has none to hash.
    assert runs["method"].meta["model_state_sha256"] == plain.meta["model_state_sha256"]
    assert runs["method"].meta["model_class"].endswith(".LlamaForCausalLM")
    assert runs["tuple"].meta["model_state_sha256"] is None
    assert runs["tuple"].meta["model_class"].endswith("_is_unwrapped.<locals>.<lambda>")


def test_runs_in_memory_go_to_gv_compare_without_a_file(prepared_data):
    runs = [score_model(tiny_llama(seed=seed + (10 if arm == "b" else 0)), None, prepared_data, arm=arm, seed=seed,
                        progress=False) for arm in ("a", "b") for seed in (1, 2)]
    assert runs[0].sha256 == "" and runs[0].source == "a seed 1 (scored in memory)"
    result = gv.compare(runs, baseline_arm="a", variant_arm="b")
    assert result.to_dict()["verdict"] in {"better", "worse", "no detectable difference"}


def test_progress_can_be_turned_off(prepared_data, capfd):
    score_model(tiny_llama(), None, prepared_data, arm="a", seed=0, progress=False)
    assert capfd.readouterr().err == ""


def _running_out_above(limit: int, monkeypatch) -> list[int]:
    """Batches of more than `limit` windows run out of memory; returns the sizes tried."""
    import trainer.hf.evaluate as hf_evaluate

    tried: list[int] = []
    score_batch = hf_evaluate._score_batch

    def scored(forward, sequences, batch, device):
        tried.append(len(batch))
        if len(batch) > limit:
            raise torch.OutOfMemoryError(OUT_OF_MEMORY)
        return score_batch(forward, sequences, batch, device)

    monkeypatch.setattr(hf_evaluate, "_score_batch", scored)
    return tried


def test_batches_are_halved_on_running_out_of_memory_unless_chosen(prepared_data, tmp_path, monkeypatch):
    model = tiny_llama()
    chosen = score_model(model, None, prepared_data, arm="a", seed=0, batch_size=2, progress=False)
    tried = _running_out_above(2, monkeypatch)
    halved = score_model(model, None, prepared_data, arm="a", seed=0, progress=False)
    assert tried == [8, 4, 2, 2, 2, 2]  # 8 windows, 2 at a time once 8 and 4 ran out
    np.testing.assert_array_equal(halved.docs["loss_sum"], chosen.docs["loss_sum"])
    out = tmp_path / "x.parquet"
    with pytest.raises(RunFailure) as failure:
        score_model(model, None, prepared_data, out, arm="a", seed=0, batch_size=4, progress=False)
    assert str(failure.value) == (f"model LlamaForCausalLM: out of memory on cpu ({OUT_OF_MEMORY}); free the "
                                  "device's memory or lower batch_size (4) or context")
    _running_out_above(0, monkeypatch)
    with pytest.raises(RunFailure, match=r"free the device's memory or lower context$"):
        score_model(model, None, prepared_data, out, arm="a", seed=0, progress=False)
    assert not out.exists()


class Bidirectional(torch.nn.Module):
    """Every position sees the mean of all tokens: not causal."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(8192, 16)
        self.head = torch.nn.Linear(16, 8192)

    def forward(self, ids):
        return self.head(self.embed(ids).mean(dim=1, keepdim=True).expand(-1, ids.shape[1], -1))


def _poisoned(model, prefixes, value):
    """`model`'s logits, `value` in one column for the windows starting with one of `prefixes`."""

    def forward(ids):
        logits = model(input_ids=ids).logits.clone()
        for row in range(ids.shape[0]):
            if ids[row, :8].tolist() in prefixes:
                logits[row, :, 7] = value
        return logits

    return forward


def _refusals(prepared_data, tmp_path):
    llama = tiny_llama().eval()
    dev = PreparedData.open(prepared_data).eval_set("dev")
    prefixes = [dev.tokens[k, :8].tolist() for k in (2, 5)]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "d", "text": "hello"}) + "\n")
    return [
        ({"model": tiny_llama(vocab_size=4096)}, InputError,
         "model LlamaForCausalLM: its vocabulary (4096 logits) is smaller than its tokenizer's (8192 entries), so "
         "some of the tokenizer's ids have no prediction"),
        ({"model": lambda ids: llama(input_ids=ids).logits[:, -1:]}, InputError,
         "model <lambda>: its logits have shape (1, 1, 8192) for token ids of shape (1, 2); expected (1, 2, V), one "
         "row of logits per input position"),
        ({"model": lambda ids: llama(input_ids=ids).logits.long()}, InputError,
         "model <lambda>: its logits are torch.int64; expected a floating-point tensor"),
        ({"model": lambda ids: {"logits": llama(input_ids=ids).logits}}, InputError,
         "model <lambda>: returned a dict for token ids of shape (1, 2); expected logits (a tensor (B, T, V), a "
         "tuple holding them first, or a ModelOutput with .logits)"),
        ({"model": lambda ids: (None, llama(input_ids=ids).logits)}, InputError,
         "model <lambda>: returned a tuple starting with a NoneType for token ids of shape (1, 2)"),
        ({"model": _poisoned(llama, prefixes, float("nan"))}, InputError,
         f"model forward: its logits are not finite (NaN or infinite) at a scored position of document "
         f"{dev.doc_ids[2]} and 1 more"),
        ({"model": _poisoned(llama, prefixes[1:], float("inf"))}, InputError,
         f"model forward: its logits are not finite (NaN or infinite) at a scored position of document "
         f"{dev.doc_ids[5]}"),
        ({"model": Bidirectional()}, InputError,
         "model Bidirectional: not a causal language model: its prediction at position 1 changes with a later "
         "token"),
        ({"tokenizer": byte_tokenizer(), "stored_ids": True}, InputError,
         f"model LlamaForCausalLM: its tokenizer encodes the text of document {dev.doc_ids[0]} of dev to other "
         "token ids than the stored ones (from token "),
        ({"eval_set": "test"}, ParameterError,
         f"eval_set: 'test' is neither a set of {prepared_data} (dev, heldout) nor an evaluation-set file"),
        ({"tokenizer": "gpt2"}, ParameterError,
         "tokenizer: must be a transformers tokenizer, a tokenizers.Tokenizer or None (the data directory's own), "
         "got builtins.str"),
        ({"data": corpus}, ParameterError, "tokenizer: a corpus is encoded by the model's tokenizer; give it"),
        ({"arm": " "}, ParameterError, "arm: must name the arm (a non-empty name), got ' '"),
        ({"device": "meta"}, ParameterError, "device: the model is on cpu and is scored there, never moved (got "
                                             "meta)"),
        ({"stride": 300, "context": 256}, ParameterError, "stride: must be at most the context, 256 (got 300)"),
    ]


def test_bad_input_is_refused_in_one_line_and_nothing_is_written(prepared_data, tmp_path):
    out = tmp_path / "x.parquet"
    for changed, error, message in _refusals(prepared_data, tmp_path):
        arguments = {"model": tiny_llama(), "tokenizer": None, "data": prepared_data, "arm": "a", **changed}
        with pytest.raises(error) as refused:
            score_model(arguments.pop("model"), arguments.pop("tokenizer"), arguments.pop("data"), out, seed=0,
                        progress=False, **arguments)
        assert message in str(refused.value) and "\n" not in str(refused.value), str(refused.value)
        assert not out.exists()


@pytest.mark.slow
def test_the_own_loop_example_reaches_a_verdict(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["own-loop.py", "--out", str(tmp_path), "--updates", "20"])
    runpy.run_path(str(Path(__file__).parents[2] / "examples" / "own-loop.py"), run_name="__main__")
    printed = capsys.readouterr().out
    assert printed.startswith("lr-4e-3 vs lr-1e-3: 2 paired seeds") and "\nverdict: " in printed, printed
    runs = sorted((tmp_path / "runs").glob("*.parquet"))
    assert [path.name for path in runs] == ["lr-1e-3-seed1.parquet", "lr-1e-3-seed2.parquet",
                                            "lr-4e-3-seed1.parquet", "lr-4e-3-seed2.parquet"]
    run = read_loss_file(runs[0])
    assert (run.meta["step"], run.meta["eval_set"], run.meta["scored_as"]) == (20, "heldout", "stored token ids")
    result = invoke("bootstrap", tmp_path / "runs", "--baseline-arm", "lr-1e-3", "--variant-arm", "lr-4e-3")
    assert result.exit_code == 0 and "verdict: " in result.stdout, result.output
