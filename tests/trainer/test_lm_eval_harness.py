"""`gatedv import lm-eval` of a results directory written by lm-evaluation-harness itself: local JSONL tasks of each
output type (multiple choice, generate_until with a filter, loglikelihood, rolling loglikelihood, and a group of two
multiple-choice subtasks) under a tiny local Llama, offline, saved as the `lm_eval` command saves them."""

from __future__ import annotations

import hashlib
import json
import random

import pandas as pd
import pytest

from gatedv_stats.io.itemfiles import read_item_inputs
from gatedv_stats.io.lossfiles import read_loss_file
from helpers import invoke

WORDS = "the cat dog sat ran on a mat log red blue green big small fast slow tree sun moon".split()
TASKS = ["toy_mc", "toy_gen", "toy_ll", "toy_roll", "toy_mmlu"]
LEAVES = {"toy_mc": "toy_mc.parquet", "toy_gen": "toy_gen.parquet", "toy_ll": "toy_ll.parquet",
          "toy_mmlu_a": "toy_mmlu.parquet", "toy_mmlu_b": "toy_mmlu.parquet"}


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _data(root, rng):
    def sentence(n):
        return " ".join(rng.choice(WORDS) for _ in range(n))

    def choices(n):
        return [{"question": sentence(6) + "?", "choices": [sentence(rng.randint(1, 3)) for _ in range(4)],
                 "answer": rng.randrange(4)} for _ in range(n)]

    def sums(n):
        pairs = [(rng.randint(0, 9), rng.randint(0, 9)) for _ in range(n)]
        return [{"question": f"{a} plus {b} is", "answer": str(a + b)} for a, b in pairs]

    files = {}
    for name in ("mc", "sub_a", "sub_b"):
        files[f"{name}_test"], files[f"{name}_train"] = (_write_jsonl(root / f"{name}_{split}.jsonl", choices(n))
                                                         for split, n in (("test", 8), ("train", 3)))
    files["gen_test"], files["gen_train"] = _write_jsonl(root / "gen_test.jsonl", sums(8)), \
        _write_jsonl(root / "gen_train.jsonl", sums(3))
    files["ll_test"] = _write_jsonl(root / "ll_test.jsonl", [{"context": sentence(6), "target": " " + rng.choice(WORDS)}
                                                              for _ in range(8)])
    files["roll_test"] = _write_jsonl(root / "roll_test.jsonl", [{"text": sentence(rng.randint(5, 60))}
                                                                  for _ in range(5)])
    return files


def _tasks(root, files):
    """Task YAMLs over the local files (JSON is YAML)."""
    mean = {"aggregation": "mean", "higher_is_better": True}
    common = {"dataset_path": "json", "test_split": "test", "metadata": {"version": 1.0}}
    def data(test, train=None):
        splits = {"test": str(files[test]), **({"train": str(files[train])} if train else {})}
        return {"dataset_kwargs": {"data_files": splits}, **({"fewshot_split": "train"} if train else {})}
    mc = {"output_type": "multiple_choice", "doc_to_text": "Question: {{question}}\nAnswer:",
          "doc_to_choice": "{{choices}}", "doc_to_target": "answer", "fewshot_config": {"sampler": "first_n"}}
    tasks = {
        "toy_mc": {**mc, **data("mc_test", "mc_train"),
                   "metric_list": [{"metric": "acc", **mean}, {"metric": "acc_norm", **mean}]},
        "toy_gen": {"output_type": "generate_until", **data("gen_test", "gen_train"), "doc_to_text": "{{question}}",
                    "doc_to_target": "{{answer}}", "fewshot_config": {"sampler": "first_n"},
                    "generation_kwargs": {"until": ["\n", "."], "max_gen_toks": 4, "do_sample": False},
                    "filter_list": [{"name": "strip", "filter": [{"function": "remove_whitespace"},
                                                                 {"function": "take_first"}]}],
                    "metric_list": [{"metric": "exact_match", **mean}]},
        "toy_ll": {"output_type": "loglikelihood", **data("ll_test"), "fewshot_split": "test",
                   "doc_to_text": "{{context}}", "doc_to_target": "{{target}}",
                   "metric_list": [{"metric": "perplexity", "aggregation": "perplexity", "higher_is_better": False},
                                   {"metric": "acc", **mean}]},
        "toy_roll": {"output_type": "loglikelihood_rolling", **data("roll_test"), "doc_to_text": "",
                     "doc_to_target": "{{text}}", "metric_list": [{"metric": "word_perplexity"},
                                                                  {"metric": "byte_perplexity"},
                                                                  {"metric": "bits_per_byte"}]},
        "toy_mmlu_a": {**mc, **data("sub_a_test", "sub_a_train"), "metric_list": [{"metric": "acc", **mean}]},
        "toy_mmlu_b": {**mc, **data("sub_b_test", "sub_b_train"), "metric_list": [{"metric": "acc", **mean}]},
    }
    for name, task in tasks.items():
        (root / f"{name}.yaml").write_text(json.dumps({"task": name, **common, **task}), encoding="utf-8")
    (root / "toy_mmlu.yaml").write_text(json.dumps({"group": "toy_mmlu", "task": ["toy_mmlu_a", "toy_mmlu_b"],
                                                    "aggregate_metric_list": [{"metric": "acc",
                                                                               "weight_by_size": True}],
                                                    "metadata": {"version": 1.0}}), encoding="utf-8")


