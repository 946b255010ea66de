"""`gatedv import lm-eval` on logs written by lm-evaluation-harness itself (its `lm_eval` command on local task
YAMLs over the held-out set's target text, offline, with a tiny local GPT-2 over bytes), and the end-to-end
comparison of models with different tokenizers: two `evaluate --hf` files and a harness log pair by document."""

from __future__ import annotations

import hashlib
import json
import math
import re

import numpy as np
import pandas as pd
import pytest

from gatedv_stats.io.itemfiles import read_item_inputs
from gatedv_stats.io.lossfiles import read_loss_file
from harness_logs import DATE, MC_LINES, gen_line, harness_run, ll_line, mc_line, rolling_line, write_log
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


@pytest.mark.parametrize("kind", ["multiple_choice", "generation"])
@pytest.mark.slow
def test_logs_of_other_task_types_become_item_score_files(harness, tmp_path, kind):
    out = tmp_path / "x.parquet"
    assert _ok("import", "lm-eval", harness[kind], "--arm", "a", "--out", out).stderr == ""  # checked, no warning
    (run,) = read_item_inputs([out])
    assert run.task == f"gatedv_{kind}" and run.units["doc_id"].tolist() == harness["heldout"].doc_ids
    assert run.meta["doc_id_field"] == "doc.id"


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
    result = invoke("bootstrap", "--baseline", three_files["bytes"], "--variant", tmp_path / "fewer.parquet",
                    "--allow-mismatch", "scoring")
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "documents differ between paired runs" in result.stderr
    assert str(three_files["bytes"]) in result.stderr and str(tmp_path / "fewer.parquet") in result.stderr
    missing = sorted(pd.Series(harness["heldout"].doc_ids[-2:]))
    assert f"2 doc_ids missing from {tmp_path / 'fewer.parquet'} (first: {', '.join(missing)})" in result.stderr


@pytest.mark.slow
def test_bootstrap_across_tokenizers_compares_bits_per_byte_with_a_verdict(three_files):
    runs = {name: read_loss_file(three_files[name]).docs.set_index("doc_id") for name in ("llama", "bytes", "harness")}
    # The harness scores each text after BOS alone, `evaluate` after its window's context: compared only on request.
    refused = invoke("bootstrap", "--baseline", three_files["bytes"], "--variant", three_files["harness"])
    assert refused.exit_code == 2 and "scoring differs" in refused.stderr
    for baseline, variant in (("llama", "bytes"), ("bytes", "harness")):
        result = json.loads(_ok("bootstrap", "--baseline", three_files[baseline], "--variant", three_files[variant],
                                "--samples", "200", "--json", "--allow-mismatch", "scoring").stdout)
        base, var = runs[baseline], runs[variant].loc[runs[baseline].index]
        expected = (var["loss_sum"].sum() - base["loss_sum"].sum()) / (math.log(2) * base["n_bytes"].sum())
        assert result["unit"] == "byte" and result["bits_per_byte_diff"] == pytest.approx(expected, rel=1e-9)
        assert result["verdict"] == "no detectable difference"  # one model each: nothing about new seeds
        assert "One seed pair" in result["verdict_explanation"]
    refused = invoke("bootstrap", "--baseline", three_files["llama"], "--variant", three_files["bytes"],
                     "--unit", "token")
    assert refused.exit_code == 2 and "not comparable" in refused.stderr


@pytest.mark.parametrize(("line", "message"), [
    (rolling_line(word_perplexity=[-10**400, 2]), ":1: word_perplexity: log-likelihood -1000"),
    (rolling_line(doc={"id": {"x": 1}}), ':1: doc.id must be a string or an integer, got {"x": 1}'),
    (rolling_line(doc={"id": False}), ":1: doc.id must be a string or an integer, got false"),
    (rolling_line(bits_per_byte=[-12.5, 99]), ":1: byte_perplexity and bits_per_byte record different byte counts"),
    (rolling_line(word_perplexity=[-5000.0, 2], byte_perplexity=[-5000.0, 11], bits_per_byte=[-5000.0, 11]),
     ":1: loss_sum is more than 300 nats per target"),
    (json.dumps({"arguments": {"gen_args_0": {}}, "metrics": "acc"}), ':1: metrics must be a list or an object'),
    (json.dumps({"metrics": []}), ":1: a sample of an unknown task (metrics: none)"),
])
def test_bad_samples_are_refused_naming_the_log_line(tmp_path, line, message):
    log = tmp_path / "log.jsonl"
    log.write_text(line + "\n", encoding="utf-8")
    out = tmp_path / "x.parquet"
    _assert_refused(["import", "lm-eval", log, "--arm", "a", "--out", out], out, f"{log}{message}")


