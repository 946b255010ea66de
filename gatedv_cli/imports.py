"""`gatedv import TOOL`: other tools' results brought in as loss files and item-score files."""

from __future__ import annotations

import typer

from gatedv_cli.options import JSON, emit, warn


def import_lm_eval_command(
    inputs: list[str] = typer.Argument(..., metavar="SAMPLES.jsonl... | RESULTS_DIR", help="Per-sample logs "
                                       "(lm_eval --log_samples) of any task type, or the --output_path directory "
                                       "of one harness run (or its results_<date>.json): every task at once."),
    arm: str = typer.Option(..., "--arm", help="The arm name of the evaluated model."),
    seed: int = typer.Option(0, "--seed", help="The model's training seed."),
    out: str = typer.Option(..., "--out", help="The file to write (.parquet): a loss file for rolling-loglikelihood "
                            "logs, an item-score file for one log of another task type; for a results directory, "
                            "the directory receiving one file per task (a group's subtasks in one)."),
    id_field: str = typer.Option(None, "--id-field", help="The logged document's field that holds its id ('' for "
                                 "the harness's doc_id, the position in the task's dataset; default: 'id' where "
                                 "the documents have one, else doc_id).", show_default=False),
    eval_set: str = typer.Option(None, "--eval-set", help="The evaluation set a rolling log was made from, "
                                 "DATA_DIR:SET (or SET with --data): recorded with its SHA-256 after checking the "
                                 "documents and their bytes.", show_default=False),
    data: str = typer.Option(None, "--data", help="The prepared data directory of --eval-set.", show_default=False),
    model_dir: str = typer.Option(None, "--model-dir", metavar="DIR", help="The evaluated model's directory: every "
                                  "file records the SHA-256 of its weight files (model_sha256). Default: the "
                                  "local directory the results file names as the model, if there is one.",
                                  show_default=False),
    as_json: bool = JSON,
) -> None:
    """lm-evaluation-harness sample logs as loss files (perplexity tasks: −log-likelihood, bytes, words per
    document) and item-score files (multiple choice, loglikelihood, generation: per-item metrics)."""
    from gatedv_stats.core.outputs import check_not_an_input
    from gatedv_stats.imports.lmeval import import_lm_eval

    check_not_an_input(out, inputs, "--out")
    result = import_lm_eval(inputs, out, arm=arm, seed=seed, id_field=id_field, eval_set=_eval_set(eval_set, data),
                            model_dir=model_dir)
    warn(result.warnings)
    emit(result, as_json)


def _eval_set(eval_set: str | None, data: str | None):
    """The evaluation set named by --eval-set DATA_DIR:SET, or by --data DIR --eval-set SET."""
    from gatedv_stats.core.errors import ParameterError
    from trainer.data.prepared import PreparedData

    if eval_set is None:
        if data is not None:
            raise ParameterError("data", "names the directory of --eval-set; give --eval-set too")
        return None
    if data is None:
        if ":" not in eval_set:
            raise ParameterError("eval_set", f"{eval_set!r}: give DATA_DIR:SET, or the set's name with --data DIR")
        data, eval_set = eval_set.rsplit(":", 1)
    return PreparedData.open(data).eval_set(eval_set)
