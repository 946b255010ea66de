"""Per-document evaluation: loss sums against a direct computation, the loss-file metadata of
docs/method-statistics.md §5, batching, --value-act."""

import hashlib
import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import cli
from gatedv_stats.io.lossfiles import read_loss_file
from trainer.data.prepared import PreparedData, write_eval_set
from trainer.model.transformer import Transformer, build_model, model_config
from trainer.run.checkpoint import load_checkpoint
from trainer.run.recipe import RunSpec, Runtime
from trainer.run.train import train


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


@pytest.mark.slow
def test_loss_sums_equal_a_direct_computation_with_the_spec_metadata(checkpoint, prepared_data, tmp_path):
    summary, run = _evaluate(checkpoint, tmp_path / "dev.parquet", "--eval-set", "dev")
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


@pytest.mark.slow
def test_value_act_override_changes_only_the_values(checkpoint, tmp_path):
    _, linear = _evaluate(checkpoint, tmp_path / "linear.parquet", "--eval-set", "heldout")
    _, swapped = _evaluate(checkpoint, tmp_path / "silu.parquet", "--eval-set", "heldout", "--value-act", "silu")
    # The same weights in a model built as GatedV (SiLU values, everything else the baseline's).
    gated = build_model(model_config("tiny", "gatedv"), 0)
    gated.load_state_dict(load_checkpoint(checkpoint).model.state_dict())
    heldout = PreparedData.open(load_checkpoint(checkpoint).extra["run"]["data"]).eval_set("heldout")
    np.testing.assert_allclose(swapped.docs["loss_sum"], _direct_loss_sums(gated, heldout.tokens), rtol=1e-5)
    assert not np.allclose(swapped.docs["loss_sum"], linear.docs["loss_sum"], rtol=1e-3)
    assert swapped.meta["value_act"] == "silu" and swapped.meta["trained_value_act"] == "linear"
    assert swapped.meta["eval_set"] == "heldout"


@pytest.mark.slow
def test_documents_go_through_in_batches(checkpoint, tmp_path, monkeypatch):
    _, whole = _evaluate(checkpoint, tmp_path / "whole.parquet", "--eval-set", "dev", "--batch-size", "16")
    sizes = []
    hidden_states = Transformer.hidden_states
    monkeypatch.setattr(Transformer, "hidden_states",
                        lambda self, idx: sizes.append(len(idx)) or hidden_states(self, idx))
    _, batched = _evaluate(checkpoint, tmp_path / "batched.parquet", "--eval-set", "dev", "--batch-size", "3")
    assert sizes == [3, 3, 2]  # 8 documents, never more than 3 windows of logits at once
    np.testing.assert_allclose(batched.docs["loss_sum"], whole.docs["loss_sum"], rtol=1e-6)


@pytest.mark.parametrize(("args", "message"), [
    (["--value-act", "tanh"], "--value-act: 'tanh' is not linear or silu"),
    (["--eval-set", "nowhere.parquet"], "--eval-set: 'nowhere.parquet' is neither a set of "),
    (["--eval-set", "held-out"], "(dev, heldout) nor an evaluation-set file"),
    (["--batch-size", "0"], "--batch-size: must be at least 1, got 0"),
])
@pytest.mark.slow
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


@pytest.mark.slow
def test_a_custom_set_with_foreign_token_ids_is_refused(checkpoint, prepared_data, tmp_path):
    dev = PreparedData.open(prepared_data).eval_set("dev")
    tokens = dev.tokens.copy()
    tokens[0, 5] = 9000
    path = tmp_path / "foreign.parquet"
    write_eval_set(path, "foreign", dev.doc_ids, dev.domains, tokens, dev.n_bytes)
    result = CliRunner().invoke(cli.app, ["evaluate", str(checkpoint), "--eval-set", str(path), "--out",
                                          str(tmp_path / "x.parquet")])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {path}: token id 9000 is outside the model's vocabulary of 8192"
    # The same set within the vocabulary evaluates under its own name.
    write_eval_set(path, "foreign", dev.doc_ids, dev.domains, dev.tokens, dev.n_bytes)
    summary, run = _evaluate(checkpoint, tmp_path / "custom.parquet", "--eval-set", str(path))
    assert run.meta["eval_set"] == "foreign" and summary["n_docs"] == len(dev.doc_ids)