def test_a_directory_without_a_results_file_is_refused(tmp_path):
    out = tmp_path / "x"
    _assert_refused(["import", "lm-eval", tmp_path, "--arm", "a", "--out", out], out,
                    f"{tmp_path}: no lm-evaluation-harness results files (results_<date>.json)")


def test_a_boolean_is_not_a_log_likelihood(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text(rolling_line(word_perplexity=[False, 2]) + "\n", encoding="utf-8")
    out = tmp_path / "x.parquet"
    _assert_refused(["import", "lm-eval", log, "--arm", "a", "--out", out], out,
                    f"{log}:1: word_perplexity must be [log-likelihood, count], got [false, 2]")


def test_samples_without_a_word_count_make_the_file_per_byte_with_a_warning(tmp_path):
    log = tmp_path / "log.jsonl"
    wordless = json.loads(rolling_line(doc={"id": "b"}))
    del wordless["word_perplexity"]
    log.write_text(rolling_line() + "\n" + json.dumps(wordless) + "\n", encoding="utf-8")
    out = tmp_path / "x.parquet"
    result = _ok("import", "lm-eval", log, "--arm", "a", "--out", out)
    assert result.stderr == (f"warning: 1 of 2 samples log no word count (word_perplexity; the first at {log}:2): "
                             "every document's targets are its bytes\n")
    run = read_loss_file(out)
    assert run.meta["target_unit"] == "byte" and list(run.docs["n_targets"]) == [11, 11]


def test_a_comparison_of_word_level_files_is_per_word(tmp_path):
    """Two models' harness logs of the same documents count words as targets: every figure says per word."""
    files, arm_scores = {}, {}
    for arm, likelihood in (("a", -12.5), ("b", -11.0)):
        for seed in (1, 2, 3):
            scores = [likelihood - i - (0.3 * ((i * seed) % 4) if arm == "b" else 0.2 * ((i + seed) % 3))
                      for i in range(8)]
            arm_scores[arm, seed] = scores
            lines = [rolling_line(doc={"id": f"d{i}"}, word_perplexity=[score, 2], byte_perplexity=[score, 11],
                                   bits_per_byte=[score, 11]) for i, score in enumerate(scores)]
            log = tmp_path / f"{arm}{seed}.jsonl"
            log.write_text("\n".join(lines) + "\n", encoding="utf-8")
            files[arm, seed] = tmp_path / arm / f"{seed}.parquet"
            _ok("import", "lm-eval", log, "--arm", arm, "--seed", seed, "--out", files[arm, seed])
    args = ["bootstrap", "--baseline", tmp_path / "a", "--variant", tmp_path / "b", "--samples", 200]
    text = _ok(*args).stdout
    assert "nats per word" in text and "variance components (nats² per word)" in text and "per token" not in text
    verdict_line = next(line for line in text.splitlines() if line.startswith("verdict: "))
    assert verdict_line.endswith(" (per word)")
    bits = {arm: np.mean([sum(-score for score in arm_scores[arm, seed]) / (11 * 8) / np.log(2) for seed in (1, 2, 3)])
            for arm in ("a", "b")}  # every document has 11 bytes
    assert (f"bits per byte of the same text: {bits['a']:.4f} vs {bits['b']:.4f}, difference "
            f"{bits['b'] - bits['a']:+.5f}") in text
    assert json.loads(_ok(*args, "--json").stdout)["unit"] == "word"
    plan = _ok("plan", tmp_path / "a", tmp_path / "b", "--baseline-arm", "a", "--variant-arm", "b",
               "--effect", 0.02).stdout
    assert "per word" in plan and "per token" not in plan


# --- downstream tasks: hand-made logs of each output type, checked against hand-computed values ---

def test_a_multiple_choice_log_gives_acc_and_the_gold_choice_loglikelihood_and_margin(tmp_path):
    log = write_log(tmp_path / "mc.jsonl", MC_LINES)
    result = _ok("import", "lm-eval", log, "--arm", "a", "--seed", "2", "--out", tmp_path / "mc.parquet")
    assert "no results file beside it" in result.stderr
    (run,) = read_item_inputs([tmp_path / "mc.parquet"])
    assert (run.arm, run.seed, run.task, run.meta['n_shot']) == ("a", 2, "mc", None)
    assert tuple(run.meta['metrics']) == ("acc", "acc_norm", "gold_loglik", "gold_margin")
    items = run.units
    assert items["doc_id"].tolist() == ["0", "1", "2"] and items["doc_hash"].tolist() == ["d0", "d1", "d2"]
    assert items["acc"].tolist() == [0.0, 1.0, 1.0]
    assert items["gold_loglik"].tolist() == [-2.0, -1.25, -0.5]
    assert items["gold_margin"].tolist() == [-2.0 - -1.25, -1.25 - -2.0, -0.5 - -2.5]
    assert run.meta["doc_id_field"] == "doc_id" and run.meta["output_type"] == "multiple_choice"


def test_a_loglikelihood_log_gives_is_greedy_and_the_loglikelihood(tmp_path):
    log = write_log(tmp_path / "ll.jsonl", [ll_line(0, -4.5, True), ll_line(1, -9.25, False)])
    _ok("import", "lm-eval", log, "--arm", "a", "--out", tmp_path / "ll.parquet")
    (run,) = read_item_inputs([tmp_path / "ll.parquet"])
    assert tuple(run.meta['metrics']) == ("acc", "loglik")
    assert run.units["acc"].tolist() == [1.0, 0.0] and run.units["loglik"].tolist() == [-4.5, -9.25]


def test_a_generation_log_of_two_filters_names_metrics_by_filter(tmp_path):
    lines = [gen_line(0, "raw", 0.0), gen_line(0, "strip", 1.0), gen_line(1, "raw", 1.0),
             gen_line(1, "strip", 1.0)]
    _ok("import", "lm-eval", write_log(tmp_path / "g.jsonl", lines), "--arm", "a", "--out", tmp_path / "g.parquet")
    (run,) = read_item_inputs([tmp_path / "g.parquet"])
    assert tuple(run.meta['metrics']) == ("exact_match,raw", "exact_match,strip")
    assert run.units["exact_match,raw"].tolist() == [0.0, 1.0] and run.units["exact_match,strip"].tolist() == [1, 1]
    assert run.meta['higher_is_better'] == {"exact_match,raw": True, "exact_match,strip": True}


def test_a_results_directory_imports_every_task_and_a_group_in_one_call(tmp_path):
    sub_a, sub_b = MC_LINES[:2], [mc_line(0, [-1.0, -2.0], 0), mc_line(1, [-1.0, -2.0], 1)]
    tasks = {"mc": ("multiple_choice", MC_LINES), "ll": ("loglikelihood", [ll_line(0, -4.5, True)]),
             "sub_a": ("multiple_choice", sub_a), "sub_b": ("multiple_choice", sub_b),
             "roll": ("loglikelihood_rolling", [json.loads(rolling_line())])}
    run_dir = harness_run(tmp_path / "out" / "model", tasks, {"grp": ["sub_a", "sub_b"]})
    summary = json.loads(_ok("import", "lm-eval", tmp_path / "out", "--arm", "a", "--seed", "1", "--out",
                             tmp_path / "imported", "--json").stdout)
    assert [f["task"] for f in summary["files"]] == ["ll", "mc", "roll", "grp"]
    assert sorted(p.name for p in (tmp_path / "imported").iterdir()) == ["grp.parquet", "ll.parquet", "mc.parquet",
                                                                         "roll.parquet"]
    runs = {run.task: run for run in read_item_inputs([tmp_path / "imported"])}
    group = runs["grp"]
    assert group.units["doc_id"].tolist() == ["sub_a/0", "sub_a/1", "sub_b/0", "sub_b/1"]
    assert group.units["subtask"].tolist() == ["sub_a", "sub_a", "sub_b", "sub_b"]
    assert group.units["acc"].tolist() == [0.0, 1.0, 1.0, 0.0] and group.meta["subtasks"] == ["sub_a", "sub_b"]
    configs = json.loads((run_dir / f"results_{DATE}.json").read_text())["configs"]
    expected = hashlib.sha256(json.dumps({k: v for k, v in configs["mc"].items() if k != "metadata"},
                                         sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert runs["mc"].meta["task_config_sha256"] == expected and runs["mc"].meta['n_shot'] == 0
    assert read_loss_file(tmp_path / "imported" / "roll.parquet").meta["scoring"] == "bos"
    # The single-file form finds the results file beside the log and checks against it.
    assert _ok("import", "lm-eval", run_dir / f"samples_mc_{DATE}.jsonl", "--arm", "a", "--out",
               tmp_path / "mc.parquet").stderr == ""


def _refused_dir(tmp_path, tasks, *messages, groups=None, edit=None):
    run_dir = harness_run(tmp_path / "run", tasks, groups)
    if edit is not None:
        path = run_dir / f"results_{DATE}.json"
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))
    _assert_refused(["import", "lm-eval", run_dir, "--arm", "a", "--out", tmp_path / "o"], tmp_path / "o",
                    *messages)


def test_an_accuracy_other_than_the_reported_one_is_refused(tmp_path):
    _refused_dir(tmp_path, {"mc": ("multiple_choice", MC_LINES)},
                 f"samples_mc_{DATE}.jsonl: the mean acc of the logged items (0.6666666666666666) differs from the "
                 "0.6 that", "reports for mc (acc,none)",
                 edit=lambda data: data["results"]["mc"].update({"acc,none": 0.6}))


def test_a_group_value_other_than_its_subtasks_is_refused(tmp_path):
    tasks = {"sub_a": ("multiple_choice", MC_LINES[:2]), "sub_b": ("multiple_choice", MC_LINES[2:])}
    _refused_dir(tmp_path, tasks, "group grp reports acc,none 0.25, but its subtasks' logged items give",
                 groups={"grp": ["sub_a", "sub_b"]},
                 edit=lambda data: data["results"]["grp"].update({"acc,none": 0.25}))


def test_a_log_of_another_run_than_its_results_file_is_refused(tmp_path):
    _refused_dir(tmp_path, {"mc": ("multiple_choice", MC_LINES)}, "do not match the task_hashes entry of mc",
                 edit=lambda data: data["task_hashes"].update({"mc": "0" * 64}))


def test_a_results_file_without_its_sample_logs_is_refused(tmp_path):
    _refused_dir(tmp_path, {"mc": ("multiple_choice", MC_LINES)}, "no sample log samples_<task>_", "for ll",
                 "--log_samples", edit=lambda data: data["configs"].update({"ll": {"output_type": "loglikelihood"}}))


def test_a_directory_of_two_runs_is_refused(tmp_path):
    harness_run(tmp_path / "out" / "m1", {"mc": ("multiple_choice", MC_LINES)})
    harness_run(tmp_path / "out" / "m2", {"mc": ("multiple_choice", MC_LINES)})
    _assert_refused(["import", "lm-eval", tmp_path / "out", "--arm", "a", "--out", tmp_path / "o"], tmp_path / "o",
                    "2 lm-evaluation-harness results files", "give the directory of one run, or its results file")


@pytest.mark.parametrize(("lines", "message"), [
    ([mc_line(0, [-3.5, -1.25, -2.0], 2, acc=1.0)], ":1: acc 1 disagrees with target 2"),
    ([{**mc_line(0, [-3.5, -1.25, -2.0], 2), "target": "7"}], ":1: target 7 is not one of the 3 choices"),
    ([{**mc_line(0, [-3.5, -1.25, -2.0], 2), "target": "zebra"}], ':1: target "zebra" is neither'),
    ([mc_line(0, [-3.5, -1.25], 0, filtered_resps=[["-1.0", "False"], ["x", "False"]])],
     ':1: filtered_resps: log-likelihood "x" is not a number'),
    ([mc_line(0, [-3.5, -1.25], 0, filtered_resps=[["2.5", "False"], ["-1", "False"]])],
     ":1: filtered_resps: log-likelihood 2.5 is not a finite number <= 0"),
    ([mc_line(0, [-3.5, -1.25], 0, filtered_resps=[["-2.5"]])], ":1: filtered_resps must be a list of"),
    ([ll_line(0, -4.5, True, acc=0)], ":1: acc 0 disagrees with is_greedy True"),
    ([ll_line(0, -4.5, True), ll_line(0, -4.5, True)], ":2: document '0' appears again under filter 'none'"),
    ([gen_line(0, "raw", 1.0, metrics="exact_match")], ":1: metrics must be a list of metric names"),
    ([gen_line(0, "raw", 1.0), gen_line(0, "strip", 1.0, doc_hash="other")],
     ":2: doc_hash of document '0' differs from its line at"),
    ([gen_line(0, "raw", 1.0), gen_line(1, "raw", 1.0), gen_line(0, "strip", 1.0)],
     ": filter 'strip' has 1 of the 2 documents"),
    ([gen_line(0, "raw", 1.0), gen_line(1, "raw", 1.0, exact_match=None)], ":2: exact_match is missing or NaN"),
    ([gen_line(0, "raw", 1.0, filter=3)], ":1: filter must be a filter's name"),
])
def test_bad_item_samples_are_refused_naming_the_log_line_and_field(tmp_path, lines, message):
    log = write_log(tmp_path / "log.jsonl", lines)
    out = tmp_path / "x.parquet"
    _assert_refused(["import", "lm-eval", log, "--arm", "a", "--out", out], out, f"{log}{message}")


def test_logs_of_several_item_tasks_or_types_are_refused_in_single_file_form(tmp_path, prepared_data):
    mc = write_log(tmp_path / "mc.jsonl", MC_LINES)
    roll = write_log(tmp_path / "roll.jsonl", [json.loads(rolling_line())])
    out = tmp_path / "x.parquet"
    _assert_refused(["import", "lm-eval", mc, roll, "--arm", "a", "--out", out], out,
                    "2 logs (mc.jsonl: multiple-choice, roll.jsonl: rolling loglikelihood): an item-score file holds "
                    "one task")
    _assert_refused(["import", "lm-eval", mc, "--arm", "a", "--out", out, "--eval-set", f"{prepared_data}:heldout"],
                    out, "is a multiple-choice task; an evaluation set names the documents of a rolling")
    _assert_refused(["import", "lm-eval", roll, "--arm", "a", "--out", out, "--eval-set", "heldout"], out,
                    "--eval-set: 'heldout': give DATA_DIR:SET, or the set's name with --data DIR")


def test_a_doubled_bos_in_a_rolling_log_is_warned_with_what_to_pass(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "tokenizer_config.json").write_text(json.dumps({"add_bos_token": True}))
    for name, args in (("given", {"pretrained": "m", "add_bos_token": True}), ("tokenizer", {"pretrained": str(model)}),
                       ("off", {"pretrained": str(model), "add_bos_token": False})):
        run_dir = harness_run(tmp_path / name, {"roll": ("loglikelihood_rolling", [json.loads(rolling_line())])})
        path = run_dir / f"results_{DATE}.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "config": {"model_args": args}}))
        result = _ok("import", "lm-eval", run_dir / f"samples_roll_{DATE}.jsonl", "--arm", "a", "--out",
                     tmp_path / f"{name}.parquet")
        if name == "off":
            assert result.stderr == ""
            continue
        assert "may have scored a doubled BOS" in result.stderr and "add_bos_token=False" in result.stderr
        assert ("add_bos_token=True" if name == "given" else "tokenizer_config.json sets add_bos_token") \
            in result.stderr


def test_a_rolling_log_of_a_prepared_set_records_it_and_arms_accepts_the_files(prepared_data, tmp_path):
    heldout = PreparedData.open(prepared_data).eval_set("heldout")
    for arm, shift in (("a", 0.0), ("b", 0.5)):
        for seed in (1, 2):
            lines = [json.loads(rolling_line(doc={"id": doc_id}, word_perplexity=[-1.0 * n - shift * seed, int(n)],
                                              byte_perplexity=[-1.0 * n - shift * seed, int(n)],
                                              bits_per_byte=[-1.0 * n - shift * seed, int(n)]))
                     for doc_id, n in zip(heldout.doc_ids, heldout.n_bytes)]
            log = write_log(tmp_path / f"{arm}{seed}.jsonl", lines)
            _ok("import", "lm-eval", log, "--arm", arm, "--seed", seed, "--out", tmp_path / "files" /
                f"{arm}{seed}.parquet", "--eval-set", f"{prepared_data}:heldout")
    run = read_loss_file(tmp_path / "files" / "a1.parquet")
    assert (run.meta["eval_set"], run.meta["eval_set_sha256"]) == ("heldout", heldout.sha256)
    _ok("import", "lm-eval", log, "--arm", "b", "--out", tmp_path / "c.parquet", "--data", prepared_data,
        "--eval-set", "heldout")
    arms = json.loads(_ok("arms", tmp_path / "files", "--reference", "a", "--eval-set", "heldout", "--json").stdout)
    assert [row["eval_set"] for row in arms["inputs"]] == ["heldout"]
    wrong = write_log(tmp_path / "wrong.jsonl", lines[1:])
    _assert_refused(["import", "lm-eval", wrong, "--arm", "a", "--out", tmp_path / "w.parquet", "--eval-set",
                     f"{prepared_data}:heldout"], tmp_path / "w.parquet",
                    "the documents are not those of eval set 'heldout' (1 of its 8 missing")


def test_a_task_exported_from_a_set_records_the_set_it_declares(tmp_path):
    run_dir = harness_run(tmp_path / "run", {"roll": ("loglikelihood_rolling", [json.loads(rolling_line())])})
    path = run_dir / f"results_{DATE}.json"
    data = json.loads(path.read_text())
    data["configs"]["roll"]["metadata"].update(gatedv_eval_set="heldout", gatedv_eval_set_sha256="f" * 64)
    path.write_text(json.dumps(data))
    _ok("import", "lm-eval", run_dir / f"samples_roll_{DATE}.jsonl", "--arm", "a", "--out", tmp_path / "r.parquet")
    meta = read_loss_file(tmp_path / "r.parquet").meta
    assert (meta["eval_set"], meta["eval_set_sha256"], meta["scoring"]) == ("heldout", "f" * 64, "bos")


def test_a_task_exported_from_another_set_than_the_one_given_is_refused(prepared_data, tmp_path):
    heldout = PreparedData.open(prepared_data).eval_set("heldout")
    metrics = ("word_perplexity", "byte_perplexity", "bits_per_byte")
    lines = [json.loads(rolling_line(doc={"id": doc_id}, **{metric: [-1.0, int(n)] for metric in metrics}))
             for doc_id, n in zip(heldout.doc_ids, heldout.n_bytes)]
    run_dir = harness_run(tmp_path / "run", {"roll": ("loglikelihood_rolling", lines)})
    path = run_dir / f"results_{DATE}.json"
    data = json.loads(path.read_text())
    data["configs"]["roll"]["metadata"].update(gatedv_eval_set="dev", gatedv_eval_set_sha256="f" * 64)
    path.write_text(json.dumps(data))
    out = tmp_path / "r.parquet"
    _assert_refused(["import", "lm-eval", run_dir / f"samples_roll_{DATE}.jsonl", "--arm", "a", "--out", out,
                     "--eval-set", f"{prepared_data}:heldout"], out,
                    f"the task was exported from an evaluation set of SHA-256 {'f' * 64}, not 'heldout'")


def test_the_weights_of_a_local_model_are_hashed_into_every_file(tmp_path):
    """Where the results file names a local model directory (or --model-dir names one), every file records the
    SHA-256 of its weight files, as `gatedv evaluate --hf` hashes them; a model the import cannot find is not
    hashed."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"the weights")
    weights_sha256 = hashlib.sha256(b"the weights").hexdigest()
    tasks = {"mc": ("multiple_choice", MC_LINES), "roll": ("loglikelihood_rolling", [json.loads(rolling_line())])}
    run_dir = harness_run(tmp_path / "run", tasks, config={"model": "hf",
                                                        "model_args": f"pretrained={model},dtype=float32"})
    _ok("import", "lm-eval", run_dir, "--arm", "a", "--out", tmp_path / "imported")
    (run,) = read_item_inputs([tmp_path / "imported" / "mc.parquet"])
    assert run.meta["model"] == str(model) and run.meta["model_sha256"] == weights_sha256
    assert read_loss_file(tmp_path / "imported" / "roll.parquet").meta["model_sha256"] == weights_sha256

    log = write_log(tmp_path / "mc.jsonl", MC_LINES)  # no results file: nothing names the model
    _ok("import", "lm-eval", log, "--arm", "a", "--out", tmp_path / "unnamed.parquet")
    (run,) = read_item_inputs([tmp_path / "unnamed.parquet"])
    assert "model_sha256" not in run.meta
    _ok("import", "lm-eval", log, "--arm", "a", "--out", tmp_path / "named.parquet", "--model-dir", model)
    (run,) = read_item_inputs([tmp_path / "named.parquet"])
    assert run.meta["model_sha256"] == weights_sha256
    _assert_refused(["import", "lm-eval", log, "--arm", "a", "--out", tmp_path / "x.parquet", "--model-dir",
                     tmp_path / "run"], tmp_path / "x.parquet",
                    f"--model-dir: {tmp_path / 'run'}: holds no model weights (*.safetensors or pytorch_model*.bin)")
