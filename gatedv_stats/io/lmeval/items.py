"""lm-evaluation-harness sample logs of downstream tasks (multiple choice, loglikelihood, generate_until) read as
the items of an item-score file (docs/method-statistics.md §5).

A log holds one line per document and filter. Every numeric per-sample metric the harness logged becomes a column
(`acc`, `acc_norm`, `exact_match`, ...), and from the logged log-likelihoods (`filtered_resps`): for multiple
choice `gold_loglik` (the gold choice's) and `gold_margin` (gold minus the best wrong choice's); for loglikelihood
`acc` (the continuation is the greedy one) and `loglik` (replacing the harness's per-item `perplexity`, which is
the log-likelihood itself). A log of one filter names the columns by their metric, one of several filters by
`<metric>,<filter>` as the harness reports them. The harness's hashes of each document, prompt and target are kept.
"""

from __future__ import annotations

import json
import math
import numbers
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from gatedv_stats.core.errors import InputError
from gatedv_stats.io.itemfiles import HASH_COLUMNS, validate_items
from gatedv_stats.io.lmeval.results import HarnessResults
from gatedv_stats.io.lmeval.samples import doc_id_of, sample_lines

ITEM_TYPES = ("multiple_choice", "loglikelihood", "generate_until")
_MEAN_METRICS = {"acc", "acc_norm", "exact_match"}  # checked against the report when no config lists metrics


@dataclass(frozen=True)
class ItemScores:
    """The items of one task's log: one row per document."""

    items: pd.DataFrame  # doc_id, hashes, metric columns
    metrics: tuple[str, ...]
    filters: tuple[str, ...]
    warnings: tuple[str, ...] = ()


def read_item_scores(path: Path, output_type: str, *, id_field: str = "", results: HarnessResults | None = None,
                     task: str | None = None) -> ItemScores:
    """The items of one sample log of `output_type` (holding a sample, as `imports.lmeval.TaskLog.open` checks); with
    its results file, checked against the reported means."""
    by_filter: dict[str, dict[str, dict[str, float]]] = {}
    rows: dict[str, dict] = {}
    first: dict[str, str] = {}
    unscored: dict[str, str] = {}
    delimiter = str((results.config(task) or {}).get("target_delimiter", " ")) if results and task else " "
    for where, sample in sample_lines(path):
        doc_id = doc_id_of(sample, where, id_field)
        name = sample.get("filter", "none")
        if not isinstance(name, str) or not name:
            raise InputError(f"{where}: filter must be a filter's name, got {json.dumps(name)[:80]}")
        docs = by_filter.setdefault(name, {})
        if doc_id in docs:
            raise InputError(f"{where}: document {doc_id!r} appears again under filter {name!r} (first at "
                             f"{first[doc_id]})")
        docs[doc_id] = _scores(sample, where, output_type, delimiter, unscored)
        hashes = {field: str(sample[field]) for field in HASH_COLUMNS if sample.get(field) is not None}
        row = rows.setdefault(doc_id, {"doc_id": doc_id, **hashes})
        first.setdefault(doc_id, where)
        for field, value in hashes.items():
            if row.get(field) != value:
                raise InputError(f"{where}: {field} of document {doc_id!r} differs from its line at {first[doc_id]}")
    for name, docs in by_filter.items():
        if len(docs) != len(rows):
            raise InputError(f"{path}: filter {name!r} has {len(docs)} of the {len(rows)} documents")
        for doc_id, scores in docs.items():
            rows[doc_id].update({metric if len(by_filter) == 1 else f"{metric},{name}": value
                                 for metric, value in scores.items()})
    frame = pd.DataFrame(list(rows.values()))
    metrics = tuple(column for column in frame.columns if column != "doc_id" and column not in HASH_COLUMNS)
    items = validate_items(frame, str(path), metrics, row_names=[first[doc_id] for doc_id in rows])
    if results is not None and task is not None:  # each mean-aggregated metric's mean is the one reported
        means = results.mean_metrics(task) or _MEAN_METRICS
        for name, docs in by_filter.items():
            for metric in sorted(means & set(next(iter(docs.values())))):
                results.check_mean(task, f"{metric},{name}", [scores[metric] for scores in docs.values()], str(path))
    warnings = tuple(f"{where}: metric {metric} logs no per-item number; left out" for metric, where in
                     unscored.items())
    return ItemScores(items, metrics, tuple(by_filter), warnings)


