"""`gatedv import lm-eval` on logs written by lm-evaluation-harness itself (its `lm_eval` command on local task
YAMLs over the held-out set's target text, offline, with a tiny local GPT-2 over bytes), and the end-to-end
comparison of models with different tokenizers: two `evaluate --hf` files and a harness log pair by document."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest

from gatedv_stats.io.lossfiles import read_loss_file
from helpers import assert_refused, invoke
from tiny_hf import run_harness, save_byte_gpt2, save_random_llama, train_and_export
from trainer.data.prepared import PreparedData


@pytest.fixture(scope="module")
def harness(prepared_data, tmp_path_factory):
    """The harness's sample logs (rolling loglikelihood, multiple choice, generation) of the held-out documents'
    target text under a random byte-level GPT-2 with 512 positions (so a document spans several windows)."""
    root = tmp_path_factory.mktemp("harness")
    model = save_byte_gpt2(root / "bytes", n_positions=512)
    heldout = PreparedData.open(prepared_data).eval_set("heldout")
    documents = [{"id": doc_id, "text": text} for doc_id, text in zip(heldout.doc_ids, heldout.target_texts)]
    return {"model": model, "heldout": heldout, "jsonl": root / "run" / "documents.jsonl",
            **run_harness(model, documents, root / "run")}


def _ok(*args):
    result = invoke(*args)
    assert result.exit_code == 0, result.stderr
    return result


def _assert_refused(args, out, *messages):
    assert_refused(invoke(*args), out, *messages)


@pytest.mark.slow
def test_a_harness_log_becomes_one_loss_file_row_per_document(harness, tmp_path):
    out = tmp_path / "harness.parquet"
    summary = json.loads(_ok("import", "lm-eval", harness["rolling"], "--arm", "bytes", "--seed", "3", "--out", out,
                             "--json").stdout)
    run = read_loss_file(out)
    heldout = harness["heldout"]
    logged = [json.loads(line) for line in harness["rolling"].read_text(encoding="utf-8").splitlines()]
    assert list(run.docs["doc_id"]) == [sample["doc"]["id"] for sample in logged] == heldout.doc_ids
    np.testing.assert_array_equal(run.docs["loss_sum"], [-sample["bits_per_byte"][0] for sample in logged])
    assert list(run.docs["n_bytes"]) == list(heldout.n_bytes)
    # The harness counts words as the pieces of a split at runs of whitespace.
    assert list(run.docs["n_targets"]) == [len(re.split(r"\s+", text)) for text in heldout.target_texts]
    meta = run.meta
    assert (meta["arm"], meta["seed"], meta["target_unit"], meta["loss_unit"]) == ("bytes", 3, "word", "nats")
    assert meta["lm_eval_tasks"] == ["gatedv_rolling"] and meta["doc_id_field"] == "doc.id"
    assert meta["lm_eval_files"][0]["run"]["model_name"] == str(harness["model"])
    assert summary["bits_per_byte"] == pytest.approx(run.docs["loss_sum"].sum() / np.log(2) / heldout.n_bytes.sum())


@pytest.mark.slow
def test_the_harness_likelihood_equals_evaluate_hf_with_its_windows(harness, tmp_path):
    """The harness scores [EOT] + the document in disjoint windows of the model's length: `evaluate --hf` on the
    same JSONL with --context 512 --stride 512 scores the same tokens with the same inputs."""
    _ok("import", "lm-eval", harness["rolling"], "--arm", "bytes", "--out", tmp_path / "harness.parquet")
    _ok("evaluate", "--hf", harness["model"], "--data", harness["jsonl"], "--context", "512", "--stride", "512",
        "--device", "cpu", "--out", tmp_path / "ours.parquet")
    theirs = read_loss_file(tmp_path / "harness.parquet").docs.set_index("doc_id")
    ours = read_loss_file(tmp_path / "ours.parquet").docs.set_index("doc_id").loc[theirs.index]
    np.testing.assert_allclose(ours["loss_sum"], theirs["loss_sum"], rtol=1e-6)  # the harness sums float32
    assert (ours["n_bytes"] == theirs["n_bytes"]).all()


@pytest.mark.parametrize(("kind", "task"), [("multiple_choice", "a multiple-choice task"),
                                            ("generation", "a generation (generate_until) task")])
@pytest.mark.slow
def test_logs_of_other_task_types_are_refused(harness, tmp_path, kind, task):
    out = tmp_path / "x.parquet"
    _assert_refused(["import", "lm-eval", harness[kind], "--arm", "a", "--out", out], out,
                    f"{harness[kind]}:1: a sample of {task}", "only rolling-loglikelihood (perplexity) tasks")


@pytest.mark.slow
def test_bad_logs_name_the_file_and_line(harness, tmp_path):
    lines = harness["rolling"].read_text(encoding="utf-8").splitlines()
    corrupt = tmp_path / "corrupt.jsonl"
    corrupt.write_text("\n".join([*lines[:2], '{"doc_id": 2, "doc": {', *lines[3:]]) + "\n", encoding="utf-8")
    out = tmp_path / "x.parquet"
    base = ["--arm", "a", "--out", out]
    _assert_refused(["import", "lm-eval", corrupt, *base], out, f"{corrupt}:3: invalid JSON")
    _assert_refused(["import", "lm-eval", harness["rolling"], harness["rolling"], *base], out,
                    f"{harness['rolling']}:1: document {harness['heldout'].doc_ids[0]!r} appears again")
    _assert_refused(["import", "lm-eval", harness["rolling"], *base, "--id-field", "url"], out,
                    f"{harness['rolling']}:1: the logged document has no 'url' field (its fields: id, text)")
    _assert_refused(["import", "lm-eval", tmp_path / "none.jsonl", *base], out, "none.jsonl: no such file")
    _assert_refused(["import", "lm-eval", harness["rolling"], "--arm", " ", "--out", out], out,
                    "--arm: must name the arm")
    # The harness's own doc_id (the position in the task's dataset) when the documents carry no id.
    _ok("import", "lm-eval", harness["rolling"], *base, "--id-field", "")
    assert list(read_loss_file(out).docs["doc_id"]) == [str(i) for i in range(len(lines))]


@pytest.fixture(scope="module")
def three_files(harness, prepared_data, tmp_path_factory):
    """Held-out loss files of models with different tokenizers: our exported baseline (Llama, our BPE), the
    byte-level GPT-2 (`evaluate --hf`) and the harness's log of the byte-level GPT-2 (`import lm-eval`)."""
    root = tmp_path_factory.mktemp("three")
    _, llama = train_and_export(prepared_data, root)
    files = {"llama": root / "llama.parquet", "bytes": root / "bytes.parquet", "harness": root / "harness.parquet"}
    for name, model in (("llama", llama), ("bytes", harness["model"])):
        _ok("evaluate", "--hf", model, "--data", prepared_data, "--eval-set", "heldout", "--device", "cpu",
            "--arm", name, "--out", files[name])
    _ok("import", "lm-eval", harness["rolling"], "--arm", "harness", "--out", files["harness"])
    return {"root": root, "llama_dir": llama, **files}


