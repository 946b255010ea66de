"""The commands that train, evaluate and time models: `train`, `evaluate`, `bench`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from gatedv_cli.options import (
    BF16,
    CHECKPOINT_ACTIVATIONS,
    DEVICE,
    GRAD_ACCUM,
    JSON,
    KNOBS,
    SIZE_KNOBS,
    TF32,
    emit,
    knob_flag,
    runtime,
    warn,
)
from gatedv_stats.core.errors import InputError

if TYPE_CHECKING:
    from gatedv_stats.imports.lmeval import LmEvalImport


def train_command(
    data: str = typer.Option(..., "--data", help="A prepared data directory (gatedv prepare)."),
    config: str = typer.Option("small", "--config", help="Model size: tiny, small or medium; a new name with "
                               "--size-knob."),
    variant: str = typer.Option("baseline", "--variant", help="Variant name (gatedv params lists them); a new "
                                "name with --knob."),
    knobs: list[str] = KNOBS,
    size_knobs: list[str] = SIZE_KNOBS,
    seed: int = typer.Option(..., "--seed", help="Training seed: initial weights and training windows."),
    out: str = typer.Option(..., "--out", help="The run directory."),
    lr: float = typer.Option(None, "--lr", help="Peak learning rate (default: the size's confirmation rate).",
                             show_default=False),
    updates: int = typer.Option(None, "--updates", help="Updates (default: the size's, Table 1).", show_default=False),
    warmup: int = typer.Option(None, "--warmup", help="Warmup updates (default: the size's, at most a tenth of the "
                               "run).", show_default=False),
    eval_every: int = typer.Option(None, "--eval-every", help="Development NLL and checkpoint every k updates.",
                                   show_default=False),
    batch_size: int = typer.Option(None, "--batch-size", help="Global batch: sequences of the model's context per "
                                   "update (default: the size's, 8).", show_default=False),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --out from its checkpoint."),
    stop_after: int = typer.Option(None, "--stop-after", help="End this call after update N with a checkpoint "
                                   "(continue later with --resume).", show_default=False),
    device: str = DEVICE,
    tf32: bool = TF32,
    bf16: bool = BF16,
    compile_model: bool = typer.Option(False, "--compile", help="torch.compile the model for training."),
    grad_accum: int = GRAD_ACCUM,
    checkpoint_activations: bool = CHECKPOINT_ACTIVATIONS,
    as_json: bool = JSON,
) -> None:
    """Train one run (docs/method.md §4): checkpoints, development curve, --resume; data parallel under torchrun."""
    from gatedv_stats.core.locks import run_lock
    from gatedv_stats.core.outputs import check_output_dir
    from trainer.model.knobs import parse_knob_options
    from trainer.model.sizes import parse_size_knob_options
    from trainer.run.ranks import Ranks, rank_zero_checks
    from trainer.run.recipe import RunSpec
    from trainer.run.train import DivergenceError, train

    check_output_dir(out, "--out")
    with knob_flag():
        spec = RunSpec.make(data, config, variant, seed, lr=lr, updates=updates, warmup=warmup, eval_every=eval_every,
                            batch_size=batch_size, knobs=parse_knob_options(knobs or []),
                            size_knobs=parse_size_knob_options(size_knobs or []))
    how = runtime(device, tf32, bf16, compile_model, grad_accum, checkpoint_activations)
    try:  # under torchrun, rank 0 holds the run's lock for every rank
        with rank_zero_checks(lambda: run_lock(out), how.device):
            result = train(spec, out, runtime=how, resume=resume, stop_after=stop_after)
    except DivergenceError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(3) from None
    if Ranks.from_env().main:
        emit(result, as_json)


def _one_eval_set(eval_set: str | None, old_name: str | None) -> str | None:
    """The evaluation set, given as --eval-set or under its old name --set (still taken, not shown), not both."""
    if eval_set is not None and old_name is not None:
        raise InputError("--eval-set, --set: the same option (--set is its old name); give it once")
    return old_name if eval_set is None else eval_set


def evaluate_command(
    checkpoint: list[str] = typer.Argument(None, help="A checkpoint written by gatedv train (omitted with --hf); "
                                           "several with --tasks.", show_default=False),
    hf: str = typer.Option(None, "--hf", metavar="MODEL_DIR", help="Instead: a local transformers causal LM "
                           "directory (config, weights, tokenizer; read offline, never downloaded).",
                           show_default=False),
    eval_set: str = typer.Option(None, "--eval-set", help="dev, heldout, or an evaluation-set Parquet file "
                                 "(default: dev).", show_default=False),
    old_eval_set: str = typer.Option(None, "--set", hidden=True, help="The old name of --eval-set."),
    out: str = typer.Option(..., "--out", help="The loss file to write (.parquet); with --tasks, the directory of "
                            "the item-score files (OUT/<arm>/seed<seed>/<task>.parquet)."),
    data: str = typer.Option(None, "--data", help="Data directory (default: the one the run trained on). With --hf: "
                             "a data directory, or any corpus gatedv prepare reads (whole documents).",
                             show_default=False),
    value_act: str = typer.Option(None, "--value-act", help="Override the value activation: linear or silu "
                                  "(the inference-time swap, Table 9).", show_default=False),
    batch_size: int = typer.Option(None, "--batch-size", help="Windows per forward pass (default: 16; 8 with --hf).",
                                   show_default=False),
    dtype: str = typer.Option(None, "--dtype", help="With --hf: float32 (default), bfloat16 or float16.",
                              show_default=False),
    context: int = typer.Option(None, "--context", help="With --hf: the most tokens one forward pass takes "
                                "(default: the model's maximum, at most 4,096).", show_default=False),
    stride: int = typer.Option(None, "--stride", help="With --hf: tokens scored per further window of a long "
                               "sequence (default: half the context); each is scored once, after at least "
                               "context - stride + 1 tokens.", show_default=False),
    arm: str = typer.Option(None, "--arm", help="With --hf: the arm name (default: the model directory's name).",
                            show_default=False),
    seed: int = typer.Option(None, "--seed", help="With --hf: the seed recorded in the loss file (default: 0).",
                             show_default=False),
    tasks: str = typer.Option(None, "--tasks", metavar="TASK[,TASK...]", help="Instead: score the checkpoints on "
                              "lm-evaluation-harness tasks or groups (docs/tasks.md).", show_default=False),
    include_path: list[str] = typer.Option(None, "--include-path", metavar="DIR", help="With --tasks: a directory "
                                           "of task YAML files (repeatable).", show_default=False),
    num_fewshot: int = typer.Option(None, "--num-fewshot", metavar="K", help="With --tasks: K examples before each "
                                    "item (default: each task's own).", show_default=False),
    limit: int = typer.Option(None, "--limit", metavar="N", help="With --tasks: the first N items of each task.",
                              show_default=False),
    max_gen_toks: int = typer.Option(None, "--max-gen-toks", metavar="N", help="With --tasks: generate at most N "
                                     "tokens in every generation task, its own max_gen_toks overridden (default: "
                                     "the task's, else the harness's 256); N and each prompt must fit the "
                                     "model's context.", show_default=False),
    device: str = DEVICE,
    bf16: bool = BF16,
    as_json: bool = JSON,
) -> None:
    """Per-document loss sums of a checkpoint or any transformers model (--hf) as a loss file
    (docs/method-statistics.md §5); with --tasks, per-item scores of checkpoints on harness tasks."""
    from gatedv_stats.core.outputs import check_not_an_input, check_output_file
    from trainer.run.evaluate import evaluate_model

    chosen_set = _one_eval_set(eval_set, old_eval_set)
    if tasks is not None:
        scores = evaluate_tasks(checkpoint or [], tasks, out, include_path=include_path, num_fewshot=num_fewshot,
                                limit=limit, max_gen_toks=max_gen_toks, data=data, batch_size=batch_size,
                                device=device, loss_file_flags={
                                    "--hf": hf, "--eval-set": chosen_set, "--value-act": value_act, "--bf16": bf16,
                                    "--dtype": dtype, "--context": context, "--stride": stride, "--arm": arm,
                                    "--seed": seed})
        warn(scores.warnings)
        emit(scores, as_json)
        return
    check_output_file(out, "--out", suffix=".parquet")
    check_not_an_input(out, [given for given in (*(checkpoint or ()), chosen_set) if given], "--out")
    emit(evaluate_model(out, checkpoint=checkpoint, hf=hf, eval_set=chosen_set, data=data, value_act=value_act,
                        bf16=bf16, batch_size=batch_size, dtype=dtype, context=context, stride=stride, arm=arm,
                        seed=seed, device=device, include_path=include_path or (), num_fewshot=num_fewshot,
                        limit=limit, max_gen_toks=max_gen_toks), as_json)


@dataclass(frozen=True)
class TaskEvaluation:
    """Every checkpoint on every task (`evaluate CKPT… --tasks`): what each checkpoint's import of its harness run
    wrote."""

    out: str
    runs: tuple[LmEvalImport, ...]
    harness_version: str

    @property
    def warnings(self) -> tuple[str, ...]:
        return tuple(warning for run in self.runs for warning in run.warnings)

    def to_dict(self) -> dict:
        return {"out": self.out, "harness_version": self.harness_version, "runs": [run.to_dict() for run in self.runs],
                "warnings": list(self.warnings)}

    def summary(self) -> str:
        return "\n".join([f"lm-evaluation-harness {self.harness_version} -> {self.out}",
                          *(run.summary() for run in self.runs)])


def evaluate_tasks(checkpoints: Sequence[str | Path], tasks: str, out: str | Path,
                   **options: Any) -> TaskEvaluation:
    """Score each checkpoint on the harness tasks `tasks` (`trainer.run.tasks.harness_runs`, `options` its keywords)
    and import each run, once the harness's logs of it are written, as `gatedv import lm-eval` imports a results
    directory: `out/<arm>/seed<seed>/<task>.parquet`, with the checkpoint's provenance."""
    import lm_eval

    from gatedv_stats.imports.lmeval import import_lm_eval
    from trainer.run.tasks import harness_runs

    runs = tuple(import_lm_eval([run.harness], run.directory, arm=run.arm, seed=run.seed, provenance=run.provenance)
                 for run in harness_runs(checkpoints, tasks, out, **options))
    return TaskEvaluation(out=str(out), runs=runs, harness_version=lm_eval.__version__)


