"""`gatedv evaluate --hf`: any local transformers model, per document. The sliding window against the transformers
perplexity guide's loop, the evaluation-set text against a direct forward pass, our exported baseline against
`gatedv evaluate` on its checkpoint, and a one-line refusal of each bad input."""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil

import numpy as np
import pytest
import torch

from gatedv_stats.io.lossfiles import read_loss_file
from helpers import assert_refused, invoke
from tiny_hf import save_byte_gpt2, train_and_export
from trainer.data.prepared import PreparedData
from trainer.hf.evaluate import token_windows


@pytest.fixture(scope="module")
def byte_model(tmp_path_factory):
    """A random GPT-2 over bytes (BOS <|endoftext|>) with 512 positions: longer texts need several windows."""
    return save_byte_gpt2(tmp_path_factory.mktemp("byte-gpt2") / "bytes", n_positions=512)


@pytest.fixture(scope="module")
def exported(prepared_data, tmp_path_factory):
    return train_and_export(prepared_data, tmp_path_factory.mktemp("exported"))


def _evaluate_hf(model, data, out, *args):
    result = invoke("evaluate", "--hf", model, "--data", data, "--out", out, "--device", "cpu", "--json", *args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout), read_loss_file(out)


def test_every_target_is_scored_once_with_the_context_the_window_allows():
    for length in range(2, 30):
        for first in range(1, length):
            for context in range(1, 10):
                for stride in range(1, context + 1):
                    windows = list(token_windows(length, first, context, stride))
                    scored = [j for _, a, b in windows for j in range(a, b)]
                    assert scored == list(range(first, length))
                    for start, a, b in windows:
                        assert 0 <= start <= a - 1 and b - 1 - start <= context  # inputs ids[start:b-1]
                        assert start == max(0, b - 1 - context)  # as far back as the window allows
                        assert a - start >= min(a, context - stride + 1)
    with pytest.raises(ValueError):
        list(token_windows(10, 2, 4, 5))


def _guide_nll(model, ids: torch.Tensor, max_length: int, stride: int) -> float:
    """The perplexity guide's loop of the transformers documentation, summing NLL over the scored labels."""
    total, previous_end = 0.0, 0
    for begin in range(0, ids.size(1), stride):
        end = min(begin + max_length, ids.size(1))
        target_length = end - previous_end
        inputs = ids[:, begin:end]
        targets = inputs.clone()
        targets[:, :-target_length] = -100
        with torch.no_grad():
            loss = model(inputs, labels=targets).loss
        total += loss.item() * (targets[:, 1:] != -100).sum().item()  # labels are shifted inside the model
        previous_end = end
        if end == ids.size(1):
            break
    return total