def _scores(sample: dict, where: str, output_type: str, delimiter: str, unscored: dict[str, str]) -> dict[str, float]:
    """The item's scores: its numeric logged metrics, plus what its log-likelihoods give."""
    names = sample.get("metrics")
    if not isinstance(names, list):
        raise InputError(f"{where}: metrics must be a list of metric names, got {json.dumps(names)[:80]}")
    scores = {}
    for name in map(str, names):
        value = sample.get(name)
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            scores[name] = float(value)
        else:
            unscored.setdefault(name, where)
    if output_type == "multiple_choice":
        scores.update(_choice_scores(sample, where, delimiter, scores.get("acc")))
    elif output_type == "loglikelihood":
        (likelihood, greedy), = _loglikelihoods(sample, where, expected=1)
        if "acc" in scores and scores["acc"] != float(greedy):
            raise InputError(f"{where}: acc {scores['acc']:g} disagrees with is_greedy {greedy} in filtered_resps")
        scores.pop("perplexity", None)
        unscored.pop("perplexity", None)
        scores.update(acc=float(greedy), loglik=likelihood)
    return scores


def _choice_scores(sample: dict, where: str, delimiter: str, acc: float | None) -> dict[str, float]:
    """gold_loglik and gold_margin of a multiple-choice item (nothing when its target is several choices)."""
    pairs = _loglikelihoods(sample, where)
    if "acc_mutual_info" in sample.get("metrics", []):  # then the unconditional requests follow the choices'
        pairs = pairs[:len(pairs) // 2]
    likelihoods = np.array([likelihood for likelihood, _ in pairs])
    if len(likelihoods) < 2:
        raise InputError(f"{where}: a multiple-choice item needs two or more choices, filtered_resps has "
                         f"{len(likelihoods)}")
    gold = _gold(sample, where, delimiter, len(likelihoods))
    if gold is None:
        return {}
    if acc is not None and acc != float(int(np.argmax(likelihoods)) == gold):
        raise InputError(f"{where}: acc {acc:g} disagrees with target {gold} and the choices' log-likelihoods in "
                         "filtered_resps")
    return {"gold_loglik": float(likelihoods[gold]),
            "gold_margin": float(likelihoods[gold] - np.delete(likelihoods, gold).max())}


def _gold(sample: dict, where: str, delimiter: str, n_choices: int) -> int | None:
    """The gold choice's index: the target as an index, or the choice whose continuation is the target."""
    target = sample.get("target")
    text = str(target).strip()
    if text.lstrip("-").isdigit():
        gold = int(text)
        if not 0 <= gold < n_choices:
            raise InputError(f"{where}: target {gold} is not one of the {n_choices} choices")
        return gold
    if text.startswith("["):  # several gold choices: accuracy only
        return None
    arguments = sample.get("arguments")
    continuations = [request.get("arg_1") for request in arguments.values()] if isinstance(arguments, dict) else []
    for candidate in (f"{delimiter}{target}", str(target)):
        if candidate in continuations[:n_choices]:
            return continuations.index(candidate)
    raise InputError(f"{where}: target {json.dumps(target)[:80]} is neither a choice's index nor one of the choices")


def _loglikelihoods(sample: dict, where: str, expected: int | None = None) -> list[tuple[float, bool]]:
    """The logged (log-likelihood, is_greedy) of each request, from `filtered_resps` (numbers or their text)."""
    given = sample.get("filtered_resps")
    shape = "a list of [log-likelihood, is_greedy] pairs"
    if not isinstance(given, list) or not given or (expected is not None and len(given) != expected):
        raise InputError(f"{where}: filtered_resps must be {shape}, got {json.dumps(given)[:80]}")
    pairs = []
    for pair in given:
        if not isinstance(pair, list) or len(pair) != 2 or str(pair[1]) not in ("True", "False", "true", "false"):
            raise InputError(f"{where}: filtered_resps must be {shape}, got {json.dumps(pair)[:80]}")
        try:
            likelihood = float(pair[0])
        except (TypeError, ValueError):
            raise InputError(f"{where}: filtered_resps: log-likelihood {json.dumps(pair[0])[:40]} is not a "
                             "number") from None
        if not math.isfinite(likelihood) or likelihood > 0:
            raise InputError(f"{where}: filtered_resps: log-likelihood {likelihood} is not a finite number <= 0")
        pairs.append((likelihood, str(pair[1]).lower() == "true"))
    return pairs


__all__ = ["ITEM_TYPES", "ItemScores", "read_item_scores"]
