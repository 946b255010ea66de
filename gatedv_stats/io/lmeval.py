"""EleutherAI lm-evaluation-harness per-sample logs (`--log_samples`: `samples_<task>_<date>.jsonl`) of
rolling-loglikelihood (perplexity) tasks, read as the documents of a loss file (docs/method.md §5).

Each line of such a log is one document: under the metrics `word_perplexity`, `byte_perplexity` and
`bits_per_byte` the harness records `[log-likelihood, count]`, the natural-log likelihood of the document's whole
text summed over the model's tokens, with the document's word or UTF-8 byte count. Here loss_sum = −log-likelihood
(nats), n_bytes = the byte count and n_targets = the word count (`target_unit` "word"), or the byte count when a
log holds no word count (`target_unit` "byte"). Samples of other task types (multiple choice, generation, a
single context-continuation loglikelihood) hold no per-document likelihood of a text and are refused.
"""

from __future__ import annotations

import json
import math
import numbers
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from gatedv_stats.errors import InputError, ParameterError
from gatedv_stats.io.fileio import file_sha256, read_json_object
from gatedv_stats.io.lossfiles import validate_docs, write_loss_file
from gatedv_stats.stats.validation import check_seed

ROLLING_METRICS = ("word_perplexity", "byte_perplexity", "bits_per_byte")
_BYTE_METRICS = ("byte_perplexity", "bits_per_byte")
_SAMPLES_NAME = re.compile(r"samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.jsonl")
# What a harness results file says about the run that wrote the samples (kept as provenance).
_RUN_KEYS = ("model_name", "lm_eval_version", "transformers_version", "max_length", "eot_token_id",
             "tokenizer_bos_token", "tokenizer_eos_token")
_CONFIG_KEYS = ("model", "model_args", "model_revision", "model_sha", "model_dtype", "batch_size")


@dataclass(frozen=True)
class HarnessSamples:
    """The documents of one or more sample logs and what identifies them."""

    docs: pd.DataFrame  # doc_id, n_targets, loss_sum, n_bytes
    meta: dict
    warnings: tuple[str, ...] = ()


def read_lm_eval_samples(paths: Sequence[str | Path], *, id_field: str = "id") -> HarnessSamples:
    """Read rolling-loglikelihood sample logs; documents are named by the logged document's `id_field`
    (an empty `id_field`: by the harness's `doc_id`, the document's position in its task's dataset)."""
    if not paths:
        raise InputError("no lm-evaluation-harness sample log given")
    rows: list[tuple] = []
    seen: dict[str, str] = {}
    files: list[dict[str, Any]] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            raise InputError(f"{path}: is a directory, not a sample log (give its samples_<task>_<date>.jsonl)")
        if not path.is_file():
            raise InputError(f"{path}: no such file")
        count = 0
        for where, sample in _samples(path):
            row = _document(sample, where, id_field)
            if row[0] in seen:
                raise InputError(f"{where}: document {row[0]!r} appears again (first at {seen[row[0]]})")
            seen[row[0]] = where
            rows.append((*row, where))
            count += 1
        if count == 0:
            raise InputError(f"{path}: holds no sample")
        match = _SAMPLES_NAME.fullmatch(path.name)
        files.append({"path": str(path), "sha256": file_sha256(path), "task": match["task"] if match else None,
                      "documents": count, "run": _harness_run(path, match)})
    wordless = [row[4] for row in rows if row[2] is None]
    by_words = not wordless
    warnings = () if by_words or len(wordless) == len(rows) else (
        f"{len(wordless)} of {len(rows)} samples log no word count (word_perplexity; the first at {wordless[0]}): "
        "every document's targets are its bytes",)
    docs = pd.DataFrame({"doc_id": [row[0] for row in rows], "loss_sum": [row[1] for row in rows],
                         "n_targets": [row[2] if by_words else row[3] for row in rows],
                         "n_bytes": [row[3] for row in rows]})
    docs = validate_docs(docs, ", ".join(map(str, paths)), row_names=[row[4] for row in rows])
    meta = {"source": "lm-evaluation-harness", "lm_eval_tasks": sorted({f["task"] for f in files if f["task"]}),
            "lm_eval_files": files, "target_unit": "word" if by_words else "byte", "loss_unit": "nats",
            "doc_id_field": f"doc.{id_field}" if id_field else "doc_id"}
    return HarnessSamples(docs[["doc_id", "n_targets", "loss_sum", "n_bytes"]], meta, warnings)