@pytest.mark.slow
def test_models_with_different_tokenizers_and_a_harness_log_pair_by_document(three_files, harness, prepared_data):
    runs = {name: read_loss_file(three_files[name]) for name in ("llama", "bytes", "harness")}
    heldout = harness["heldout"]
    frames = {name: run.docs.set_index("doc_id").loc[heldout.doc_ids] for name, run in runs.items()}
    for name, frame in frames.items():
        assert sorted(frame.index) == sorted(heldout.doc_ids), name
        assert list(frame["n_bytes"]) == list(heldout.n_bytes), name  # the same bytes, whatever the tokenizer
    assert runs["llama"].meta["tokenizer_sha256"] == PreparedData.open(prepared_data).tokenizer_sha256
    assert runs["llama"].meta["tokenizer_sha256"] != runs["bytes"].meta["tokenizer_sha256"]
    assert runs["llama"].meta["eval_set_sha256"] == runs["bytes"].meta["eval_set_sha256"] == heldout.sha256
    assert (frames["llama"]["n_targets"] == 256).all() and (frames["bytes"]["n_targets"] == heldout.n_bytes).all()
    assert runs["harness"].meta["target_unit"] == "word" and runs["bytes"].meta["target_unit"] == "token"


@pytest.mark.slow
def test_bootstrap_compares_two_models_of_one_tokenizer(three_files, prepared_data, tmp_path):
    other = save_random_llama(tmp_path / "other", three_files["llama_dir"], seed=5)
    _ok("evaluate", "--hf", other, "--data", prepared_data, "--eval-set", "heldout", "--device", "cpu", "--out",
        tmp_path / "other.parquet")
    result = json.loads(_ok("bootstrap", "--baseline", three_files["llama"], "--variant", tmp_path / "other.parquet",
                            "--samples", "200", "--json").stdout)
    baseline, variant = read_loss_file(three_files["llama"]).docs, read_loss_file(tmp_path / "other.parquet").docs
    assert (result["baseline"]["arm"], result["variant"]["arm"], result["n_docs"]) == ("llama", "other", 8)
    expected = (variant["loss_sum"].sum() - baseline["loss_sum"].sum()) / baseline["n_targets"].sum()
    assert result["nll_diff_mean"] == pytest.approx(expected, rel=1e-9)


