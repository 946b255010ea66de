"""`gatedv import lm-eval` (`import_lm_eval`): lm-evaluation-harness output as loss files (rolling
loglikelihood) and item-score files (every other task type), read by `gatedv_stats.io.lmeval`.

A results directory is the harness's `--output_path` tree: one `results_<date>.json` with a `samples_<task>_<date>
.jsonl` per task. The subtasks of a group (MMLU's subjects) become one file whose items are named
`<subtask>/<doc_id>`, with a `subtask` column. Every imported mean (accuracy, exact match, ...) must equal what the
results file reports for the task, and every log must match the results file's task hash.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.core.files import canonical_sha256, file_sha256, files_sha256, weight_files
from gatedv_stats.core.outputs import check_output_dir, check_output_file, cleaned_on_failure
from gatedv_stats.core.validation import check_seed
from gatedv_stats.io.itemfiles import HASH_COLUMNS, ITEMS, KNOWN_HIGHER_IS_BETTER, write_item_file
from gatedv_stats.io.lmeval.items import ITEM_TYPES, ItemScores, read_item_scores
from gatedv_stats.io.lmeval.perplexity import EvalSetLike, read_lm_eval_samples
from gatedv_stats.io.lmeval.results import HarnessResults, results_beside, samples_hash
from gatedv_stats.io.lmeval.samples import KIND_NAMES, ROLLING, SAMPLES_NAME, metrics_text, output_type_of, sample_lines
from gatedv_stats.io.lossfiles import LOSS, write_loss_file
from gatedv_stats.io.runfiles import file_runs, write_run


@dataclass(frozen=True)
class TaskLog:
    """One task's sample log and the results file written with it (if any)."""

    task: str
    path: Path
    output_type: str
    results: HarnessResults | None
    id_field: str

    @classmethod
    def open(cls, path: Path, *, task: str | None = None, results: HarnessResults | None = None,
             id_field: str | None = None) -> TaskLog:
        if path.is_dir():
            raise InputError(f"{path}: is a directory, not a sample log (give its samples_<task>_<date>.jsonl)")
        if not path.is_file():
            raise InputError(f"{path}: no such file")
        match = SAMPLES_NAME.fullmatch(path.name)
        task = task or (match["task"] if match else path.stem)
        results = results or results_beside(path, match["date"] if match else None)
        where, first = next(iter(sample_lines(path)), (str(path), None))
        if first is None:
            raise InputError(f"{path}: holds no sample")
        kind = (results.output_type(task) if results else None) or output_type_of(first)
        if kind not in (ROLLING, *ITEM_TYPES):
            raise InputError(f"{where}: a sample of an unknown task{f' type {kind}' if kind else ''} "
                             f"({metrics_text(first, where)})")
        if id_field is None:  # the logged document's own id when it has one, else the harness's position
            id_field = "id" if isinstance(first.get("doc"), dict) and "id" in first["doc"] else ""
        if results is not None and results.task_hash(task) is not None:
            if samples_hash([sample for _, sample in sample_lines(path)]) != results.task_hash(task):
                raise InputError(f"{path}: its documents, prompts and targets do not match the task_hashes entry of "
                                 f"{task} in {results.path}; the log and the results file are not of one run")
        return cls(task, path, kind, results, id_field)

    def scores(self) -> ItemScores:
        return read_item_scores(self.path, self.output_type, id_field=self.id_field, results=self.results,
                                task=self.task)

    def meta(self) -> dict:
        results = self.results
        run = results.run() if results else {}
        return {"source": "lm-evaluation-harness", "output_type": self.output_type,
                "doc_id_field": f"doc.{self.id_field}" if self.id_field else "doc_id",
                "n_shot": results.n_shot(self.task) if results else None,
                "task_config_sha256": results.config_sha256(self.task) if results else None,
                "model": results.model() if results else None,
                "harness_version": run.get("lm_eval_version"), "lm_eval_run": run or None}


@dataclass(frozen=True)
class LossSums:
    """The sums of a loss file written from rolling-loglikelihood logs."""

    tasks: list  # the tasks the logs' file names give
    n_docs: int
    n_targets: int
    target_unit: str
    n_bytes: int
    loss_sum: float

    @property
    def bits_per_byte(self) -> float:
        return self.loss_sum / (math.log(2) * self.n_bytes)


@dataclass(frozen=True)
class ImportedFile:
    """One file an import wrote."""

    path: str
    kind: str  # "loss" or "items"
    task: str
    output_type: str
    n_items: int
    means: dict  # metric -> mean over the items (loss files: bits per byte)
    subtasks: tuple[str, ...] = ()
    sums: LossSums | None = None  # a loss file's

    def to_dict(self) -> dict:
        return {"path": self.path, "kind": self.kind, "task": self.task, "output_type": self.output_type,
                "n_items": self.n_items, "means": self.means, "subtasks": list(self.subtasks)}

    def line(self) -> str:
        figures = ", ".join(f"{metric} {value:.6g}" for metric, value in self.means.items())
        group = f" (group of {len(self.subtasks)} subtasks)" if self.subtasks else ""
        return f"  {self.task}{group}: {self.n_items} {'documents' if self.kind == 'loss' else 'items'}, {figures} " \
               f"-> {self.path}"


