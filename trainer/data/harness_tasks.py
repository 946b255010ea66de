"""A data directory's evaluation set as an lm-evaluation-harness perplexity task (`gatedv export-tasks`): the
documents as JSONL and a task YAML scoring each one's rolling log-likelihood.

Each document's text is its window's target text, exactly the `n_bytes` UTF-8 bytes a loss file of the set counts,
so `gatedv import lm-eval --eval-set` can check the harness's log against the set. The harness conditions that
text on the BOS token alone (`scoring` "bos"), where `gatedv evaluate` conditions it on the window's context
(`scoring` "context"): the two are different quantities, and pairing refuses to mix them.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from gatedv_stats.core.atomic import write_text_atomic
from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.core.outputs import check_output_dir, check_output_file
from trainer.data.prepared import PreparedData

_TASK_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-.]*")
ROLLING_METRICS = (("word_perplexity", "weighted_perplexity"), ("byte_perplexity", "weighted_perplexity"),
                   ("bits_per_byte", "bits_per_byte"))


@dataclass(frozen=True)
class ExportedTask:
    """The files of one exported task."""

    task: str
    eval_set: str
    n_docs: int
    documents: str
    config: str

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    def summary(self) -> str:
        directory = Path(self.config).parent
        return (f"task {self.task}: the {self.n_docs} documents of {self.eval_set} -> {self.config} (lm_eval "
                f"--include_path {directory}, or gatedv evaluate --include-path {directory})")


def export_tasks(data: str | os.PathLike, out: str | os.PathLike, *, eval_set: str = "dev",
                 task: str | None = None) -> ExportedTask:
    """Write `eval_set` of the data directory `data` as `out/<task>.jsonl` (rows `id`, `domain`, `text`) and
    `out/<task>.yaml`; `task` defaults to `gatedv_<set name>`."""
    check_output_dir(out, "--out")
    windows = PreparedData.open(data).eval_set(eval_set)
    name = task if task is not None else f"gatedv_{windows.name}"
    if not _TASK_NAME.fullmatch(name):
        raise ParameterError("task", f"{name!r} is not a task name (letters, digits, _ - . only)")
    if windows.target_texts is None:
        raise InputError(f"{eval_set}: the evaluation set holds no window text (target_text); prepare the data "
                         "directory again with this version")
    directory = Path(out)
    documents, config = directory / f"{name}.jsonl", directory / f"{name}.yaml"
    for path in (documents, config):
        check_output_file(path, "--out")
    directory.mkdir(parents=True, exist_ok=True)
    rows = [{"id": doc_id, "domain": domain, "text": text}
            for doc_id, domain, text in zip(windows.doc_ids, windows.domains, windows.target_texts)]
    write_text_atomic(documents, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    write_text_atomic(config, task_yaml(name, documents.resolve(), windows.name, windows.sha256))
    return ExportedTask(task=name, eval_set=windows.name, n_docs=len(rows), documents=str(documents),
                        config=str(config))


def task_yaml(name: str, documents: Path, eval_set: str, eval_set_sha256: str) -> str:
    """The YAML of a rolling-loglikelihood task over the JSONL `documents` (an absolute path)."""
    lines = [f"task: {name}", "dataset_path: json", "dataset_kwargs:", "  data_files:",
             f"    test: {json.dumps(str(documents))}", "output_type: loglikelihood_rolling", "test_split: test",
             "fewshot_split: test", 'doc_to_text: ""', "doc_to_target: text", "metric_list:"]
    lines += [f"  - {{metric: {metric}, aggregation: {aggregation}, higher_is_better: false}}"
              for metric, aggregation in ROLLING_METRICS]
    lines += ["metadata:", "  version: 1.0", f"  gatedv_eval_set: {json.dumps(eval_set)}",
              f"  gatedv_eval_set_sha256: {eval_set_sha256}"]
    return "\n".join(lines) + "\n"