@pytest.mark.slow
def test_a_harness_log_with_other_documents_names_both_files(harness, three_files, tmp_path):
    lines = harness["rolling"].read_text(encoding="utf-8").splitlines()
    fewer = tmp_path / "samples_gatedv_rolling_fewer.jsonl"
    fewer.write_text("\n".join(lines[:-2]) + "\n", encoding="utf-8")
    _ok("import", "lm-eval", fewer, "--arm", "harness", "--out", tmp_path / "fewer.parquet")
    result = invoke("bootstrap", "--baseline", three_files["bytes"], "--variant", tmp_path / "fewer.parquet")
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "documents differ between paired runs" in result.stderr
    assert str(three_files["bytes"]) in result.stderr and str(tmp_path / "fewer.parquet") in result.stderr
    missing = sorted(pd.Series(harness["heldout"].doc_ids[-2:]))
    assert f"2 doc_ids missing from {tmp_path / 'fewer.parquet'} (first: {', '.join(missing)})" in result.stderr


@pytest.mark.slow
def test_bootstrap_across_tokenizers_compares_bits_per_byte_with_a_verdict(three_files):
    runs = {name: read_loss_file(three_files[name]).docs.set_index("doc_id") for name in ("llama", "bytes", "harness")}
    for baseline, variant in (("llama", "bytes"), ("bytes", "harness")):
        result = json.loads(_ok("bootstrap", "--baseline", three_files[baseline], "--variant", three_files[variant],
                                "--samples", "200", "--json").stdout)
        base, var = runs[baseline], runs[variant].loc[runs[baseline].index]
        expected = (var["loss_sum"].sum() - base["loss_sum"].sum()) / (math.log(2) * base["n_bytes"].sum())
        assert result["unit"] == "byte" and result["bits_per_byte_diff"] == pytest.approx(expected, rel=1e-9)
        assert result["verdict"] == "no detectable difference"  # one model each: nothing about new seeds
        assert "One seed pair" in result["verdict_explanation"]
    refused = invoke("bootstrap", "--baseline", three_files["llama"], "--variant", three_files["bytes"],
                     "--unit", "token")
    assert refused.exit_code == 2 and "not comparable" in refused.stderr


def _rolling_line(**changes) -> str:
    """One rolling-loglikelihood sample line: document "a", 2 words, 11 bytes, log-likelihood -12.5."""
    sample = {"doc_id": 0, "doc": {"id": "a"}, "arguments": {"gen_args_0": {"arg_0": "hello world"}},
              "word_perplexity": [-12.5, 2], "byte_perplexity": [-12.5, 11], "bits_per_byte": [-12.5, 11]}
    return json.dumps({**sample, **changes})


