"""`gatedv evaluate CKPT… --tasks`: training checkpoints scored on lm-evaluation-harness tasks by the harness's own
evaluator (`CheckpointLM`, trainer/run/harness.py), one run of the harness per checkpoint.

Under `DIR/<arm>/seed<seed>/` (the checkpoint's variant and training seed) each run writes `harness/`, the run's
results file and per-sample logs as the harness itself writes them (with the logs' task hashes), and hands the
directory up (`HarnessRun`) with the checkpoint's provenance (path and SHA-256, tokenizer SHA-256, harness version,
the --max-gen-toks given).
The command (gatedv_cli/training.py) imports it as `gatedv import lm-eval` imports a results directory
(`gatedv_stats.imports.lmeval`): `<task>.parquet`, an item-score file of a multiple-choice, loglikelihood or
generation task (a group's subtasks in one; `gatedv bootstrap --metric acc DIR/...` reads them), or a loss file of a
rolling-loglikelihood (perplexity) task, each with the checkpoint's provenance.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from gatedv_stats.core.atomic import write_text_atomic
from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.core.files import file_sha256
from gatedv_stats.core.outputs import check_output_dir
from gatedv_stats.core.validation import check_at_least

HARNESS_DIR = "harness"  # beside the item files: the harness's logs of the run


@dataclass(frozen=True)
class HarnessRun:
    """One checkpoint's run of the harness: its logs as the harness writes them, and what to import them with."""

    directory: Path  # DIR/<arm>/seed<seed>: where its files go
    harness: Path  # directory/harness: the results file and the sample logs
    task_hashes: dict[str, str]  # task -> the samples hash of its log (the results file's task_hashes)
    provenance: dict  # the checkpoint's, for every file of the run

    @property
    def arm(self) -> str:
        return self.provenance["arm"]

    @property
    def seed(self) -> int:
        return self.provenance["seed"]


