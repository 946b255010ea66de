"""A `transformers.Trainer` callback that writes a loss file of the model in training at each evaluation and at
the end of training (`trainer.hf.score.score_model`), one directory per step that `gatedv bootstrap`, `arms`,
`report` and `noise-floor` read as it is."""

from __future__ import annotations

import os
from pathlib import Path

from transformers import TrainerCallback

from gatedv_stats.core.errors import ParameterError
from gatedv_stats.core.validation import check_seed
from gatedv_stats.io.lossfiles import write_loss_file
from trainer.hf.score import score_model


def loss_file_path(out_dir: str | os.PathLike, arm: str, seed: int, step: int, eval_set: str) -> Path:
    """`OUT_DIR/step<step>/<arm>/seed<seed>/<eval_set>.parquet`: a step's directory holds every arm and seed scored
    at that step, one run each, as the statistics commands read a directory."""
    name = f"{_path_part('eval_set', eval_set)}.parquet"
    return Path(out_dir) / f"step{step}" / _path_part("arm", arm) / f"seed{seed}" / name


def _path_part(what: str, value: str) -> str:
    if not isinstance(value, str) or not value.strip() or value in (".", "..") or "/" in value or os.sep in value:
        raise ParameterError(what, f"names a directory or a file of the loss files, so it cannot be {value!r}")
    return value


class LossFileCallback(TrainerCallback):
    """Write the per-document loss sums of the model in training at each evaluation and at the end of training.

    Each goes to `out_dir/step<N>/<arm>/seed<seed>/<eval_set>.parquet`, N the Trainer's `global_step`, written by
    process zero only (the model is scored there whole: not under FSDP or DeepSpeed ZeRO-3). A step scored once is
    not scored again.

    Parameters
    ----------
    data
        A data directory of `gatedv prepare` or a corpus, as in `score_model`.
    out_dir
        Where the loss files go.
    arm
        The run's arm.
    seed
        Its training seed; not given, `TrainingArguments.seed`.
    tokenizer
        As in `score_model`; not given, the Trainer's `processing_class` (else the data directory's own).
    **options
        `eval_set`, `stored_ids`, `context`, `stride`, `batch_size`, `progress` (default False) of `score_model`.
    """

    def __init__(self, data: str | os.PathLike, out_dir: str | os.PathLike, *, arm: str, seed: int | None = None,
                 tokenizer=None, **options) -> None:
        unknown = sorted(set(options) - {"eval_set", "stored_ids", "context", "stride", "batch_size", "progress"})
        if unknown:
            raise ParameterError(unknown[0], "is no option of score_model that the callback passes on")
        if seed is not None:
            check_seed(seed, "seed")
        _path_part("arm", arm)
        self.data = data
        self.out_dir = Path(out_dir)
        self.arm = arm
        self.seed = seed
        self.tokenizer = tokenizer
        self.options = {"progress": False, **options}
        self.written: list[Path] = []  # the loss files written, in order
        self._steps: set[int] = set()

    def on_evaluate(self, args, state, control, **kwargs):
        self._score(args, state, kwargs)

    def on_train_end(self, args, state, control, **kwargs):
        self._score(args, state, kwargs)

    def _score(self, args, state, kwargs: dict) -> None:
        if not state.is_world_process_zero or state.global_step in self._steps:
            return
        # transformers >= 4.46 hands callbacks the `processing_class`, earlier versions the `tokenizer`.
        tokenizer = self.tokenizer if self.tokenizer is not None else (
            kwargs.get("processing_class") or kwargs.get("tokenizer"))
        seed = args.seed if self.seed is None else self.seed
        run = score_model(kwargs["model"], tokenizer, self.data, arm=self.arm, seed=seed, step=state.global_step,
                          **self.options)
        path = loss_file_path(self.out_dir, self.arm, seed, state.global_step, str(run.eval_set))
        path.parent.mkdir(parents=True, exist_ok=True)
        write_loss_file(path, run.docs, run.meta)
        self._steps.add(state.global_step)
        self.written.append(path)


__all__ = ["LossFileCallback", "loss_file_path"]