@dataclass(frozen=True)
class LmEvalImport:
    """What an import wrote: its files, whether their means were checked against a results file, its warnings.
    Rolling logs given one by one (`loss_file`) are reported by the sums of their one loss file."""

    arm: str
    seed: int
    files: tuple[ImportedFile, ...]
    checked: bool  # whether the means were checked against a results file
    warnings: tuple[str, ...] = ()
    loss_file: bool = False

    def _sums(self) -> tuple[ImportedFile, LossSums]:
        (written,) = self.files
        assert written.sums is not None, "a loss file's import carries its sums"
        return written, written.sums

    def to_dict(self) -> dict:
        if self.loss_file:
            written, sums = self._sums()
            return {"out": written.path, "arm": self.arm, "seed": self.seed, **asdict(sums),
                    "warnings": list(self.warnings), "bits_per_byte": sums.bits_per_byte}
        return {"arm": self.arm, "seed": self.seed, "files": [f.to_dict() for f in self.files],
                "checked_against_results": self.checked, "warnings": list(self.warnings)}

    def summary(self) -> str:
        if self.loss_file:
            written, sums = self._sums()
            tasks = ", ".join(sums.tasks) or "unnamed task"
            return (f"{self.arm} seed {self.seed} from lm-evaluation-harness ({tasks}): {sums.n_docs} documents, "
                    f"{sums.n_bytes:,} bytes, {sums.n_targets:,} {sums.target_unit}s; bits per byte "
                    f"{sums.bits_per_byte:.6f} -> {written.path}")
        check = ("every mean equals the harness's reported one" if self.checked
                 else "no results file: the means are unchecked")
        return "\n".join([f"{self.arm} seed {self.seed} from lm-evaluation-harness ({check}):",
                          *(f.line() for f in self.files)])


def import_lm_eval(inputs: Sequence[str | Path], out: str | Path, *, arm: str, seed: int = 0,
                   id_field: str | None = None, eval_set: EvalSetLike | None = None,
                   provenance: dict | None = None, model_dir: str | Path | None = None) -> LmEvalImport:
    """Import lm-evaluation-harness output into `out` as the files of (arm, seed): a results directory (or its
    results_<date>.json) into the directory `out`, a file per task and per group; rolling-loglikelihood logs into
    the loss file `out`; one log of another task type into the item-score file `out`.

    `id_field`: the logged document's field naming it ('' for the harness's doc_id; default: `id` where the
    documents have one). `eval_set`: the evaluation set rolling logs were made from (their documents checked, its
    name and SHA-256 recorded). `provenance`: metadata written over the import's own in every file (a checkpoint's,
    `gatedv evaluate --tasks`). `model_dir`: the evaluated model's directory, whose weight files' SHA-256 every file
    records as `model_sha256` (default: the local directory the results file names as the model, if there is one;
    none: not recorded)."""
    if not arm or not arm.strip():
        raise ParameterError("arm", "must name the arm (a non-empty name)")
    check_seed(seed, "seed")
    model = None if model_dir is None else Path(model_dir)
    if model is not None:
        if not model.is_dir():
            raise ParameterError("model_dir", f"{model}: no such model directory")
        try:
            weights = weight_files(model)
        except OSError as error:
            raise ParameterError("model_dir", f"{model}: cannot list the directory: {error.strerror}") from None
        if not weights:
            raise ParameterError("model_dir", f"{model}: holds no model weights (*.safetensors or pytorch_model*.bin)")
    if not inputs:
        raise InputError("no lm-evaluation-harness sample log given")
    single = Path(inputs[0])
    if len(inputs) == 1 and (single.is_dir() or (single.name.startswith("results_") and single.suffix == ".json")):
        imported = _import_results(single, out, arm, seed, id_field, eval_set, model)
    else:
        imported = _import_logs(inputs, out, arm, seed, id_field, eval_set, model)
    if provenance is not None:  # every file rewritten with it in its metadata, the rows unchanged
        for written in imported.files:
            schema = LOSS if written.kind == "loss" else ITEMS
            (run,) = file_runs(written.path, schema)
            write_run(written.path, run.units, {**run.meta, **provenance}, schema)
    return imported