def _text_of(unit: str, n_bytes: int) -> str:
    """`unit` repeated, padded with "x" to exactly `n_bytes` UTF-8 bytes."""
    text = unit * (n_bytes // len(unit.encode("utf-8")))
    return text + "x" * (n_bytes - len(text.encode("utf-8")))


def test_whole_documents_equal_the_transformers_perplexity_guide(byte_model, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # [BOS] + 700 or 820 byte tokens: the guide's last window (101 tokens, stride 60) is a full one, as ours is
    # always (ours reaches back a whole context where the guide's last window may start later).
    texts = {"a/one.txt": _text_of("Cafe\u0301 na\u00efve \u65e5\u672c \U0001f642 ", 700),
             "b/two.txt": _text_of("def f(x):\n    return x\n", 820), "c/empty.txt": "  \n"}
    for name, text in texts.items():
        (tmp_path / "corpus" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "corpus" / name).write_text(text, encoding="utf-8")
    summary, run = _evaluate_hf(byte_model, tmp_path / "corpus", tmp_path / "docs.parquet", "--context", "100",
                                "--stride", "60", "--batch-size", "3")
    model = AutoModelForCausalLM.from_pretrained(byte_model, local_files_only=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(byte_model, local_files_only=True)
    docs = run.docs.set_index("doc_id")
    assert sorted(docs.index) == ["a/one.txt", "b/two.txt"] and run.meta["empty_documents"] == 1
    for name in docs.index:
        ids = torch.tensor([[tokenizer.bos_token_id, *tokenizer(texts[name], add_special_tokens=False)["input_ids"]]])
        assert docs.loc[name, "loss_sum"] == pytest.approx(_guide_nll(model, ids, 101, 60), rel=1e-5)
        assert docs.loc[name, "n_bytes"] == docs.loc[name, "n_targets"] == len(texts[name].encode("utf-8"))
    assert run.meta["scored_as"] == "whole documents" and (run.meta["context"], run.meta["stride"]) == (100, 60)
    assert summary["bits_per_byte"] == pytest.approx(docs["loss_sum"].sum() / math.log(2) / docs["n_bytes"].sum())


def test_a_foreign_tokenizer_scores_the_window_text_after_bos_and_context(prepared_data, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = save_byte_gpt2(tmp_path / "wide", n_positions=2048, seed=1)  # every window fits: one pass each
    _, run = _evaluate_hf(model_dir, prepared_data, tmp_path / "heldout.parquet", "--eval-set", "heldout",
                          "--seed", "4")
    heldout = PreparedData.open(prepared_data).eval_set("heldout")
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    expected = []
    for context, target in zip(heldout.context_texts, heldout.target_texts):
        context_ids = tokenizer(context, add_special_tokens=False)["input_ids"]
        target_ids = tokenizer(target, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([tokenizer.bos_token_id, *context_ids, *target_ids])
        with torch.no_grad():
            log_probs = model(ids[None, :-1]).logits[0].double().log_softmax(-1)
        positions = torch.arange(len(ids) - len(target_ids) - 1, len(ids) - 1)
        expected.append(-log_probs[positions, ids[positions + 1]].sum().item())
    np.testing.assert_allclose(run.docs["loss_sum"], expected, rtol=1e-5)
    assert list(run.docs["doc_id"]) == heldout.doc_ids and list(run.docs["domain"]) == heldout.domains
    # One token per byte: the targets are exactly the window's target bytes.
    assert (run.docs["n_targets"] == run.docs["n_bytes"]).all() and list(run.docs["n_bytes"]) == list(heldout.n_bytes)
    meta = run.meta
    assert (meta["arm"], meta["seed"], meta["eval_set"], meta["dtype"]) == ("wide", 4, "heldout", "float32")
    assert meta["tokenizer_sha256"] == hashlib.sha256((model_dir / "tokenizer.json").read_bytes()).hexdigest()
    assert meta["tokenizer_sha256"] != PreparedData.open(prepared_data).tokenizer_sha256
    assert meta["model_weights_sha256"] == hashlib.sha256((model_dir / "model.safetensors").read_bytes()).hexdigest()
    assert meta["eval_set_sha256"] == heldout.sha256 and meta["bos_token_id"] == tokenizer.bos_token_id
    assert meta["scored_as"] == "window text, encoded by the model's tokenizer" and meta["target_unit"] == "token"


@pytest.mark.slow
def test_the_exported_baseline_scores_exactly_what_gatedv_evaluate_scores(exported, prepared_data, tmp_path):
    checkpoint, model_dir = exported
    assert (model_dir / "tokenizer.json").read_bytes() == (prepared_data / "tokenizer.json").read_bytes()
    ours = invoke("evaluate", checkpoint, "--eval-set", "heldout", "--out", tmp_path / "ours.parquet",
                  "--device", "cpu")
    assert ours.exit_code == 0, ours.stderr
    ours = read_loss_file(tmp_path / "ours.parquet")
    _, theirs = _evaluate_hf(model_dir, prepared_data, tmp_path / "hf.parquet", "--eval-set", "heldout",
                             "--arm", "base")
    for column in ("doc_id", "n_targets", "n_bytes", "domain"):
        assert list(theirs.docs[column]) == list(ours.docs[column])
    relative = np.abs(theirs.docs["loss_sum"] / ours.docs["loss_sum"] - 1).max()
    print(f"export-hf vs checkpoint: max relative difference of the loss sums {relative:.3g}")
    assert relative <= 1e-6
    assert theirs.meta["scored_as"] == "stored token ids" and theirs.meta["arm"] == "base"
    for key in ("tokenizer_sha256", "eval_set_sha256", "data_manifest_sha256"):
        assert theirs.meta[key] == ours.meta[key], key

    # The same tokenizer saved differently is another file: its text path encodes context and target apart,
    # which gives the stored ids for most windows, and then the same loss.
    copy = tmp_path / "resaved"
    shutil.copytree(model_dir, copy)
    (copy / "tokenizer.json").write_text(json.dumps(json.loads((copy / "tokenizer.json").read_text()), indent=1))
    _, text_run = _evaluate_hf(copy, prepared_data, tmp_path / "text.parquet", "--eval-set", "heldout")
    heldout = PreparedData.open(prepared_data).eval_set("heldout")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(copy, local_files_only=True)
    same = [tokenizer(context)["input_ids"] + tokenizer(target)["input_ids"] == row.tolist()
            for context, target, row in zip(heldout.context_texts, heldout.target_texts, heldout.tokens)]
    assert sum(same) >= len(same) // 2 and text_run.meta["scored_as"] != "stored token ids"
    np.testing.assert_allclose(text_run.docs["loss_sum"][same], ours.docs["loss_sum"][same], rtol=1e-5)


@pytest.mark.slow
def test_without_bos_the_first_character_of_a_document_is_context(exported, tmp_path):
    _, model_dir = exported
    text = "import os\nprint(os.getcwd())  # \u00e9t\u00e9\n" * 20
    (tmp_path / "docs.jsonl").write_text(json.dumps({"id": "d1", "text": text}) + "\n", encoding="utf-8")
    _, run = _evaluate_hf(model_dir, tmp_path / "docs.jsonl", tmp_path / "out.parquet")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    assert run.docs["n_bytes"].tolist() == [len(text[1:].encode("utf-8"))]
    assert run.docs["n_targets"].tolist() == [len(tokenizer(text[1:])["input_ids"])]
    assert run.meta["bos_token_id"] is None and run.meta["context"] == 256 and run.meta["stride"] == 128


def _break_model_dir(byte_model, tmp_path, how: str):
    target = tmp_path / how
    if how == "empty":
        target.mkdir()
    else:
        shutil.copytree(byte_model, target)
        for name in {"no-tokenizer": ("tokenizer.json", "tokenizer_config.json"),
                     "no-weights": ("model.safetensors",)}[how]:
            (target / name).unlink()
    return target


@pytest.mark.parametrize(("how", "message"), [
    ("empty", "not a transformers model directory (no config.json)"),
    ("no-tokenizer", "holds no tokenizer (tokenizer.json, or a slow tokenizer's"),
    ("no-weights", "holds no model weights (*.safetensors or pytorch_model*.bin)"),
])
def test_a_directory_that_is_not_a_whole_model_is_refused(byte_model, prepared_data, tmp_path, how, message):
    model_dir = _break_model_dir(byte_model, tmp_path, how)
    _assert_refused(["evaluate", "--hf", model_dir, "--data", prepared_data], tmp_path, f"{model_dir}: {message}")


def _assert_refused(args, tmp_path, message):
    out = tmp_path / "x.parquet"
    assert_refused(invoke(*args, "--out", out), out, message)


def test_an_old_data_directory_names_the_fix(byte_model, prepared_data, tmp_path):
    old = tmp_path / "old-data"
    shutil.copytree(prepared_data, old)
    manifest = json.loads((old / "manifest.json").read_text())
    (old / "manifest.json").write_text(json.dumps({**manifest, "format": "gatedv-data-1"}))
    _assert_refused(["evaluate", "--hf", byte_model, "--data", old], tmp_path,
                    f"error: {old}: prepared by an older gatedv (gatedv-data-1); run gatedv prepare --force")


@pytest.mark.slow
def test_bad_flags_and_corpora_are_one_line(byte_model, exported, prepared_data, tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"id": "a", "text": "fine"}\n{"id": "b", "text": \n', encoding="utf-8")
    checkpoint, _ = exported
    hf = ["evaluate", "--hf", byte_model, "--data", prepared_data]
    cases = [
        (["evaluate", "--hf", byte_model, "--data", tmp_path / "bad.jsonl"],
         f"{tmp_path / 'bad.jsonl'}:2: invalid JSON"),
        (["evaluate", "--hf", byte_model, "--data", tmp_path / "bad.jsonl", "--eval-set", "dev"],
         "--eval-set: only with a prepared data directory"),
        ([*hf, "--context", "8", "--stride", "9"], "--stride: must be at most the context, 8 (got 9)"),
        ([*hf, "--dtype", "float64"], "--dtype: must be one of float32, bfloat16, float16 (got 'float64')"),
        ([*hf, "--batch-size", "0"], "--batch-size: must be at least 1 (got 0)"),
        ([*hf, "--bf16"], "--bf16: only with a checkpoint (with --hf use --dtype)"),
        (["evaluate", "--hf", byte_model], "--data: --hf needs a data directory or a corpus to score"),
        (["evaluate", checkpoint, "--hf", byte_model], "give a checkpoint, or --hf MODEL_DIR instead of one"),
        (["evaluate", checkpoint, "--dtype", "bfloat16", "--arm", "x"], "--dtype, --arm: only with --hf"),
    ]
    for args, message in cases:
        _assert_refused(args, tmp_path, message)


def test_a_cache_snapshot_names_its_repository_and_revision_and_bfloat16_is_recorded(byte_model, tmp_path):
    revision = "0123456789abcdef0123456789abcdef01234567"
    snapshot = tmp_path / "hub" / "models--someone--tiny-bytes" / "snapshots" / revision
    shutil.copytree(byte_model, snapshot)
    (tmp_path / "docs.jsonl").write_text(json.dumps({"id": "d", "text": "hello world " * 30}) + "\n")
    _, full = _evaluate_hf(snapshot, tmp_path / "docs.jsonl", tmp_path / "fp32.parquet")
    _, half = _evaluate_hf(snapshot, tmp_path / "docs.jsonl", tmp_path / "bf16.parquet", "--dtype", "bfloat16")
    assert (full.arm, full.meta["model_revision"], full.meta["dtype"]) == ("tiny-bytes", revision, "float32")
    assert half.meta["dtype"] == "bfloat16" and half.meta["model_weights_sha256"] == full.meta["model_weights_sha256"]
    assert half.docs["loss_sum"][0] == pytest.approx(full.docs["loss_sum"][0], rel=2e-2)
    assert half.docs["loss_sum"][0] != full.docs["loss_sum"][0]


def test_a_model_that_sees_later_tokens_is_refused(byte_model, tmp_path):
    from tiny_hf import save_byte_bert

    (tmp_path / "docs.jsonl").write_text(json.dumps({"id": "d", "text": "hello world " * 5}) + "\n")
    masked = save_byte_bert(tmp_path / "masked-lm")
    args = ["evaluate", "--hf", masked, "--data", tmp_path / "docs.jsonl"]
    # float32: the forward pass shows the leak; a half precision could hide this random model's small one in its
    # rounding, and the config (an encoder's without is_decoder) refuses it.
    result = invoke(*args, "--out", tmp_path / "x.parquet")
    assert result.exit_code == 2 and not (tmp_path / "x.parquet").exists(), result.output
    assert re.fullmatch(rf"error: {re.escape(str(masked))}: not a causal language model: its prediction at position "
                        r"1 changes with a later token \(its logits move by up to 0\.0\d+ when token 2 changes; "
                        r"float noise stays within 0\.0001\)\n", result.stderr), result.stderr
    _assert_refused([*args, "--dtype", "bfloat16"], tmp_path,
                    f"error: {masked}: not a causal language model: its config is a bert encoder's without "
                    "is_decoder, so each position attends to the later tokens too\n")
    decoder = save_byte_bert(tmp_path / "decoder", decoder=True)
    result, _ = _evaluate_hf(decoder, tmp_path / "docs.jsonl", tmp_path / "decoder.parquet")
    assert result["n_docs"] == 1


@pytest.mark.parametrize(("n_layer", "message"), [
    (3, "its weights do not fit its config (GPT2LMHeadModel): 12 of the model's weights are missing from its weight "
        "files (left random): transformer.h.2.attn.c_attn.bias, transformer.h.2.attn.c_attn.weight, "
        "transformer.h.2.attn.c_proj.bias, ..."),
    (1, "its weights do not fit its config (GPT2LMHeadModel): 11 weights in its weight files are not in the model: "
        "transformer.h.1.attn.c_attn.weight, transformer.h.1.attn.c_proj.bias, transformer.h.1.attn.c_proj.weight, "
        "..."),
])
def test_weights_that_do_not_fill_the_configured_model_are_refused(byte_model, prepared_data, tmp_path, n_layer,
                                                                  message):
    model_dir = tmp_path / "model"
    shutil.copytree(byte_model, model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps({**config, "n_layer": n_layer}))
    _assert_refused(["evaluate", "--hf", model_dir, "--data", prepared_data], tmp_path,
                    f"error: {model_dir}: {message}\n")


@pytest.mark.slow
def test_a_context_past_the_models_positions_is_refused(byte_model, exported, prepared_data, tmp_path):
    _, exported_hf = exported
    for model, context, maximum in ((byte_model, 513, "512 positions (n_positions)"),
                                    (exported_hf, 1000, "256 positions (max_position_embeddings)")):
        _assert_refused(["evaluate", "--hf", model, "--data", prepared_data, "--context", context], tmp_path,
                        f"error: --context: {context} exceeds the model's maximum of {maximum}\n")


def test_an_empty_arm_is_refused_before_scoring(byte_model, prepared_data, tmp_path):
    for arm in ("", "  "):
        _assert_refused(["evaluate", "--hf", byte_model, "--data", prepared_data, "--arm", arm], tmp_path,
                        "error: --arm: must name the arm (a non-empty name); without --arm it is the model "
                        "directory's name\n")
