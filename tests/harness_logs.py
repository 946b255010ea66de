"""Logs of lm-evaluation-harness made by hand, as the harness writes them: sample lines of each output type
(rolling log-likelihood, multiple choice, log-likelihood, generation) and a run directory of sample logs with the
results file that reports on them (`harness_run`), for the tests of `gatedv import lm-eval`."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

DATE = "2026-01-02T03-04-05.678901"  # of a run's file names: samples_<task>_<DATE>.jsonl, results_<DATE>.json


def rolling_line(**changes) -> str:
    """One rolling-loglikelihood sample line: document "a", 2 words, 11 bytes, log-likelihood -12.5."""
    sample = {"doc_id": 0, "doc": {"id": "a"}, "arguments": {"gen_args_0": {"arg_0": "hello world"}},
              "word_perplexity": [-12.5, 2], "byte_perplexity": [-12.5, 11], "bits_per_byte": [-12.5, 11]}
    return json.dumps({**sample, **changes})


def item_hashes(doc_id: int) -> dict:
    return {"doc_hash": f"d{doc_id}", "prompt_hash": f"p{doc_id}", "target_hash": f"t{doc_id}"}


def mc_line(doc_id: int, lls: list[float], target: int | str, **changes) -> dict:
    """A multiple-choice sample as the harness writes it (responses as text); acc from the log-likelihoods."""
    acc = float(int(np.argmax(lls)) == int(target))
    return {"doc_id": doc_id, "doc": {"q": f"question {doc_id}"}, "target": str(target),
            "arguments": {f"gen_args_{i}": {"arg_0": "Q:", "arg_1": f" c{i}"} for i in range(len(lls))},
            "resps": [[[str(ll), "False"]] for ll in lls], "filtered_resps": [[str(ll), "False"] for ll in lls],
            "filter": "none", "metrics": ["acc", "acc_norm"], **item_hashes(doc_id), "acc": acc, "acc_norm": 1.0,
            **changes}


def ll_line(doc_id: int, ll: float, greedy: bool, **changes) -> dict:
    return {"doc_id": doc_id, "doc": {"context": "c"}, "target": " sun",
            "arguments": {"gen_args_0": {"arg_0": "c", "arg_1": " sun"}}, "resps": [[[str(ll), str(greedy)]]],
            "filtered_resps": [[str(ll), str(greedy)]], "filter": "none", "metrics": ["perplexity", "acc"],
            **item_hashes(doc_id), "perplexity": ll, "acc": int(greedy), **changes}


def gen_line(doc_id: int, name: str, match: float, **changes) -> dict:
    return {"doc_id": doc_id, "doc": {"question": "1 plus 1 is"}, "target": "2",
            "arguments": {"gen_args_0": {"arg_0": "1 plus 1 is", "arg_1": {"until": ["\n"], "max_gen_toks": 3}}},
            "resps": [[" 2"]], "filtered_resps": ["2"], "filter": name, "metrics": ["exact_match"],
            **item_hashes(doc_id), "exact_match": match, **changes}


MC_LINES = [mc_line(0, [-3.5, -1.25, -2.0], 2), mc_line(1, [-3.5, -1.25, -2.0], 1),
            mc_line(2, [-0.5, -4.0, -2.5], 0)]


def write_log(path: Path, lines: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def harness_results(tasks: dict, groups: dict | None = None, **extra) -> dict:
    """A results file of `tasks` {name: (output_type, lines)}: each mean metric reported as sum/len, the task hash
    as the harness computes it."""
    results, configs, hashes = {}, {}, {}
    for task, (output_type, lines) in tasks.items():
        reported = {}
        for line in lines:
            for metric in line.get("metrics", []):
                if metric != "perplexity":
                    reported.setdefault(f"{metric},{line['filter']}", []).append(float(line[metric]))
        results[task] = {key: sum(values) / len(values) for key, values in reported.items()}
        configs[task] = {"task": task, "output_type": output_type, "num_fewshot": 0, "target_delimiter": " ",
                         "metadata": {"version": 1.0, "pretrained": "m"}}
        hashes[task] = hashlib.sha256("".join(f"{s.get('doc_hash')}{s.get('prompt_hash')}{s.get('target_hash')}"
                                              for s in lines).encode()).hexdigest()
    for group, subtasks in (groups or {}).items():
        values = [line["acc"] for task in subtasks for line in tasks[task][1]]
        results[group] = {"acc,none": sum(values) / len(values)}
    return {"results": results, "configs": configs, "task_hashes": hashes, "group_subtasks": groups or {},
            "n-shot": {task: 0 for task in [*tasks, *(groups or {})]}, "config": {"model": "hf",
            "model_args": {"pretrained": "m"}}, "lm_eval_version": "0.4.13", **extra}


def harness_run(root: Path, tasks: dict, groups: dict | None = None, **extra) -> Path:
    """A run directory: each task's sample log and the results file of them all (`harness_results`)."""
    for task, (_, lines) in tasks.items():
        write_log(root / f"samples_{task}_{DATE}.jsonl", lines)
    (root / f"results_{DATE}.json").write_text(json.dumps(harness_results(tasks, groups, **extra)), encoding="utf-8")
    return root


def many_tasks_run(root: Path, n_tasks: int, n_items: int) -> Path:
    """A harness run of `n_tasks` multiple-choice tasks of `n_items` items each (every third one answered right):
    an import that writes many files."""
    lines = [mc_line(item, [-1.0 - item % 3, -2.0, -2.5], 0) for item in range(n_items)]
    return harness_run(root, {f"task{number:02d}": ("multiple_choice", lines) for number in range(n_tasks)})