def _import_logs(inputs: Sequence[str | Path], out: str | Path, arm: str, seed: int, id_field: str | None,
                 eval_set: EvalSetLike | None, model_dir: Path | None) -> LmEvalImport:
    """Sample logs into the file `out`: rolling ones into one loss file, one of another task type into an
    item-score file."""
    check_output_file(out, "--out", suffix=".parquet")
    logs = [TaskLog.open(Path(path), id_field=id_field) for path in inputs]
    model = _model_meta(model_dir, [log.results for log in logs])
    if {log.output_type for log in logs} == {ROLLING}:
        task = ", ".join(dict.fromkeys(log.task for log in logs))
        written, warnings = _write_loss_file(inputs, out, task, arm, seed, logs[0].id_field, eval_set, model)
        return LmEvalImport(arm, seed, (written,), all(log.results is not None for log in logs), warnings,
                            loss_file=True)
    if len(logs) > 1:
        listed = ", ".join(f"{log.path.name}: {KIND_NAMES[log.output_type]}" for log in logs)
        raise InputError(f"{len(logs)} logs ({listed}): an item-score file holds one task; import each log to its "
                         "own file, or the results directory (a group's subtasks become one file)")
    written, warnings = _write_task(logs[0], Path(out), arm, seed, model, eval_set)
    return LmEvalImport(arm, seed, (written,), logs[0].results is not None, warnings)


def _import_results(source: Path, out: str | Path, arm: str, seed: int, id_field: str | None,
                    eval_set: EvalSetLike | None, model_dir: Path | None) -> LmEvalImport:
    """Every task of one harness run (its results file and sample logs) into the directory `out`."""
    check_output_dir(out, "--out")
    files = [source] if source.is_file() else sorted(source.rglob("results_*.json"))
    if len(files) != 1:
        listed = ", ".join(str(path.relative_to(source)) for path in files[:5])
        raise InputError(f"{source}: {'no' if not files else len(files)} lm-evaluation-harness results files "
                         f"(results_<date>.json){f': {listed}' if files else ''}; give the directory of one run, "
                         "or its results file")
    results = HarnessResults.read(files[0])
    date = results.path.name[len("results_"):-len(".json")]
    found = {match["task"]: path for path in sorted(results.path.parent.glob(f"samples_*_{date}.jsonl"))
             if (match := SAMPLES_NAME.fullmatch(path.name)) and match["date"] == date}
    missing = [task for task in results.section("configs") if task not in found]
    if missing or not found:
        raise InputError(f"{results.path}: no sample log samples_<task>_{date}.jsonl beside it for "
                         f"{', '.join(missing) or 'any task'}; run lm_eval with --log_samples")
    logs = {task: TaskLog.open(path, task=task, results=results, id_field=id_field) for task, path in found.items()}
    grouped = {group: [task for task in tasks if task in logs and logs[task].output_type != ROLLING]
               for group, tasks in results.groups().items()}
    in_groups = {task for tasks in grouped.values() for task in tasks}
    model = _model_meta(model_dir, [results])
    written: list[tuple[ImportedFile, tuple[str, ...]]] = []  # each file with its warnings
    with cleaned_on_failure(out) as out:
        for task, log in logs.items():
            if log.output_type == ROLLING:
                written.append(_write_loss_file([log.path], out / f"{task}.parquet", task, arm, seed, log.id_field,
                                                eval_set, model))
            elif task not in in_groups:
                written.append(_write_task(log, out / f"{task}.parquet", arm, seed, model, eval_set))
        written += [_write_group(group, [logs[task] for task in tasks], results, out, arm, seed, model)
                    for group, tasks in grouped.items() if tasks]
    return LmEvalImport(arm, seed, tuple(file for file, _ in written), True,
                        tuple(note for _, notes in written for note in notes))


def _model_meta(model_dir: Path | None, results: Sequence[HarnessResults | None]) -> dict:
    """`model_sha256`, the SHA-256 of the evaluated model's weight files (`files_sha256`, as `gatedv evaluate --hf`
    hashes them): of `model_dir`, else of the local directory holding weight files that the results files name as
    their one model; nothing when there is none (a hub name, a checkpoint file, logs without a results file)."""
    if model_dir is None:
        named = {found.model() for found in results if found is not None}
        name = next(iter(named)) if len(named) == 1 else None
        try:
            if name is None or not Path(name).is_dir() or not weight_files(name):
                return {}
        except OSError:  # a directory that cannot be listed: not one to read weights from
            return {}
        model_dir = Path(name)
    return {"model_sha256": files_sha256(weight_files(model_dir))}


def _directions(metrics: Sequence[str], results: HarnessResults | None, task: str) -> dict[str, bool]:
    """Which way is better for each metric: the results file's, else the known metrics' (else higher)."""
    known = {**KNOWN_HIGHER_IS_BETTER, **(results.higher_is_better(task) if results else {})}
    return {metric: known.get(metric.split(",")[0], True) for metric in metrics}