def _tiny_llama(path, corpus):
    """A random 2-layer Llama with a byte-level BPE tokenizer that has BOS, EOS and PAD."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>", "<pad>"],
                                                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    wrapped.save_pretrained(path)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(wrapped), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128, bos_token_id=0,
                         eos_token_id=1, pad_token_id=2, tie_word_embeddings=False)
    LlamaForCausalLM(config).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def harness_run(tmp_path_factory):
    """The harness's results directory (results_<date>.json + samples_<task>_<date>.jsonl), as `lm_eval` writes it."""
    root = tmp_path_factory.mktemp("harness")
    rng = random.Random(0)
    files = _data(root, rng)
    (root / "tasks").mkdir()
    _tasks(root / "tasks", files)
    model = _tiny_llama(root / "model", [" ".join(rng.choice(WORDS) for _ in range(10)) for _ in range(200)])
    with pytest.MonkeyPatch.context() as patch:
        for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
            patch.setenv(name, "1")
        patch.setenv("TOKENIZERS_PARALLELISM", "false")
        patch.setenv("HF_DATASETS_CACHE", str(root / "datasets-cache"))
        import datasets.config
        import lm_eval
        from lm_eval.loggers import EvaluationTracker
        from lm_eval.tasks import TaskManager

        patch.setattr(datasets.config, "HF_DATASETS_CACHE", root / "datasets-cache")  # when imported earlier
        patch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
        tracker = EvaluationTracker(output_path=str(root / "out"))
        results = lm_eval.simple_evaluate(
            model="hf", model_args=f"pretrained={model},dtype=float32", device="cpu", batch_size=4, tasks=TASKS,
            task_manager=TaskManager(include_path=str(root / "tasks"), include_defaults=False), log_samples=True,
            limit=7, num_fewshot=1, bootstrap_iters=0, evaluation_tracker=tracker)
        samples = results.pop("samples")
        tracker.save_results_aggregated(results=results, samples=samples)
        for task in results["configs"]:
            tracker.save_results_samples(task_name=task, samples=samples[task])
    directory = next((root / "out").rglob("results_*.json")).parent
    return {"dir": directory, "results": json.loads(next(directory.glob("results_*.json")).read_text()),
            "model": model}