def bench_command(
    baseline: list[str] = typer.Argument(..., help="Baseline checkpoints, one per seed."),
    variant: list[str] = typer.Option(..., "--variant", metavar="CKPT...", help="Variant checkpoints, one per seed, "
                                      "in the baseline's order."),
    rounds: int = typer.Option(7, "--rounds", help="Alternation rounds R."),
    warmup: int = typer.Option(3, "--warmup", help="Untimed warm-up calls W per round and mode."),
    calls: int = typer.Option(10, "--calls", help="Timed calls K per round and mode."),
    batch_size: int = typer.Option(8, "--batch", help="Sequences per call (each of the model's seq_len tokens)."),
    device: str = DEVICE,
    out: str = typer.Option(None, "--out", help="Also write the JSON result here (e.g. EXP/bench.json)."),
    as_json: bool = JSON,
) -> None:
    """Cost benchmark (paper Table 6, docs/method.md §7): forward and training-step time ratios and peak memory."""
    from gatedv_stats.core.outputs import check_not_an_input, check_output_file
    from gatedv_stats.io.benchfiles import write_bench_result
    from gatedv_stats.io.jsonout import strict_json
    from trainer.run.bench import run_bench

    if out is not None:
        check_output_file(out, "--out")
        check_not_an_input(out, [*baseline, *variant], "--out")
    result = run_bench(baseline, variant, rounds=rounds, warmup=warmup, calls=calls, batch_size=batch_size,
                       device=device)
    if out is not None:
        write_bench_result(out, result.to_dict())
    typer.echo(strict_json(result.to_dict()) if as_json else result.summary())

