"""Our checkpoints in lm-evaluation-harness (`gatedv evaluate CKPT --tasks`, trainer/run/harness.py): the same
per-item log-likelihoods as the harness's own `hf` model on the `export-hf` directory, every variant, the refusals,
the exported tokenizer, `export-tasks` and the `scoring` of loss files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from gatedv_stats.core.errors import InputError
from gatedv_stats.io.itemfiles import read_item_inputs
from gatedv_stats.io.lossfiles import read_loss_file
from gatedv_stats.io.runfiles import Run
from gatedv_stats.pairing.pair import pair_runs
from helpers import assert_input_error, invoke
from trainer.data.prepared import PreparedData
from trainer.hf.export import END_OF_TEXT
from trainer.model.transformer import build_model, model_config
from trainer.run.checkpoint import save_checkpoint
from trainer.run.harness import CheckpointLM, harness_tokenizer

CHOICES = ("def", "class", "import", "return")


@pytest.fixture
def datasets_cache(tmp_path, monkeypatch):
    """The harness's `json` datasets cached in the test's directory, never in ~/.cache."""
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets-cache"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")


def write_choice_task(directory: Path, prepared: Path, name: str = "code_mc") -> Path:
    """A local multiple-choice task over the held-out documents: which keyword follows the document's opening."""
    directory.mkdir(parents=True, exist_ok=True)
    heldout = PreparedData.open(prepared).eval_set("heldout")
    rows = [{"id": doc_id, "question": text[:60], "choices": list(CHOICES), "answer": k % len(CHOICES)}
            for k, (doc_id, text) in enumerate(zip(heldout.doc_ids, heldout.target_texts or []))]
    documents = directory / f"{name}.jsonl"
    documents.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    config = {"task": name, "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(documents)}},
              "output_type": "multiple_choice", "test_split": "test", "fewshot_split": "test",
              "doc_to_text": "{{question}}\nNext:", "doc_to_choice": "{{choices}}", "doc_to_target": "answer",
              "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}],
              "metadata": {"version": 1.0}}
    (directory / f"{name}.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return directory


def _untrained_checkpoint(path: Path, prepared: Path, variant: str = "baseline", **overrides) -> Path:
    model = build_model(model_config("tiny", variant, **overrides), seed=1)
    data = PreparedData.open(prepared)
    run = {"variant": variant, "seed": 5, "lr": 0.01, "size": "tiny", "data": str(prepared)}
    save_checkpoint(path, model, extra={"update": 0, "run": run, "data_manifest_sha256": data.manifest_sha256})
    return path


def _choice_log_likelihoods(samples_log: Path) -> dict[str, list[float]]:
    """Each item's choices' log-likelihoods in a harness sample log (doc id -> list)."""
    lines = [json.loads(line) for line in samples_log.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {line["doc"]["id"]: [float(pair[0]) for pair in line["filtered_resps"]] for line in lines}


# --- the exported tokenizer ---


def test_export_hf_names_end_of_text_and_padding_and_adds_no_bos(prepared_data, tmp_path):
    from transformers import AutoTokenizer

    checkpoint = _untrained_checkpoint(tmp_path / "checkpoint.pt", prepared_data)
    result = invoke("export-hf", checkpoint, tmp_path / "hf")
    assert result.exit_code == 0, result.output
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "hf", local_files_only=True)
    raw = Tokenizer.from_file(str(prepared_data / "tokenizer.json"))
    end = raw.token_to_id(END_OF_TEXT)
    assert (tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.bos_token_id) == (end, end, None)
    assert len(tokenizer) == 8192  # no entry added: the NUL byte's token stands for end of text
    text = "def f(x):\n    return x  # café"
    assert tokenizer(text)["input_ids"] == raw.encode(text, add_special_tokens=False).ids  # no BOS prepended
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (config["eos_token_id"], config["pad_token_id"], config["bos_token_id"]) == (end, end, None)
    special = json.loads((tmp_path / "hf" / "special_tokens_map.json").read_text())
    assert special == {"eos_token": END_OF_TEXT, "pad_token": END_OF_TEXT}
    # Our harness model encodes every text as the exported tokenizer does.
    ours = harness_tokenizer(prepared_data / "tokenizer.json")
    for sample in (text, f"x{END_OF_TEXT}y", "\x00 nul"):
        assert ours.encode(sample, add_special_tokens=False).ids == tokenizer(sample)["input_ids"], sample


@pytest.fixture(scope="module")
def exported_tokenizers(prepared_data, tmp_path_factory):
    """The tokenizer of an `export-hf` directory as each reader takes it: the `tokenizers` library's own reading of
    its tokenizer.json, `transformers.AutoTokenizer` (and the `tokenizers` backend it configures), and our harness
    model's tokenizer."""
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("exported")
    result = invoke("export-hf", _untrained_checkpoint(root / "checkpoint.pt", prepared_data), root / "hf")
    assert result.exit_code == 0, result.output
    auto = AutoTokenizer.from_pretrained(root / "hf", local_files_only=True)
    encoders = {"tokenizers": Tokenizer.from_file(str(root / "hf" / "tokenizer.json")),
                "transformers backend": auto.backend_tokenizer,
                "harness": harness_tokenizer(prepared_data / "tokenizer.json")}
    codecs = {name: (lambda text, tokenizer=tokenizer: tokenizer.encode(text, add_special_tokens=False).ids,
                     lambda ids, tokenizer=tokenizer: tokenizer.decode(ids, skip_special_tokens=False))
              for name, tokenizer in encoders.items()}
    codecs["AutoTokenizer"] = (lambda text: auto(text)["input_ids"], lambda ids: auto.decode(ids))
    return codecs, auto.eos_token_id


def _assert_round_trip(codecs, end: int, text: str) -> None:
    for name, (encode, decode) in codecs.items():
        ids = encode(text)
        assert decode(ids) == text, (name, text, ids)
        assert ids == codecs["tokenizers"][0](text), (name, text)  # every reader encodes alike
        assert text.count("\x00") == ids.count(end), (name, text, ids)  # only a NUL byte is the end-of-text id


def test_every_byte_and_its_byte_level_spelling_round_trip_through_the_exported_tokenizer(exported_tokenizers):
    """`Ā` spells the NUL byte's token, which stands for end of text: a text holding `Ā` is two bytes of text, never
    an end of document. So for every byte, the character of that code point and the character that spells its
    token (GPT-2's byte-level alphabet)."""
    from trainer.data.tokenizer import _byte_of_char

    codecs, end = exported_tokenizers
    assert codecs["AutoTokenizer"][0](END_OF_TEXT) != [end]
    for text in [*map(chr, range(256)), *_byte_of_char(), f"x{END_OF_TEXT}y", "a\x00b", END_OF_TEXT * 3]:
        _assert_round_trip(codecs, end, text)


@settings(max_examples=150, deadline=None)
@given(text=st.text(alphabet=st.one_of(st.characters(exclude_categories=("Cs",)),  # text: no lone surrogates
                                       st.sampled_from([END_OF_TEXT, "\x00", "\u0120", "\u010a"])), max_size=120))
def test_any_text_round_trips_through_the_exported_tokenizer(exported_tokenizers, text):
    _assert_round_trip(*exported_tokenizers, text)


# --- the harness model on its own ---


def _request(kind: str, arguments: tuple, doc_id: int = 3):
    from lm_eval.api.instance import Instance

    return Instance(request_type=kind, doc={}, arguments=arguments, idx=0, metadata=("toy", doc_id, 1))


def test_checkpoint_lm_scores_as_the_model_computes_and_refuses_what_does_not_fit(prepared_data):
    tokenizer = harness_tokenizer(prepared_data / "tokenizer.json")
    model = build_model(model_config("tiny", "gatedv", seq_len=32), seed=3).eval()
    lm = CheckpointLM(model, tokenizer, device=torch.device("cpu"), batch_size=2, progress=False)
    context, continuation = "import os\n", "def main():"
    whole = tokenizer.encode(context + continuation).ids
    first = len(tokenizer.encode(context.rstrip()).ids)  # the context's trailing space goes to the continuation
    with torch.no_grad():
        log_probs = model(torch.tensor([whole[:-1]])).double().log_softmax(-1)[0]
    expected = sum(float(log_probs[i - 1, whole[i]]) for i in range(first, len(whole)))
    scored = lm.loglikelihood([_request("loglikelihood", (context, continuation)),
                               _request("loglikelihood", ("x = 1", " + 2"))])
    assert scored[0][0] == pytest.approx(expected, rel=1e-5)
    # Rolling: the text after the end-of-text token in blocks of the model's context, each token scored once;
    # the last block's inputs reach back a whole context.
    text = "class A:\n    pass\n" * 6
    ids = tokenizer.encode(text).ids
    sequence = [lm.prefix_token_id] + ids  # ids[j] is predicted at position j of `sequence`
    assert len(ids) > 32 and len(ids) % 32
    total = 0.0
    with torch.no_grad():
        for start in range(0, len(ids), 32):
            end = min(start + 32, len(ids))
            first = max(0, end - 32)
            log_probs = model(torch.tensor([sequence[first:end]])).double().log_softmax(-1)[0]
            total += sum(float(log_probs[j - first, ids[j]]) for j in range(start, end))
    assert lm.loglikelihood_rolling([_request("loglikelihood_rolling", (text,))])[0] == pytest.approx(total, rel=1e-5)
    with pytest.raises(InputError, match=r"task toy: item 3 needs \d+ tokens \(prompt and answer\), the model's "
                                         r"context is 32"):
        lm.loglikelihood([_request("loglikelihood", (text, " x"))])
    generate = ("import", {"until": ["\n"], "max_gen_toks": 40, "do_sample": False})
    with pytest.raises(InputError, match="prompt and 40 generated"):
        lm.generate_until([_request("generate_until", generate)])
    (answer,) = lm.generate_until([_request("generate_until", ("import", {"until": ["\n"], "max_gen_toks": 4}))])
    assert isinstance(answer, str) and "\n" not in answer


# --- the command's refusals ---


def test_evaluate_tasks_refusals(prepared_data, tmp_path):
    checkpoint = _untrained_checkpoint(tmp_path / "checkpoint.pt", prepared_data)
    out = tmp_path / "scores"
    for args, fragments in (
        (("--tasks", " , "), ("--tasks: names no task",)),
        (("--tasks", "code_mc", "--hf", tmp_path), ("--tasks, --hf:",)),
        (("--tasks", "code_mc", "--eval-set", "heldout", "--value-act", "silu"),
         ("--tasks, --eval-set, --value-act: these apply to a loss file",)),
        (("--tasks", "code_mc", "--include-path", tmp_path / "none"), ("--include-path:", "no such directory")),
    ):
        assert_input_error(invoke("evaluate", checkpoint, *args, "--out", out), *fragments)
    assert_input_error(invoke("evaluate", checkpoint, "--num-fewshot", "2", "--out", tmp_path / "x.parquet"),
                       "--num-fewshot: only with --tasks")
    assert_input_error(invoke("evaluate", checkpoint, checkpoint, "--out", tmp_path / "x.parquet"),
                       "give one checkpoint, not 2")
    assert_input_error(invoke("evaluate", checkpoint, "--max-gen-toks", "8", "--out", tmp_path / "x.parquet"),
                       "--max-gen-toks: only with --tasks")
    tasks = write_choice_task(tmp_path / "tasks", prepared_data)
    for tokens, message in (("0", "--max-gen-toks: must be at least 1 (got 0)"),
                            ("256", f"--max-gen-toks: 256 new tokens leave no room for a prompt in the context of "
                                    f"{checkpoint} (256 tokens); give at most 255")):
        result = invoke("evaluate", checkpoint, "--tasks", "code_mc", "--include-path", tasks, "--max-gen-toks",
                        tokens, "--device", "cpu", "--out", out)
        assert_input_error(result, message)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not out.exists()


@pytest.mark.slow  # an unknown name is looked up among the harness's own tasks too: indexing them takes seconds
def test_an_unknown_task_is_refused_with_the_names_near_it(prepared_data, tmp_path):
    checkpoint = _untrained_checkpoint(tmp_path / "checkpoint.pt", prepared_data)
    tasks = write_choice_task(tmp_path / "tasks", prepared_data)
    assert_input_error(invoke("evaluate", checkpoint, "--tasks", "code_mcq", "--include-path", tasks, "--out",
                              tmp_path / "scores"), "--tasks: unknown task 'code_mcq'", "near names: code_mc")
    assert not (tmp_path / "scores").exists()


def write_generation_task(directory: Path, prepared: Path, name: str = "code_gen") -> Path:
    """A local generation task that names no max_gen_toks: complete the opening of each held-out document."""
    directory.mkdir(parents=True, exist_ok=True)
    heldout = PreparedData.open(prepared).eval_set("heldout")
    rows = [{"id": doc_id, "question": text[:40], "answer": text[40:44]}
            for doc_id, text in zip(heldout.doc_ids, heldout.target_texts or [])]
    documents = directory / f"{name}.jsonl"
    documents.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    config = {"task": name, "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(documents)}},
              "output_type": "generate_until", "test_split": "test", "doc_to_text": "{{question}}",
              "doc_to_target": "{{answer}}", "generation_kwargs": {"until": ["\n"], "do_sample": False},
              "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True}],
              "metadata": {"version": 1.0}}
    (directory / f"{name}.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return directory


@pytest.mark.slow
def test_max_gen_toks_fits_a_generation_task_in_a_short_context(prepared_data, tmp_path, datasets_cache):
    """A task naming no max_gen_toks asks for the harness's 256 new tokens, which leave no room in a 256-token
    context for a prompt: refused, naming --max-gen-toks; with it, the task runs and every file records it."""
    checkpoint = _untrained_checkpoint(tmp_path / "checkpoint.pt", prepared_data)
    tasks = write_generation_task(tmp_path / "tasks", prepared_data)
    args = ["evaluate", checkpoint, "--tasks", "code_gen", "--include-path", tasks, "--limit", "2", "--device", "cpu"]
    refused = invoke(*args, "--out", tmp_path / "refused")
    assert refused.exit_code == 2, refused.output
    assert refused.stderr.strip().splitlines()[-1].startswith(  # after the datasets library's progress bars
        "error: task code_gen: item 0 needs ")
    assert refused.stderr.strip().endswith(" tokens (prompt and 256 generated), the model's context is 256; give "
                                           "fewer new tokens (--max-gen-toks), fewer shots (--num-fewshot) or a task "
                                           "with shorter prompts")
    out = tmp_path / "scores"
    result = invoke(*args, "--max-gen-toks", "5", "--out", out)
    assert result.exit_code == 0, result.output
    (run,) = read_item_inputs([out])
    assert run.task == "code_gen" and len(run.units) == 2 and run.meta["max_gen_toks"] == 5
    log = next((out / "baseline" / "seed5" / "harness").glob("samples_code_gen_*.jsonl"))
    for line in map(json.loads, log.read_text(encoding="utf-8").splitlines()):
        assert line["arguments"]["gen_args_0"]["arg_1"]["max_gen_toks"] == 5


# --- the perplexity route: export-tasks and the scoring of loss files ---


def test_export_tasks_writes_the_sets_target_texts_as_a_rolling_task(prepared_data, tmp_path):
    result = invoke("export-tasks", prepared_data, "--eval-set", "heldout", "--out", tmp_path / "tasks")
    assert result.exit_code == 0, result.output
    heldout = PreparedData.open(prepared_data).eval_set("heldout")
    rows = [json.loads(line) for line in (tmp_path / "tasks" / "gatedv_heldout.jsonl").read_text().splitlines()]
    assert [row["id"] for row in rows] == heldout.doc_ids and [row["domain"] for row in rows] == heldout.domains
    assert [len(row["text"].encode()) for row in rows] == list(heldout.n_bytes)  # the bytes a loss file counts
    config = yaml.safe_load((tmp_path / "tasks" / "gatedv_heldout.yaml").read_text())
    assert config["output_type"] == "loglikelihood_rolling" and config["doc_to_target"] == "text"
    assert config["dataset_kwargs"]["data_files"]["test"] == str(tmp_path / "tasks" / "gatedv_heldout.jsonl")
    assert config["metadata"]["gatedv_eval_set_sha256"] == heldout.sha256
    assert_input_error(invoke("export-tasks", prepared_data, "--out", prepared_data), "inside the prepared data")
    assert_input_error(invoke("export-tasks", prepared_data, "--task", "a b", "--out", tmp_path / "t2"),
                       "--task: 'a b' is not a task name")


def _loss_run(arm: str, scoring: str) -> Run:
    docs = pd.DataFrame({"doc_id": ["a", "b"], "n_targets": [4, 4], "loss_sum": [3.0, 4.0]})
    return Run(arm=arm, seed=0, units=docs, meta={"eval_set": "heldout", "scoring": scoring},
                   source=f"{arm}.parquet", sha256="0" * 64)


def test_pairing_refuses_losses_scored_on_different_conditioning():
    with pytest.raises(InputError, match="scoring differs: baseline.parquet has 'context', gatedv.parquet has 'bos'; "
                                         r"they were not evaluated alike \(.*allow.mismatch scoring"):
        pair_runs([_loss_run("baseline", "context")], [_loss_run("gatedv", "bos")])
    paired = pair_runs([_loss_run("baseline", "context")], [_loss_run("gatedv", "bos")], allow_mismatch=("scoring",))
    assert any("scoring differs" in note for note in paired.notes)
    assert pair_runs([_loss_run("baseline", "bos")], [_loss_run("gatedv", "bos")]).n_pairs == 1


# --- through the real harness ---


def _hf_choice_log_likelihoods(model_dir: Path, tasks: Path) -> dict[str, list[float]]:
    import lm_eval
    from lm_eval.tasks import TaskManager

    results = lm_eval.simple_evaluate(model="hf", model_args=f"pretrained={model_dir},dtype=float32", device="cpu",
                                      batch_size=4, tasks=["code_mc"], log_samples=True, bootstrap_iters=0,
                                      task_manager=TaskManager(include_path=str(tasks), include_defaults=False))
    return {sample["doc"]["id"]: [float(pair[0]) for pair in sample["filtered_resps"]]
            for sample in results["samples"]["code_mc"]}


@pytest.mark.slow
def test_exported_baseline_in_the_hf_model_scores_what_the_checkpoint_scores_here(prepared_data, tmp_path,
                                                                                  datasets_cache):
    from tiny_hf import train_and_export
    from trainer.run.recipe import RunSpec, Runtime
    from trainer.run.train import train

    checkpoint, model_dir = train_and_export(prepared_data, tmp_path / "baseline")
    spec = RunSpec.make(prepared_data, "tiny", "gatedv", 2, lr=0.01, updates=2, eval_every=2, batch_size=2)
    train(spec, tmp_path / "gatedv", runtime=Runtime(device="cpu", progress=False))
    tasks = write_choice_task(tmp_path / "tasks", prepared_data)
    assert invoke("export-tasks", prepared_data, "--eval-set", "heldout", "--out", tmp_path / "rolling").exit_code == 0
    out = tmp_path / "scores"
    result = invoke("evaluate", checkpoint, tmp_path / "gatedv" / "checkpoint.pt", "--tasks", "code_mc,gatedv_heldout",
                    "--include-path", tasks, "--include-path", tmp_path / "rolling", "--batch-size", "3", "--device",
                    "cpu", "--out", out)
    assert result.exit_code == 0, result.output
    ours = _choice_log_likelihoods(next((out / "baseline" / "seed2" / "harness").glob("samples_code_mc_*.jsonl")))
    theirs = _hf_choice_log_likelihoods(model_dir, tasks)
    assert sorted(ours) == sorted(theirs) and len(ours) == 8
    for doc_id, likelihoods in theirs.items():
        np.testing.assert_allclose(ours[doc_id], likelihoods, rtol=1e-5, atol=1e-5, err_msg=doc_id)
    runs = {run.arm: run for run in read_item_inputs([out])}
    baseline = runs["baseline"]
    assert (baseline.seed, baseline.task, baseline.meta["tokenizer_sha256"]) == (
        2, "code_mc", PreparedData.open(prepared_data).tokenizer_sha256)
    assert baseline.meta["model_sha256"] == baseline.meta["checkpoint_sha256"] and baseline.meta["n_shot"] == 0
    gold = baseline.units.set_index("doc_id")["gold_loglik"]
    answers = {row["id"]: row["answer"] for row in map(json.loads, (tasks / "code_mc.jsonl").read_text().splitlines())}
    np.testing.assert_allclose([gold[doc_id] for doc_id in answers],
                               [theirs[doc_id][answers[doc_id]] for doc_id in answers], rtol=1e-5)
    compared = invoke("bootstrap", "--metric", "acc", "--baseline", out / "baseline" / "seed2" / "code_mc.parquet",
                      "--variant", out / "gatedv" / "seed2" / "code_mc.parquet", "--json")
    assert compared.exit_code == 0, compared.output
    verdict = json.loads(compared.stdout)
    assert verdict["task"] == "code_mc" and verdict["n_items"] == 8 and "mcnemar" in json.dumps(verdict).lower()
    _check_gatedv_scores(out, tmp_path / "gatedv" / "checkpoint.pt", tasks, prepared_data)


def _check_gatedv_scores(out: Path, checkpoint: Path, tasks: Path, prepared_data: Path) -> None:
    """The GatedV checkpoint's logged choice log-likelihoods are its own forward pass's."""
    from trainer.run.checkpoint import load_checkpoint

    model = load_checkpoint(checkpoint).model.eval()
    tokenizer = harness_tokenizer(prepared_data / "tokenizer.json")
    logged = _choice_log_likelihoods(next((out / "gatedv" / "seed2" / "harness").glob("samples_code_mc_*.jsonl")))
    for row in map(json.loads, (tasks / "code_mc.jsonl").read_text().splitlines()):
        context = f"{row['question']}\nNext:"
        expected = []
        for choice in row["choices"]:
            whole = tokenizer.encode(f"{context} {choice}").ids
            first = len(tokenizer.encode(context).ids)
            with torch.no_grad():
                log_probs = model(torch.tensor([whole[:-1]])).double().log_softmax(-1)[0]
            expected.append(sum(float(log_probs[i - 1, whole[i]]) for i in range(first, len(whole))))
        np.testing.assert_allclose(logged[row["id"]], expected, rtol=1e-5, err_msg=row["id"])
    # The perplexity route: the harness's rolling score of the held-out texts is conditioned on the end-of-text
    # token alone, gatedv evaluate's on each window's context; pairing the two is refused.
    heldout = PreparedData.open(prepared_data).eval_set("heldout")
    rolling = read_loss_file(out / "gatedv" / "seed2" / "gatedv_heldout.parquet")
    assert rolling.meta["scoring"] == "bos" and list(rolling.docs["doc_id"]) == heldout.doc_ids
    assert list(rolling.docs["n_bytes"]) == list(heldout.n_bytes)
    evaluated = invoke("evaluate", checkpoint, "--eval-set", "heldout", "--out", out / "heldout.parquet",
                       "--device", "cpu")
    assert evaluated.exit_code == 0, evaluated.output
    assert read_loss_file(out / "heldout.parquet").meta["scoring"] == "context"
    refused = invoke("bootstrap", "--baseline", out / "baseline" / "seed2" / "gatedv_heldout.parquet", "--variant",
                     out / "heldout.parquet")
    assert_input_error(refused, "scoring differs", "--allow-mismatch scoring")