def _logged(directory, task):
    path = next(directory.glob(f"samples_{task}_*.jsonl"))
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.slow
def test_a_results_directory_imports_with_the_harness_accuracy_exactly(harness_run, tmp_path):
    out = tmp_path / "imported"
    result = invoke("import", "lm-eval", harness_run["dir"], "--arm", "tiny", "--seed", "4", "--out", out, "--json")
    assert result.exit_code == 0, result.stderr
    assert sorted(path.name for path in out.iterdir()) == ["toy_gen.parquet", "toy_ll.parquet", "toy_mc.parquet",
                                                            "toy_mmlu.parquet", "toy_roll.parquet"]
    runs = {run.task: run for run in read_item_inputs([out])}
    assert sorted(runs) == ["toy_gen", "toy_ll", "toy_mc", "toy_mmlu"]
    reported = harness_run["results"]["results"]
    for task, key in (("toy_mc", "acc,none"), ("toy_mc", "acc_norm,none"), ("toy_gen", "exact_match,strip"),
                      ("toy_ll", "acc,none"), ("toy_mmlu_a", "acc,none"), ("toy_mmlu_b", "acc,none")):
        run = runs[LEAVES[task].removesuffix(".parquet")]
        items = run.units[run.units["subtask"] == task] if "subtask" in run.units else run.units
        values = items[key.split(",")[0]].tolist()
        assert len(values) == 7 and sum(values) / len(values) == reported[task][key], (task, key)
    group = runs["toy_mmlu"]
    assert group.units["acc"].mean() == pytest.approx(reported["toy_mmlu"]["acc,none"], rel=1e-12)
    assert list(group.units["subtask"].unique()) == ["toy_mmlu_a", "toy_mmlu_b"]
    assert all((run.arm, run.seed, run.meta['n_shot']) == ("tiny", 4, 1) for run in runs.values())
    assert tuple(runs["toy_ll"].meta["metrics"]) == ("acc", "loglik")
    assert tuple(runs["toy_gen"].meta["metrics"]) == ("exact_match",)
    assert tuple(runs["toy_mc"].meta['metrics']) == ("acc", "acc_norm", "gold_loglik", "gold_margin")
    assert json.loads(result.stdout)["checked_against_results"] is True
    # The results file names the local model directory: every file records the SHA-256 of its weights.
    weights = hashlib.sha256((harness_run["model"] / "model.safetensors").read_bytes()).hexdigest()
    assert {run.meta["model_sha256"] for run in runs.values()} == {weights}
    assert read_loss_file(out / "toy_roll.parquet").meta["model_sha256"] == weights


@pytest.mark.slow
def test_hashes_log_likelihoods_and_config_hashes_are_the_harness_ones(harness_run, tmp_path):
    out = tmp_path / "imported"
    assert invoke("import", "lm-eval", harness_run["dir"], "--arm", "tiny", "--out", out).exit_code == 0
    runs = {run.task: run for run in read_item_inputs([out])}
    for task in ("toy_mc", "toy_gen", "toy_ll"):
        logged = pd.DataFrame(_logged(harness_run["dir"], task))
        items = runs[task].units
        for field in ("doc_hash", "prompt_hash", "target_hash"):
            assert items[field].tolist() == logged[field].tolist(), (task, field)
        assert items["doc_id"].tolist() == [str(i) for i in logged["doc_id"]]
        config = {k: v for k, v in harness_run["results"]["configs"][task].items() if k != "metadata"}
        expected = hashlib.sha256(json.dumps(config, sort_keys=True, separators=(",", ":"),
                                             ensure_ascii=False).encode()).hexdigest()
        assert runs[task].meta["task_config_sha256"] == expected
    loglik = [float(sample["filtered_resps"][0][0]) for sample in _logged(harness_run["dir"], "toy_ll")]
    assert runs["toy_ll"].units["loglik"].tolist() == loglik
    for sample, (_, item) in zip(_logged(harness_run["dir"], "toy_mc"), runs["toy_mc"].units.iterrows()):
        lls = [float(pair[0]) for pair in sample["filtered_resps"]]
        gold = int(sample["target"])
        assert item["gold_loglik"] == lls[gold]
        assert item["gold_margin"] == lls[gold] - max(ll for i, ll in enumerate(lls) if i != gold)
    rolling = read_loss_file(out / "toy_roll.parquet")
    assert rolling.meta["scoring"] == "bos" and len(rolling.docs) == 5
    assert rolling.docs["loss_sum"].tolist() == [-s["bits_per_byte"][0] for s in _logged(harness_run["dir"],
                                                                                         "toy_roll")]


@pytest.mark.slow
def test_one_log_of_each_type_imports_to_one_file(harness_run, tmp_path):
    for task in ("toy_mc", "toy_gen", "toy_ll", "toy_mmlu_a"):
        log = next(harness_run["dir"].glob(f"samples_{task}_*.jsonl"))
        result = invoke("import", "lm-eval", log, "--arm", "tiny", "--out", tmp_path / f"{task}.parquet")
        assert result.exit_code == 0 and result.stderr == "", result.stderr  # checked against results beside it
        (run,) = read_item_inputs([tmp_path / f"{task}.parquet"])
        assert run.task == task and run.meta['n_shot'] == 1