def _samples(path: Path):
    """(path:line, sample object) of each non-blank line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: cannot read the file ({error})") from None
    for number, line in enumerate(lines, start=1):
        where = f"{path}:{number}"
        if not line.strip():
            continue
        try:
            sample = json.loads(line)
        except json.JSONDecodeError as error:
            raise InputError(f"{where}: invalid JSON ({error.msg}); not an lm-evaluation-harness sample line") \
                from None
        if not isinstance(sample, dict):
            raise InputError(f"{where}: expected a JSON object per line (an lm-evaluation-harness sample)")
        yield where, sample


def _document(sample: dict, where: str, id_field: str) -> tuple[str, float, int | None, int]:
    """(doc_id, loss_sum, words or None, bytes) of one rolling-loglikelihood sample."""
    kind = _task_kind(sample)
    if kind != "rolling loglikelihood":
        article = "an" if kind[0] in "aeiou" else "a"
        raise InputError(f"{where}: a sample of {article} {kind} task ({_metrics(sample, where)}); only "
                         "rolling-loglikelihood (perplexity) tasks log a per-document log-likelihood "
                         f"({', '.join(ROLLING_METRICS)})")
    pairs = {metric: _pair(sample[metric], where, metric) for metric in ROLLING_METRICS if metric in sample}
    likelihoods = {likelihood for likelihood, _ in pairs.values()}
    if len(likelihoods) != 1:
        raise InputError(f"{where}: the metrics record different log-likelihoods ({sorted(likelihoods)})")
    likelihood = likelihoods.pop()
    if not math.isfinite(likelihood) or likelihood > 0:
        raise InputError(f"{where}: log-likelihood {likelihood} is not a finite number <= 0")
    byte_counts = {pairs[metric][1] for metric in _BYTE_METRICS if metric in pairs}
    if not byte_counts:
        raise InputError(f"{where}: no byte count (metric byte_perplexity or bits_per_byte) in the sample")
    if len(byte_counts) != 1:
        raise InputError(f"{where}: byte_perplexity and bits_per_byte record different byte counts "
                         f"({pairs['byte_perplexity'][1]}, {pairs['bits_per_byte'][1]})")
    n_bytes = byte_counts.pop()
    words = pairs["word_perplexity"][1] if "word_perplexity" in pairs else None
    if n_bytes < 1 or words == 0:
        raise InputError(f"{where}: an empty document (counts: {n_bytes} bytes, {words} words)")
    return _doc_id(sample, where, id_field), -likelihood, words, n_bytes


def _metrics(sample: dict, where: str) -> str:
    """The sample's `metrics` field (a list of names, or an object keyed by them), for a message."""
    metrics = sample.get("metrics") or []
    if not isinstance(metrics, (list, dict)):
        raise InputError(f"{where}: metrics must be a list or an object of metric names, got "
                         f"{json.dumps(metrics)[:80]}")
    return f"metrics: {', '.join(map(str, metrics)) or 'none'}"


def _task_kind(sample: dict) -> str:
    """The task type a logged sample comes from, told by its requests (`arguments`)."""
    arguments = sample.get("arguments")
    requests = list(arguments.values()) if isinstance(arguments, dict) else []
    if any(isinstance(request, dict) and isinstance(request.get("arg_1"), dict) for request in requests):
        return "generation (generate_until)"
    if len(requests) > 1:
        return "multiple-choice"
    if requests and isinstance(requests[0], dict) and "arg_1" in requests[0]:
        return "loglikelihood (context and continuation)"
    if requests and any(metric in sample for metric in ROLLING_METRICS):
        return "rolling loglikelihood"
    return "unknown"


