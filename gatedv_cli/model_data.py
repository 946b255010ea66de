"""The commands about the model family and its data: `params` (Table 1), `export-hf`, `export-tasks`, `prepare`,
`moments`."""

from __future__ import annotations

import typer

from gatedv_cli.options import DEVICE, GRAD_ACCUM, JSON, KNOBS, SIZE_KNOBS, emit, knob_flag, warn


def params_command(
    config: str = typer.Option("all", "--config", help="tiny, small, medium, or all (small and medium); a new name "
                               "with --size-knob."),
    variant: str = typer.Option("all", "--variant", help="A variant name, or all; a new name with --knob."),
    knobs: list[str] = KNOBS,
    size_knobs: list[str] = SIZE_KNOBS,
    list_knobs: bool = typer.Option(False, "--knobs", help="List the knobs, their values and what they do."),
    list_size_knobs: bool = typer.Option(False, "--size-knobs", help="List the size knobs and what they do."),
    memory: bool = typer.Option(False, "--memory", help="Instead: the memory per GPU of a training step of one "
                                "--config and --variant, without and with activation checkpointing (an estimate)."),
    batch_size: int = typer.Option(None, "--batch-size", help="With --memory: the global batch (default: the "
                                   "size's).", show_default=False),
    grad_accum: int = GRAD_ACCUM,
    gpus: int = typer.Option(1, "--gpus", help="With --memory: data-parallel GPUs sharing the batch."),
    as_json: bool = JSON,
) -> None:
    """Table 1: the model setup and the trainable-parameter count of each variant (or of one with --knob)."""
    from gatedv_stats.io.jsonout import strict_json
    from trainer.model.knobs import knobs_listing, knobs_summary
    from trainer.model.memory import requested_memory
    from trainer.model.params import requested_table
    from trainer.model.sizes import size_knobs_listing, size_knobs_summary

    if list_knobs or list_size_knobs:
        listing, summary = (knobs_listing, knobs_summary) if list_knobs else (size_knobs_listing, size_knobs_summary)
        typer.echo(strict_json(listing()) if as_json else summary())
        return
    with knob_flag():
        if memory:
            emit(requested_memory(config, variant, knobs or [], size_knobs or [], batch_size=batch_size,
                                  grad_accum=grad_accum, devices=gpus), as_json)
            return
        table = requested_table(config, variant, knobs or [], size_knobs or [])
    emit(table, as_json)


def export_hf_command(
    checkpoint: str = typer.Argument(..., help="A baseline-family checkpoint (gatedv train)."),
    out_dir: str = typer.Argument(..., help="New directory for the transformers LlamaForCausalLM files."),
    tokenizer: str = typer.Option(None, "--tokenizer", help="The tokenizer.json (or data directory) to ship with "
                                  "the model (default: the data directory the run trained on).", show_default=False),
) -> None:
    """Export a checkpoint as a transformers Llama directory (config.json + model.safetensors + its tokenizer)."""
    from gatedv_stats.core.outputs import check_output_dir
    from trainer.hf.export import export_hf, export_summary

    check_output_dir(out_dir, "OUT_DIR")
    typer.echo(export_summary(export_hf(checkpoint, out_dir, tokenizer=tokenizer)))


def export_tasks_command(
    data: str = typer.Argument(..., help="A prepared data directory (gatedv prepare)."),
    eval_set: str = typer.Option("dev", "--eval-set", help="dev, heldout, or an evaluation-set Parquet file."),
    out: str = typer.Option(..., "--out", help="The directory of the task files (give it to lm_eval as "
                            "--include_path)."),
    task: str = typer.Option(None, "--task", help="The task's name (default: gatedv_<set name>).",
                             show_default=False),
    as_json: bool = JSON,
) -> None:
    """An evaluation set as an lm-evaluation-harness task: its documents' text (JSONL) and a task YAML scoring each
    one's rolling log-likelihood (docs/tasks.md)."""
    from trainer.data.harness_tasks import export_tasks

    emit(export_tasks(data, out, eval_set=eval_set, task=task), as_json)


def prepare_command(
    corpus: str = typer.Argument(..., help="builtin:python-stdlib, JSONL / JSONL.gz / Parquet files or a glob, "
                                 "a directory of .txt files, or hf:NAME[:CONFIG]."),
    out: str = typer.Option(..., "--out", help="The data directory to write."),
    eval_docs: int = typer.Option(2048, "--eval-docs", help="Documents per evaluation set (capped when too few "
                                  "domain groups exist)."),
    split_seed: int = typer.Option(0, "--split-seed", help="Seed of the evaluation-set selection."),
    tokenizer: str = typer.Option(None, "--tokenizer", help="An existing tokenizer.json, or a corpus whose text "
                                  "trains the BPE (default: the training split).", show_default=False),
    vocab_size: int = typer.Option(8192, "--vocab-size", help="Exact BPE vocabulary size."),
    keep_eval_groups: bool = typer.Option(False, "--keep-eval-groups", help="Keep the other documents of the "
                                          "evaluation documents' domain groups in the training store."),
    on_decode_error: str = typer.Option("skip", "--on-decode-error", help="Undecodable documents: skip (and count "
                                        "them in the manifest) or fail."),
    max_docs: int = typer.Option(None, "--max-docs", help="Read only the first N documents of the corpus.",
                                 show_default=False),
    context: int = typer.Option(256, "--context", help="Tokens per window a model sees: evaluation and training "
                                "windows are N + 1 tokens (the model's seq_len must be N)."),
    force: bool = typer.Option(False, "--force", help="Prepare again even when the inputs are unchanged."),
    as_json: bool = typer.Option(False, "--json", help="Print the manifest as JSON."),
) -> None:
    """Tokenizer, domain-disjoint dev / held-out sets and the training token store of a corpus (docs/method.md §3)."""
    import warnings

    from trainer.data.prepare import prepare
    from trainer.data.split import PrepareWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrepareWarning)  # reported below from the manifest
        result = prepare(corpus, out, eval_docs=eval_docs, split_seed=split_seed, tokenizer=tokenizer,
                         vocab_size=vocab_size, remove_eval_groups=not keep_eval_groups,
                         on_decode_error=on_decode_error, max_docs=max_docs, force=force, context=context)
    warn(result.manifest["warnings"])
    emit(result, as_json)


def moments_command(
    data: str = typer.Option(..., "--data", help="A prepared data directory (gatedv prepare)."),
    config: str = typer.Option("small", "--config", help="Model size: tiny, small or medium."),
    seed: int = typer.Option(..., "--seed", help="Training seed: initial weights and windows."),
    windows: int = typer.Option(128, "--windows", help="Training windows to average over."),
    out: str = typer.Option(None, "--out", help="Also write the coefficients as JSON here.", show_default=False),
    device: str = DEVICE,
    as_json: bool = JSON,
) -> None:
    """Moment-matching coefficients (docs/method.md §6): per layer mu_v, sigma_v, mu_phi, sigma_phi at initialisation."""  # noqa: E501 - one line in --help's list
    from trainer.model.moments import measure_moments

    emit(measure_moments(data, config, seed, n_windows=windows, device=device, out=out), as_json)