@pytest.mark.parametrize(("line", "message"), [
    (_rolling_line(word_perplexity=[-10**400, 2]), ":1: word_perplexity: log-likelihood -1000"),
    (_rolling_line(doc={"id": {"x": 1}}), ':1: doc.id must be a string or an integer, got {"x": 1}'),
    (_rolling_line(doc={"id": False}), ":1: doc.id must be a string or an integer, got false"),
    (_rolling_line(bits_per_byte=[-12.5, 99]), ":1: byte_perplexity and bits_per_byte record different byte counts"),
    (_rolling_line(word_perplexity=[-5000.0, 2], byte_perplexity=[-5000.0, 11], bits_per_byte=[-5000.0, 11]),
     ":1: loss_sum is more than 300 nats per target"),
    (json.dumps({"arguments": {"gen_args_0": {}}, "metrics": "acc"}), ':1: metrics must be a list or an object'),
    (json.dumps({"metrics": []}), ":1: a sample of an unknown task (metrics: none)"),
])
def test_bad_samples_are_refused_naming_the_log_line(tmp_path, line, message):
    log = tmp_path / "log.jsonl"
    log.write_text(line + "\n", encoding="utf-8")
    out = tmp_path / "x.parquet"
    _assert_refused(["import", "lm-eval", log, "--arm", "a", "--out", out], out, f"{log}{message}")


def test_a_directory_is_not_a_sample_log(tmp_path):
    out = tmp_path / "x.parquet"
    _assert_refused(["import", "lm-eval", tmp_path, "--arm", "a", "--out", out], out,
                    f"{tmp_path}: is a directory, not a sample log")


def test_a_boolean_is_not_a_log_likelihood(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text(_rolling_line(word_perplexity=[False, 2]) + "\n", encoding="utf-8")
    out = tmp_path / "x.parquet"
    _assert_refused(["import", "lm-eval", log, "--arm", "a", "--out", out], out,
                    f"{log}:1: word_perplexity must be [log-likelihood, count], got [false, 2]")


def test_samples_without_a_word_count_make_the_file_per_byte_with_a_warning(tmp_path):
    log = tmp_path / "log.jsonl"
    wordless = json.loads(_rolling_line(doc={"id": "b"}))
    del wordless["word_perplexity"]
    log.write_text(_rolling_line() + "\n" + json.dumps(wordless) + "\n", encoding="utf-8")
    out = tmp_path / "x.parquet"
    result = _ok("import", "lm-eval", log, "--arm", "a", "--out", out)
    assert result.stderr == (f"warning: 1 of 2 samples log no word count (word_perplexity; the first at {log}:2): "
                             "every document's targets are its bytes\n")
    run = read_loss_file(out)
    assert run.meta["target_unit"] == "byte" and list(run.docs["n_targets"]) == [11, 11]


def test_a_comparison_of_word_level_files_is_per_word(tmp_path):
    """Two models' harness logs of the same documents count words as targets: every figure says per word."""
    files = {}
    for arm, likelihood in (("a", -12.5), ("b", -11.0)):
        for seed in (1, 2, 3):
            scores = [likelihood - i - (0.3 * ((i * seed) % 4) if arm == "b" else 0.2 * ((i + seed) % 3))
                      for i in range(8)]
            lines = [_rolling_line(doc={"id": f"d{i}"}, word_perplexity=[score, 2], byte_perplexity=[score, 11],
                                   bits_per_byte=[score, 11]) for i, score in enumerate(scores)]
            log = tmp_path / f"{arm}{seed}.jsonl"
            log.write_text("\n".join(lines) + "\n", encoding="utf-8")
            files[arm, seed] = tmp_path / arm / f"{seed}.parquet"
            _ok("import", "lm-eval", log, "--arm", arm, "--seed", seed, "--out", files[arm, seed])
    args = ["bootstrap", "--baseline", tmp_path / "a", "--variant", tmp_path / "b", "--samples", 200]
    text = _ok(*args).stdout
    assert "nats per word" in text and "variance components (nats² per word)" in text and "per token" not in text
    assert json.loads(_ok(*args, "--json").stdout)["unit"] == "word"
    plan = _ok("plan", tmp_path / "a", tmp_path / "b", "--baseline-arm", "a", "--variant-arm", "b",
               "--effect", 0.02).stdout
    assert "per word" in plan and "per token" not in plan
