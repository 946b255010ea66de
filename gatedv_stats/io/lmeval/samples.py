"""The lines of an lm-evaluation-harness per-sample log (`--log_samples`: `samples_<task>_<date>.jsonl`): each
line one JSON object, the sample of one document (and filter). What every reader of a log shares: the lines, the
harness output type a sample comes from, its metrics' names, and the id of its document.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

from gatedv_stats.core.errors import InputError

ROLLING = "loglikelihood_rolling"
# The per-document metrics of a rolling-loglikelihood sample, each `[log-likelihood, count]`.
ROLLING_METRICS = ("word_perplexity", "byte_perplexity", "bits_per_byte")
SAMPLES_NAME = re.compile(r"samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.jsonl")
# How the harness's task types are named in messages.
KIND_NAMES = {"generate_until": "generation (generate_until)", "multiple_choice": "multiple-choice",
              "loglikelihood": "loglikelihood (context and continuation)",
              ROLLING: "rolling loglikelihood"}


def sample_lines(path: Path) -> Iterator[tuple[str, dict]]:
    """(path:line, sample object) of each non-blank line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: cannot read the file ({error})") from None
    for where, line in [(f"{path}:{number}", line) for number, line in enumerate(lines, start=1) if line.strip()]:
        try:
            sample = json.loads(line)
        except json.JSONDecodeError as error:
            raise InputError(f"{where}: invalid JSON ({error.msg}); not an lm-evaluation-harness sample line") \
                from None
        if not isinstance(sample, dict):
            raise InputError(f"{where}: expected a JSON object per line (an lm-evaluation-harness sample)")
        yield where, sample


def output_type_of(sample: dict) -> str | None:
    """The harness output_type a logged sample comes from, told by its requests (`arguments`); None if unknown."""
    arguments = sample.get("arguments")
    requests = list(arguments.values()) if isinstance(arguments, dict) else []
    if any(isinstance(request, dict) and isinstance(request.get("arg_1"), dict) for request in requests):
        return "generate_until"
    if len(requests) > 1:
        return "multiple_choice"
    if requests and isinstance(requests[0], dict) and "arg_1" in requests[0]:
        return "loglikelihood"
    if requests and any(metric in sample for metric in ROLLING_METRICS):
        return ROLLING
    return None


def metrics_text(sample: dict, where: str) -> str:
    """The sample's `metrics` field (a list of names, or an object keyed by them), for a message."""
    metrics = sample.get("metrics") or []
    if not isinstance(metrics, (list, dict)):
        raise InputError(f"{where}: metrics must be a list or an object of metric names, got "
                         f"{json.dumps(metrics)[:80]}")
    return f"metrics: {', '.join(map(str, metrics)) or 'none'}"


def doc_id_of(sample: dict, where: str, id_field: str) -> str:
    """The id of a sample's document: the logged document's `id_field`, or with an empty `id_field` the harness's
    `doc_id` (the document's position in its task's dataset)."""
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


__all__ = ["KIND_NAMES", "ROLLING", "ROLLING_METRICS", "SAMPLES_NAME", "doc_id_of", "metrics_text", "output_type_of",
           "sample_lines"]