def _pair(value: object, where: str, metric: str) -> tuple[float, int]:
    """A logged `[log-likelihood, count]`."""
    if (not isinstance(value, list) or len(value) != 2 or not isinstance(value[0], numbers.Real)
            or isinstance(value[0], bool) or isinstance(value[1], bool) or not isinstance(value[1], int)
            or value[1] < 0):
        raise InputError(f"{where}: {metric} must be [log-likelihood, count], got {json.dumps(value)[:80]}")
    try:
        return float(value[0]), value[1]
    except OverflowError:
        raise InputError(f"{where}: {metric}: log-likelihood {str(value[0])[:40]}... is beyond float64") from None


def _doc_id(sample: dict, where: str, id_field: str) -> str:
    if not id_field:
        if isinstance(sample.get("doc_id"), bool) or not isinstance(sample.get("doc_id"), int):
            raise InputError(f"{where}: no integer doc_id in the sample")
        return str(sample["doc_id"])
    doc = sample.get("doc")
    if not isinstance(doc, dict) or doc.get(id_field) in (None, ""):
        fields = ", ".join(map(str, doc)) if isinstance(doc, dict) else "none"
        raise InputError(f"{where}: the logged document has no {id_field!r} field (its fields: {fields}); name the "
                         "id field with --id-field, or give --id-field '' for the harness's doc_id (the document's "
                         "position in the task's dataset)")
    if isinstance(doc[id_field], bool) or not isinstance(doc[id_field], (str, int)):
        raise InputError(f"{where}: doc.{id_field} must be a string or an integer, got "
                         f"{json.dumps(doc[id_field])[:80]}")
    return str(doc[id_field])


def _harness_run(path: Path, match: re.Match | None) -> dict | None:
    """What the results file written beside the samples (`results_<date>.json`) says about the model."""
    results = path.with_name(f"results_{match['date']}.json") if match else None
    if results is None or not results.is_file():
        return None
    data = read_json_object(results)
    config = data.get("config")
    if not isinstance(config, dict):
        config = {}
    return {**{key: data.get(key) for key in _RUN_KEYS}, **{key: config.get(key) for key in _CONFIG_KEYS},
            "results_file": results.name}


@dataclass(frozen=True)
class LmEvalImport:
    """Sample logs written as one loss file."""

    out: str
    arm: str
    seed: int
    tasks: list
    n_docs: int
    n_targets: int
    target_unit: str
    n_bytes: int
    loss_sum: float
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {**self.__dict__, "warnings": list(self.warnings),
                "bits_per_byte": self.loss_sum / (math.log(2) * self.n_bytes)}

    def summary(self) -> str:
        return (f"{self.arm} seed {self.seed} from lm-evaluation-harness ({', '.join(self.tasks) or 'unnamed task'}): "
                f"{self.n_docs} documents, {self.n_bytes:,} bytes, {self.n_targets:,} {self.target_unit}s; bits per "
                f"byte {self.loss_sum / (math.log(2) * self.n_bytes):.6f} -> {self.out}")


def import_lm_eval(paths: Sequence[str | Path], out: str | Path, *, arm: str, seed: int = 0,
                   id_field: str = "id") -> LmEvalImport:
    """Read sample logs (see `read_lm_eval_samples`) and write them as the loss file `out` of (arm, seed)."""
    if not arm or not arm.strip():
        raise ParameterError("arm", "must name the arm (a non-empty name)")
    check_seed(seed, "seed")
    samples = read_lm_eval_samples(paths, id_field=id_field)
    write_loss_file(out, samples.docs, {"arm": arm, "seed": seed, **samples.meta})
    docs = samples.docs
    return LmEvalImport(out=str(out), arm=arm, seed=seed, tasks=samples.meta["lm_eval_tasks"], n_docs=len(docs),
                        n_targets=int(docs["n_targets"].sum()), target_unit=samples.meta["target_unit"],
                        n_bytes=int(docs["n_bytes"].sum()), loss_sum=float(docs["loss_sum"].sum()),
                        warnings=samples.warnings)


__all__ = ["ROLLING_METRICS", "HarnessSamples", "LmEvalImport", "import_lm_eval", "read_lm_eval_samples"]
