"""The results file lm-evaluation-harness writes beside its sample logs (`results_<date>.json`): task configs,
shot counts, metric directions, reported aggregates, task hashes, groups and the model that ran.

Only what the importer needs is read: a task's config hash is the SHA-256 of its `configs[task]` as canonical
JSON (sorted keys, no spaces) with `metadata` removed (the harness injects the model arguments there), and the
reported value of a metric under filter F is `results[task]["<metric>,F"]`.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

from gatedv_stats.core.errors import InputError
from gatedv_stats.core.files import canonical_sha256, read_json_object

# What the results file says about the run that wrote the samples (kept as provenance).
RUN_KEYS = ("model_name", "lm_eval_version", "transformers_version", "max_length", "eot_token_id",
            "tokenizer_bos_token", "tokenizer_eos_token")
CONFIG_KEYS = ("model", "model_args", "model_revision", "model_sha", "model_dtype", "batch_size", "limit")


def samples_hash(samples: list[dict]) -> str:
    """The harness's `task_hashes` entry of a sample log: SHA-256 of every line's doc, prompt and target hashes."""
    return hashlib.sha256("".join(f"{s.get('doc_hash')}{s.get('prompt_hash')}{s.get('target_hash')}"
                                  for s in samples).encode("utf-8")).hexdigest()


def model_args(config: dict) -> dict:
    """The model arguments of a results file's `config` (an object, or the `k=v,k=v` text of an in-memory run)."""
    given = config.get("model_args")
    if isinstance(given, dict):
        return given
    if isinstance(given, str):
        return dict(part.split("=", 1) for part in given.split(",") if "=" in part)
    return {}


@dataclass(frozen=True)
class HarnessResults:
    """One results file."""

    path: Path
    data: dict

    @classmethod
    def read(cls, path: str | Path) -> HarnessResults:
        return cls(Path(path), read_json_object(path))

    def section(self, key: str) -> dict:
        """The results file's object under `key` ({} when it holds none)."""
        value = self.data.get(key)
        return value if isinstance(value, dict) else {}

    def config(self, task: str) -> dict | None:
        config = self.section("configs").get(task)
        return config if isinstance(config, dict) else None

    def output_type(self, task: str) -> str | None:
        return (self.config(task) or {}).get("output_type")

    def config_sha256(self, task: str) -> str | None:
        config = self.config(task)
        return None if config is None else canonical_sha256({k: v for k, v in config.items() if k != "metadata"})

    def n_shot(self, task: str) -> int | None:
        shots = self.section("n-shot").get(task)
        shots = (self.config(task) or {}).get("num_fewshot") if shots is None else shots
        return shots if isinstance(shots, int) and not isinstance(shots, bool) else None

    def higher_is_better(self, task: str) -> dict[str, bool]:
        given = self.section("higher_is_better").get(task)
        return {k: v for k, v in given.items() if isinstance(v, bool)} if isinstance(given, dict) else {}

    def mean_metrics(self, task: str) -> set[str] | None:
        """The metrics the task aggregates by their mean (from its config's metric_list; None when it has none)."""
        listed = (self.config(task) or {}).get("metric_list")
        if not isinstance(listed, list):
            return None
        return {entry["metric"] for entry in listed
                if isinstance(entry, dict) and entry.get("aggregation", "mean") == "mean" and "metric" in entry}

    def declared_eval_set(self, task: str) -> tuple[str, str] | None:
        """The evaluation set a task exported by `gatedv export-tasks` declares in its metadata: (name, SHA-256)."""
        metadata = (self.config(task) or {}).get("metadata")
        if not isinstance(metadata, dict) or not metadata.get("gatedv_eval_set_sha256"):
            return None
        return str(metadata.get("gatedv_eval_set")), str(metadata["gatedv_eval_set_sha256"])

    def reported(self, task: str, key: str) -> float | None:
        value = self.section("results").get(task, {}).get(key)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    def task_hash(self, task: str) -> str | None:
        value = self.section("task_hashes").get(task)
        return value if isinstance(value, str) else None

    def groups(self) -> dict[str, list[str]]:
        """Each top-level group (not itself a subtask of another group) with its leaf tasks, in order."""
        listed = {group: [str(t) for t in tasks] for group, tasks in self.section("group_subtasks").items()
                  if isinstance(tasks, list)}
        nested = {task for tasks in listed.values() for task in tasks}

        def leaves(task: str) -> list[str]:
            return [leaf for sub in listed[task] for leaf in leaves(sub)] if task in listed else [task]
        return {group: leaves(group) for group in listed if group not in nested}

    def run(self) -> dict:
        """Provenance of the run: model, harness and library versions."""
        config = self.section("config")
        return {**{key: self.data.get(key) for key in RUN_KEYS}, **{key: config.get(key) for key in CONFIG_KEYS},
                "results_file": self.path.name}

    def model(self) -> str | None:
        """The evaluated model: its `pretrained` argument, else the harness's model name."""
        pretrained = model_args(self.section("config")).get("pretrained")
        return str(pretrained) if pretrained else self.data.get("model_name")

    def doubled_bos(self) -> str | None:
        """Why a rolling log-likelihood of this run may score a doubled BOS, else None.

        The harness conditions a rolling document on the BOS token; when the tokenizer also prepends BOS to the
        text (`add_bos_token=True` in the model arguments, or in a local model's tokenizer_config.json with no
        `add_bos_token` argument given), the BOS itself is predicted and counted."""
        args = model_args(self.section("config"))
        given = str(args.get("add_bos_token", "")).lower()
        if given == "true":
            return "the model arguments set add_bos_token=True"
        pretrained = Path(str(args.get("pretrained", ""))) / "tokenizer_config.json"
        if not given and args.get("pretrained") and pretrained.is_file():
            with_bos = read_json_object(pretrained).get("add_bos_token") is True
            return f"{pretrained} sets add_bos_token and no add_bos_token was given" if with_bos else None
        return None

    def check_mean(self, task: str, key: str, values: list[float], where: str) -> None:
        """An InputError unless the mean of `values` (the harness's sum/len, in log order) equals the reported one."""
        reported = self.reported(task, key)
        ours = sum(values) / len(values)
        if reported is not None and ours != reported:
            raise InputError(f"{where}: the mean {key.split(',')[0]} of the logged items ({ours!r}) differs from "
                             f"the {reported!r} that {self.path} reports for {task} ({key}); the log and the "
                             "results file are not of one run")

    def check_group(self, group: str, key: str, means: list[tuple[float, int]]) -> None:
        """The group's reported value against its subtasks' means, weighted by size (Σ(mean·n)/Σn, the harness's
        weight_by_size) or not."""
        reported = self.reported(group, key)
        ours = sum(mean * n for mean, n in means) / sum(n for _, n in means)
        unweighted = sum(mean for mean, _ in means) / len(means)
        if reported is not None and not any(math.isclose(value, reported, rel_tol=1e-12, abs_tol=1e-15)
                                            for value in (ours, unweighted)):
            raise InputError(f"{self.path}: group {group} reports {key} {reported!r}, but its subtasks' logged items "
                             f"give {ours!r}")


def results_beside(path: Path, date: str | None) -> HarnessResults | None:
    """The results file written with a sample log (`results_<date>.json` in its directory), if there."""
    results = path.with_name(f"results_{date}.json") if date else None
    return HarnessResults.read(results) if results is not None and results.is_file() else None


__all__ = ["CONFIG_KEYS", "RUN_KEYS", "HarnessResults", "model_args", "results_beside", "samples_hash"]