def _refused(checkpoint, tmp_path, set_path):
    """The one `error:` line of an evaluation on the set file `set_path`; no loss file is written."""
    out = tmp_path / "refused.parquet"
    result = CliRunner().invoke(cli.app, ["evaluate", str(checkpoint), "--eval-set", str(set_path), "--out", str(out),
                                          "--device", "cpu"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert not out.exists()
    return lines[0]


def _with_column(table, name, values, kind=None):
    import pyarrow as pa

    return table.set_column(table.column_names.index(name), name, pa.array(values, kind))


@pytest.mark.parametrize(("change", "message"), [
    (lambda t, rows: _with_column(t, "tokens", [[float(i) + 0.5 for i in ids] for ids in rows]),
     "row 1: `tokens` must hold integer token ids (found double)"),
    (lambda t, rows: _with_column(t, "tokens", [[str(i) for i in ids] for ids in rows]),
     "row 1: `tokens` must hold integer token ids (found string)"),
    (lambda t, rows: _with_column(t, "tokens", [ids[0] for ids in rows]),
     "row 1: `tokens` must be a list of 257 token ids (found int64)"),
    (lambda t, rows: _with_column(t, "tokens", [[[i] for i in ids] for ids in rows]),
     "row 1: `tokens` must hold integer token ids (found list<element: int64>)"),
    (lambda t, rows: _with_column(t, "tokens", [ids if r != 1 else ids[:7] + [None] + ids[8:]
                                                for r, ids in enumerate(rows)]),
     "row 2: `tokens` holds a null at position 7"),
    (lambda t, rows: _with_column(t, "tokens", [ids if r != 2 else [-3] + ids[1:] for r, ids in enumerate(rows)]),
     "row 3: `tokens` holds a negative token id (-3)"),
    (lambda t, rows: _with_column(t, "n_bytes", [str(n) for n in t.column("n_bytes").to_pylist()]),
     "row 1: `n_bytes` must be an integer (found string)"),
    (lambda t, rows: _with_column(t, "n_bytes", [float(n) for n in t.column("n_bytes").to_pylist()]),
     "row 1: `n_bytes` must be an integer (found double)"),
    (lambda t, rows: _with_column(t, "n_bytes", [None if r == 2 else n for r, n in
                                                 enumerate(t.column("n_bytes").to_pylist())]),
     "row 3: `n_bytes` is null; it must be a positive integer"),
    (lambda t, rows: _with_column(t, "doc_id", [None if r == 3 else d for r, d in
                                                enumerate(t.column("doc_id").to_pylist())]),
     "row 4: `doc_id` is null; it must be a string"),
    (lambda t, rows: _with_column(t, "doc_id", [r + 0.5 for r in range(t.num_rows)]),
     "row 1: `doc_id` must be a string (found double)"),
    (lambda t, rows: _with_column(t, "domain", [None] * t.num_rows, "string"),
     "row 1: `domain` is null; it must be a string"),
], ids=["float-tokens", "string-tokens", "scalar-tokens", "nested-tokens", "null-in-tokens", "negative-token",
        "string-n_bytes", "float-n_bytes", "null-n_bytes", "null-doc_id", "float-doc_id", "null-domain"])
@pytest.mark.slow
def test_a_malformed_set_file_is_one_line_naming_the_row_and_field(checkpoint, prepared_data, tmp_path, change,
                                                                   message):
    import pyarrow.parquet as pq

    table = pq.read_table(prepared_data / "dev.parquet")
    path = tmp_path / "bad.parquet"
    pq.write_table(change(table, table.column("tokens").to_pylist()), path)
    assert _refused(checkpoint, tmp_path, path) == f"error: {path}: {message}"


def _without_metadata(source, target):
    import pyarrow.parquet as pq

    table = pq.read_table(source)
    pq.write_table(table.replace_schema_metadata(None), target)
    return target


@pytest.mark.slow
def test_a_set_file_tokenized_with_another_tokenizer_is_refused(checkpoint, prepared_data, web_corpus, tmp_path):
    from trainer.data.prepare import prepare

    other = prepare(str(web_corpus["jsonl"]), tmp_path / "other", eval_docs=3, vocab_size=320, progress=False)
    theirs, ours = other.manifest["tokenizer"]["sha256"], PreparedData.open(prepared_data).tokenizer_sha256
    tokenizer = prepared_data / "tokenizer.json"
    expected = (f"tokenized with another tokenizer (sha256 {theirs}, per {{}}) than the model's {tokenizer} "
                f"(sha256 {ours}); evaluate on a set prepared with the model's tokenizer")
    # the file records its tokenizer
    copied = tmp_path / "copied.parquet"
    copied.write_bytes((tmp_path / "other" / "dev.parquet").read_bytes())
    assert _refused(checkpoint, tmp_path, copied) == f"error: {copied}: " + expected.format("its metadata")
    # a file without that record, inside the data directory whose manifest lists it
    listed = _without_metadata(tmp_path / "other" / "dev.parquet", tmp_path / "other" / "dev.parquet")
    assert _refused(checkpoint, tmp_path, listed) == \
        f"error: {listed}: " + expected.format(tmp_path / "other" / "manifest.json")
    # a file that records nothing: its tokens do not spell its window texts under the model's tokenizer
    bare = _without_metadata(listed, tmp_path / "bare.parquet")
    assert _refused(checkpoint, tmp_path, bare) == (
        f"error: {bare}: row 1: `tokens` do not spell the window's text under the model's tokenizer {tokenizer} "
        f"(sha256 {ours}); the set was tokenized with another tokenizer")
    # the model's own sets pass every one of these checks
    own = _without_metadata(prepared_data / "heldout.parquet", tmp_path / "own.parquet")
    dev = PreparedData.open(prepared_data).eval_set("dev")
    for path in (prepared_data / "dev.parquet", own):
        summary, run = _evaluate(checkpoint, tmp_path / f"{path.stem}-loss.parquet", "--eval-set", str(path))
        assert summary["n_docs"] == len(dev)
