"""EleutherAI lm-evaluation-harness per-sample logs (`--log_samples`: `samples_<task>_<date>.jsonl`) of
rolling-loglikelihood (perplexity) tasks, read as the documents of a loss file (docs/method-statistics.md §5).

Each line of such a log is one document: under the metrics `word_perplexity`, `byte_perplexity` and
`bits_per_byte` the harness records `[log-likelihood, count]`, the natural-log likelihood of the document's whole
text summed over the model's tokens, with the document's word or UTF-8 byte count. Here loss_sum = −log-likelihood
(nats), n_bytes = the byte count and n_targets = the word count (`target_unit` "word"), or the byte count when a
log holds no word count (`target_unit` "byte"). The harness conditions each document on the BOS token alone and
scores the whole text (`scoring` "bos").
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from gatedv_stats.core.errors import InputError
from gatedv_stats.core.files import file_sha256
from gatedv_stats.io.lmeval.results import results_beside
from gatedv_stats.io.lmeval.samples import (
    KIND_NAMES,
    ROLLING,
    ROLLING_METRICS,
    SAMPLES_NAME,
    doc_id_of,
    metrics_text,
    output_type_of,
    sample_lines,
)
from gatedv_stats.io.lossfiles import validate_docs

_BYTE_METRICS = ("byte_perplexity", "bits_per_byte")


@dataclass(frozen=True)
class HarnessSamples:
    """The documents of one or more sample logs and what identifies them."""

    docs: pd.DataFrame  # doc_id, n_targets, loss_sum, n_bytes
    meta: dict
    warnings: tuple[str, ...] = ()


class EvalSetLike(Protocol):
    """The evaluation set a log was made from (a prepared data directory's set): its name, hash, documents."""

    name: str
    sha256: str
    doc_ids: list[str]
    n_bytes: Any


def read_lm_eval_samples(paths: Sequence[str | Path], *, id_field: str = "id",
                         eval_set: EvalSetLike | None = None) -> HarnessSamples:
    """Read rolling-loglikelihood sample logs; documents are named by the logged document's `id_field`
    (an empty `id_field`: by the harness's `doc_id`, the document's position in its task's dataset). With
    `eval_set` the documents must be that set's, and the file records its name and SHA-256. The logs are files
    holding a sample each, as `imports.lmeval.TaskLog.open` checks."""
    rows: list[tuple] = []
    seen: dict[str, str] = {}
    files: list[dict[str, Any]] = []
    warnings: list[str] = []
    declared: set[tuple[str, str]] = set()
    for given in paths:
        path = Path(given)
        before = len(rows)
        for where, sample in sample_lines(path):
            row = _document(sample, where, id_field)
            if row[0] in seen:
                raise InputError(f"{where}: document {row[0]!r} appears again (first at {seen[row[0]]})")
            seen[row[0]] = where
            rows.append((*row, where))
        match = SAMPLES_NAME.fullmatch(path.name)
        results = results_beside(path, match["date"] if match else None)
        if results is not None and match and (named := results.declared_eval_set(match["task"])):
            declared.add(named)
        if results is not None and (doubled := results.doubled_bos()):
            warnings.append(f"{path}: the harness may have scored a doubled BOS ({doubled}): it conditions each "
                            "document on BOS and the tokenizer prepends another, which is then predicted and "
                            "counted; run lm_eval with --model_args ...,add_bos_token=False")
        files.append({"path": str(path), "sha256": file_sha256(path), "task": match["task"] if match else None,
                      "documents": len(rows) - before, "run": results.run() if results else None})
    logged = pd.DataFrame(rows, columns=["doc_id", "loss_sum", "words", "n_bytes", "where"])
    wordless = list(logged.loc[logged["words"].isna(), "where"])
    by_words = not wordless
    if not by_words and len(wordless) != len(rows):
        warnings.append(f"{len(wordless)} of {len(rows)} samples log no word count (word_perplexity; the first at "
                        f"{wordless[0]}): every document's targets are its bytes")
    docs = validate_docs(logged.assign(n_targets=logged["words" if by_words else "n_bytes"]),
                         ", ".join(map(str, paths)), row_names=list(logged["where"]))
    meta = {"source": "lm-evaluation-harness", "lm_eval_tasks": sorted({f["task"] for f in files if f["task"]}),
            "lm_eval_files": files, "target_unit": "word" if by_words else "byte", "loss_unit": "nats",
            "doc_id_field": f"doc.{id_field}" if id_field else "doc_id", "scoring": "bos"}
    meta.update(_eval_set_meta(docs, eval_set, declared, ", ".join(map(str, paths))))
    return HarnessSamples(docs[["doc_id", "n_targets", "loss_sum", "n_bytes"]], meta, tuple(warnings))


def _eval_set_meta(docs: pd.DataFrame, eval_set: EvalSetLike | None, declared: set[tuple[str, str]],
                   source: str) -> dict:
    """`eval_set` and `eval_set_sha256`: of the set given (its documents checked), else of the one the tasks
    declare (a task of `gatedv export-tasks` names its set); none when neither."""
    if eval_set is None:
        return dict(zip(("eval_set", "eval_set_sha256"), declared.pop())) if len(declared) == 1 else {}
    expected = dict(zip(map(str, eval_set.doc_ids), map(int, eval_set.n_bytes)))
    logged = dict(zip(docs["doc_id"], docs["n_bytes"].astype(int)))
    missing, extra = sorted(set(expected) - set(logged)), sorted(set(logged) - set(expected))
    if missing or extra:
        raise InputError(f"{source}: the documents are not those of eval set {eval_set.name!r} ({len(missing)} of its "
                         f"{len(expected)} missing, first {missing[:1]}; {len(extra)} not in it, first {extra[:1]})")
    differing = next((doc_id for doc_id, n in logged.items() if expected[doc_id] != n), None)
    if differing is not None:
        raise InputError(f"{source}: document {differing!r} has {logged[differing]} bytes, in eval set "
                         f"{eval_set.name!r} {expected[differing]}; the log scored other text")
    other = next((sha for _, sha in declared if sha != eval_set.sha256), None)
    if other is not None:
        raise InputError(f"{source}: the task was exported from an evaluation set of SHA-256 {other}, not "
                         f"{eval_set.name!r} ({eval_set.sha256})")
    return {"eval_set": eval_set.name, "eval_set_sha256": eval_set.sha256}


def _document(sample: dict, where: str, id_field: str) -> tuple[str, float, int | None, int]:
    """(doc_id, loss_sum, words or None, bytes) of one rolling-loglikelihood sample."""
    kind = KIND_NAMES.get(output_type_of(sample) or "", "unknown")
    if kind != KIND_NAMES[ROLLING]:
        article = "an" if kind[0] in "aeiou" else "a"
        raise InputError(f"{where}: a sample of {article} {kind} task ({metrics_text(sample, where)}); only "
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
    return doc_id_of(sample, where, id_field), -likelihood, words, n_bytes


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


__all__ = ["EvalSetLike", "HarnessSamples", "read_lm_eval_samples"]