def parse_tasks(text: str) -> list[str]:
    """The task names of `--tasks A,B,...` (each once, in order)."""
    names = list(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    if not names:
        raise ParameterError("tasks", f"names no task ({text!r}); give TASK[,TASK...]")
    return names


def refuse_loss_file_flags(given: dict[str, object]) -> None:
    """One line naming the flags (flag -> value, None or False: not given) that have no meaning with --tasks."""
    named = [flag for flag, value in given.items() if value not in (None, False)]
    if "--hf" in named:
        raise InputError("--tasks, --hf: --tasks scores training checkpoints; score a transformers model with the "
                         "harness itself (lm_eval --model hf), or export a baseline with gatedv export-hf")
    if named:
        raise InputError(f"--tasks, {', '.join(named)}: {'these apply' if len(named) > 1 else 'it applies'} to a "
                         "loss file of an evaluation set (without --tasks) only")


def task_manager(names: Sequence[str], include_path: Sequence[str] | None):
    """A harness TaskManager knowing every name in `names`: the task directories given, and the harness's own
    tasks only when one of the names is not in those (indexing the built-in ones takes seconds)."""
    from lm_eval.tasks import TaskManager

    paths = [str(path) for path in include_path or ()]
    for path in paths:
        if not Path(path).is_dir():
            raise ParameterError("include_path", f"{path}: no such directory of task YAML files")
    manager = TaskManager(include_path=paths, include_defaults=False) if paths else None
    if manager is None or any(name not in manager.all_tasks for name in names):
        manager = TaskManager(include_path=paths or None)
    for name in names:
        if name not in manager.all_tasks:
            near = difflib.get_close_matches(name, manager.all_tasks, n=5, cutoff=0.6)
            hint = f"near names: {', '.join(near)}" if near else "no task has a name near it"
            raise ParameterError("tasks", f"unknown task {name!r} ({hint}; --include-path adds a directory of task "
                                          "YAML files)")
    return manager


def harness_runs(checkpoints: Sequence[str | Path], tasks: str, out: str | Path, *,
                 include_path: Sequence[str] | None = None, num_fewshot: int | None = None,
                 limit: int | None = None, max_gen_toks: int | None = None, data: str | Path | None = None,
                 batch_size: int | None = None, device: str = "auto", progress: bool = True,
                 loss_file_flags: dict[str, object] | None = None) -> Iterator[HarnessRun]:
    """Score each checkpoint on the harness tasks `tasks` (`A,B,...`: tasks or groups) and write the harness's logs
    of each under `out` (see the module's docstring), yielding each run once written, before the next checkpoint's.
    `max_gen_toks`: the most tokens every generation task generates (the harness's generation kwargs, over each
    task's own; None: the task's, else the harness's 256); refused unless it leaves a checkpoint's context room for
    a prompt. `data`: the data directory whose tokenizer the checkpoints use (default: the one each trained on).
    `loss_file_flags`: the command's flags of a loss file (flag -> value), refused when given."""
    import lm_eval

    from trainer.run.harness import DEFAULT_BATCH_SIZE

    refuse_loss_file_flags(loss_file_flags or {})
    names = parse_tasks(tasks)
    batch_size = DEFAULT_BATCH_SIZE if batch_size is None else batch_size
    check_at_least("batch_size", batch_size, 1)
    if num_fewshot is not None:
        check_at_least("num_fewshot", num_fewshot, 0)
    if limit is not None:
        check_at_least("limit", limit, 1)
    if max_gen_toks is not None:
        check_at_least("max_gen_toks", max_gen_toks, 1)
    if not checkpoints:
        raise InputError("give one or more checkpoints to score on --tasks")
    check_output_dir(out, "--out")
    manager = task_manager(names, include_path)
    seen: dict[tuple[str, int], str] = {}
    for checkpoint in checkpoints:
        lm, provenance = _harness_model(Path(checkpoint), data, device, batch_size, progress)
        run = (provenance["arm"], provenance["seed"])
        if run in seen:
            raise InputError(f"{checkpoint}: arm {run[0]} seed {run[1]} again (also {seen[run]}); their files would "
                             "be one")
        seen[run] = str(checkpoint)
        if max_gen_toks is not None and max_gen_toks >= lm.max_length:
            raise ParameterError("max_gen_toks", f"{max_gen_toks} new tokens leave no room for a prompt in the context "
                                                 f"of {checkpoint} ({lm.max_length} tokens); give at most "
                                                 f"{lm.max_length - 1}")
        results = lm_eval.simple_evaluate(model=lm, tasks=names, task_manager=manager, num_fewshot=num_fewshot,
                                          limit=limit, log_samples=True, bootstrap_iters=0,
                                          gen_kwargs=None if max_gen_toks is None else {"max_gen_toks": max_gen_toks})
        yield _write_run(results, Path(out) / run[0] / f"seed{run[1]}",
                         {**provenance, "harness_version": lm_eval.__version__, "limit": limit,
                          "max_gen_toks": max_gen_toks})


def _harness_model(checkpoint: Path, data: str | Path | None, device: str, batch_size: int, progress: bool):
    """The checkpoint as a harness model, and its provenance for every file written of it."""
    from trainer.model.knobs import differing_knobs
    from trainer.run.device import select_device
    from trainer.run.evaluate import open_trained_checkpoint
    from trainer.run.harness import CheckpointLM, harness_tokenizer

    torch_device = select_device(device)
    loaded, prepared = open_trained_checkpoint(checkpoint, data, torch_device)
    run = loaded.extra["run"]
    lm = CheckpointLM(loaded.model, harness_tokenizer(prepared.tokenizer_path), device=torch_device,
                      batch_size=batch_size, name=str(checkpoint), progress=progress)
    provenance = {"arm": run["variant"], "seed": int(run["seed"]), "lr": run.get("lr"),
                  "step": loaded.extra.get("update"), "model": str(checkpoint), "model_sha256": file_sha256(checkpoint),
                  "checkpoint_sha256": file_sha256(checkpoint), "tokenizer_sha256": prepared.tokenizer_sha256,
                  "data_manifest_sha256": prepared.manifest_sha256, "max_length": lm.max_length,
                  "knobs": differing_knobs(loaded.config, run["size"], run.get("size_knobs")),
                  "config": loaded.config.to_dict()}
    return lm, provenance


def _write_run(results: dict, directory: Path, provenance: dict) -> HarnessRun:
    """The harness's logs of one checkpoint's run under `directory/harness`, as the harness writes them (its task
    hashes filled in)."""
    from lm_eval.utils import handle_non_serializable

    from gatedv_stats.io.lmeval.results import samples_hash

    samples = results.pop("samples")
    logs = {task: _sample_log(task_samples) for task, task_samples in samples.items()}
    results["task_hashes"] = {task: samples_hash([json.loads(line) for line in lines]) for task, lines in logs.items()}
    results["config"] = {**results.get("config", {}), "model": "gatedv",
                         "model_args": {"pretrained": provenance["model"], "model_sha256": provenance["model_sha256"],
                                        "tokenizer_sha256": provenance["tokenizer_sha256"]}}
    results["model_name"] = provenance["model"]
    harness = directory / HARNESS_DIR
    harness.mkdir(parents=True, exist_ok=True)
    for old in [*harness.glob("samples_*.jsonl"), *harness.glob("results_*.json")]:
        old.unlink()  # a run's logs only: those of an earlier run into the same directory go
    date = datetime.now().isoformat().replace(":", "-")  # the harness's file names
    write_text_atomic(harness / f"results_{date}.json",
                      json.dumps(results, indent=2, default=handle_non_serializable, ensure_ascii=False) + "\n")
    for task, lines in logs.items():
        write_text_atomic(harness / f"samples_{task}_{date}.jsonl", "".join(line + "\n" for line in lines))
    return HarnessRun(directory, harness, dict(results["task_hashes"]), provenance)


def _sample_log(samples: list[dict]) -> list[str]:
    """The lines of a harness sample log (`--log_samples`), encoded as the harness's EvaluationTracker writes them."""
    from lm_eval.utils import handle_non_serializable, sanitize_list

    lines = []
    for sample in samples:
        encoded = {**sample,
                   "arguments": {f"gen_args_{i}": {f"arg_{j}": value for j, value in enumerate(argument)}
                                 for i, argument in enumerate(sample["arguments"])},
                   "resps": sanitize_list(sample["resps"]), "filtered_resps": sanitize_list(sample["filtered_resps"]),
                   "target": str(sample["target"])}
        lines.append(json.dumps(encoded, default=handle_non_serializable, ensure_ascii=False))
    return lines