def _write_loss_file(paths: Sequence[str | Path], out: str | Path, task: str, arm: str, seed: int, id_field: str,
                     eval_set: EvalSetLike | None, model: dict) -> tuple[ImportedFile, tuple[str, ...]]:
    """Rolling-loglikelihood logs (see `read_lm_eval_samples`) as the loss file `out` of (arm, seed); `model`:
    what identifies the model (`_model_meta`)."""
    samples = read_lm_eval_samples(paths, id_field=id_field, eval_set=eval_set)
    write_loss_file(out, samples.docs, {"arm": arm, "seed": seed, **samples.meta, **model})
    docs = samples.docs
    sums = LossSums(tasks=samples.meta["lm_eval_tasks"], n_docs=len(docs), n_targets=int(docs["n_targets"].sum()),
                    target_unit=samples.meta["target_unit"], n_bytes=int(docs["n_bytes"].sum()),
                    loss_sum=float(docs["loss_sum"].sum()))
    return (ImportedFile(str(out), "loss", task, ROLLING, sums.n_docs, {"bits_per_byte": sums.bits_per_byte},
                         sums=sums), samples.warnings)


def _write_task(log: TaskLog, out: Path, arm: str, seed: int, model: dict,
                eval_set: EvalSetLike | None) -> tuple[ImportedFile, tuple[str, ...]]:
    if eval_set is not None:
        raise InputError(f"--eval-set: {log.path} is a {KIND_NAMES[log.output_type]} task; an evaluation "
                         "set names the documents of a rolling-loglikelihood (perplexity) log")
    scores = log.scores()
    warnings = scores.warnings
    if log.results is None:
        warnings += (f"{log.path}: no results file beside it (results_<date>.json): the means are not checked "
                     "against the harness's, and no task config hash or shot count is recorded",)
    meta = {"arm": arm, "seed": seed, "task": log.task, **log.meta(), **model}
    return _write_items(out, [log], scores.items, scores.metrics, scores.filters, meta), warnings


def _write_items(out: Path, logs: list[TaskLog], items: pd.DataFrame, metrics: Sequence[str], filters: Sequence[str],
                 meta: dict) -> ImportedFile:
    """The item-score file `out` of the logs' `metrics`: `meta`, then the filters, metrics, their directions and
    the logs' hashes."""
    first = logs[0]
    write_item_file(out, items, {**meta, "filters": list(filters), "metrics": list(metrics),
                                 "higher_is_better": _directions(metrics, first.results, first.task),
                                 "lm_eval_files": [{"path": str(log.path), "sha256": file_sha256(log.path)}
                                                   for log in logs]})
    return ImportedFile(str(out), "items", meta["task"], first.output_type, len(items),
                        {metric: float(items[metric].mean()) for metric in metrics}, tuple(meta.get("subtasks", ())))


def _write_group(group: str, logs: list[TaskLog], results: HarnessResults, out: Path, arm: str, seed: int,
                 model: dict) -> tuple[ImportedFile, tuple[str, ...]]:
    """The subtasks' items as one file: doc_id `<subtask>/<doc_id>`, a `subtask` column, the metrics they share."""
    scores = [log.scores() for log in logs]
    shared = [metric for metric in scores[0].metrics if all(metric in s.metrics for s in scores)]
    if not shared:
        raise InputError(f"{results.path}: the subtasks of group {group} ({', '.join(log.task for log in logs)}) share "
                         "no metric; import their logs one by one")
    warnings = [note for s in scores for note in s.warnings]
    dropped = sorted({metric for s in scores for metric in s.metrics} - set(shared))
    if dropped:
        warnings.append(f"group {group}: metrics {', '.join(dropped)} are not logged by every subtask; left out")
    frames = [s.items.assign(doc_id=log.task + "/" + s.items["doc_id"], subtask=log.task)
              [["doc_id", "subtask", *shared, *[c for c in HASH_COLUMNS if c in s.items.columns]]]
              for log, s in zip(logs, scores)]
    for metric in shared:
        key = metric if "," in metric else f"{metric},{scores[0].filters[0]}"
        results.check_group(group, key, [(float(s.items[metric].mean()), len(s.items)) for s in scores])
    meta = {"arm": arm, "seed": seed, "task": group, **logs[0].meta(), **model,
            "subtasks": [log.task for log in logs],
            "task_config_sha256": canonical_sha256({log.task: results.config_sha256(log.task) for log in logs})}
    if results.n_shot(group) is not None:
        meta["n_shot"] = results.n_shot(group)
    return (_write_items(out / f"{group}.parquet", logs, pd.concat(frames, ignore_index=True), shared,
                         scores[0].filters, meta), tuple(warnings))


__all__ = ["ImportedFile", "LmEvalImport", "LossSums", "TaskLog", "import_lm_eval"]
