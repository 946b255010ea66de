"""Per-document evaluation (docs/method-statistics.md §5): summed next-token loss of every evaluation window, written as
a loss file."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from gatedv_stats import __version__
from gatedv_stats.core.errors import InputError, ParameterError, RunFailure
from gatedv_stats.core.files import file_sha256
from gatedv_stats.io.lossfiles import write_loss_file
from trainer.data.prepared import EVAL_SET_NAMES, EvalSet, PreparedData, check_set_tokenizer
from trainer.model.knobs import differing_knobs
from trainer.run.checkpoint import Checkpoint, load_checkpoint
from trainer.run.device import Precision, out_of_memory_as, select_device

if TYPE_CHECKING:
    from trainer.hf.evaluate import HFEvaluation

EVAL_BATCH_SIZE = 16


class WindowScorer(Protocol):
    """A module with `Transformer.loss`'s signature: our model, or a benchmark's wrapper of another one."""

    training: bool

    def eval(self) -> object: ...

    def train(self, mode: bool = True) -> object: ...

    def loss(self, idx: torch.Tensor, targets: torch.Tensor, reduction: str = "mean") -> torch.Tensor: ...


@torch.no_grad()
def document_loss_sums(
    model: WindowScorer,
    tokens: np.ndarray,
    *,
    device: torch.device,
    precision: Precision = Precision(),
    batch_size: int = EVAL_BATCH_SIZE,
    progress: bool = False,
) -> np.ndarray:
    """Summed loss (nats, float64) of each window: targets tokens[:, 1:] given inputs tokens[:, :-1].

    Windows go through the model `batch_size` at a time, so only one batch of logits is ever held.
    """
    was_training = model.training
    model.eval()
    sums = np.empty(len(tokens), dtype=np.float64)
    starts = range(0, len(tokens), batch_size)
    try:
        for start in tqdm(starts, desc="evaluate", unit="batch", file=sys.stderr, disable=not progress, leave=False):
            batch = torch.as_tensor(tokens[start : start + batch_size], dtype=torch.long, device=device)
            with precision.autocast(device):
                losses = model.loss(batch[:, :-1], batch[:, 1:], reduction="none")
            sums[start : start + len(batch)] = losses.double().sum(dim=1).cpu().numpy()
    finally:
        model.train(was_training)
    return sums


def eval_set_frame(eval_set: EvalSet, loss_sums: np.ndarray) -> pd.DataFrame:
    """The per-document rows of a loss file for `eval_set`."""
    return pd.DataFrame(
        {
            "doc_id": eval_set.doc_ids,
            "n_targets": np.full(len(eval_set.doc_ids), eval_set.tokens.shape[1] - 1, dtype=np.int64),
            "loss_sum": loss_sums,
            "domain": eval_set.domains,
            "n_bytes": eval_set.n_bytes,
        }
    )


@dataclass(frozen=True)
class Evaluation:
    """One checkpoint evaluated on one set."""

    out: str
    arm: str
    seed: int
    step: int
    eval_set: str
    value_act: str | None
    n_docs: int
    n_targets: int
    nll: float

    def to_dict(self) -> dict:
        return {**self.__dict__, "ppl": math.exp(self.nll)}

    def summary(self) -> str:
        override = f", values {self.value_act} at inference" if self.value_act else ""
        return (f"{self.arm} seed {self.seed} step {self.step} on {self.eval_set}{override}: {self.n_docs} documents, "
                f"{self.n_targets:,} targets, NLL {self.nll:.6f}, PPL {math.exp(self.nll):.3f} -> {self.out}")


def evaluate_checkpoint(
    checkpoint: str | Path,
    eval_set: str,
    out: str | Path,
    *,
    data_dir: str | Path | None = None,
    value_act: str | None = None,
    device: str = "auto",
    precision: Precision = Precision(),
    batch_size: int = EVAL_BATCH_SIZE,
    progress: bool = True,
) -> Evaluation:
    """Evaluate a training checkpoint on `eval_set` (dev, heldout or a path) and write the loss file `out`.

    The data directory defaults to the one the run trained on; `value_act` overrides the value activation
    of every layer (the inference-time swap of Table 9).
    """
    checkpoint = Path(checkpoint)
    if value_act not in (None, "linear", "silu"):
        raise ParameterError("value_act", f"{value_act!r} is not linear or silu")
    if batch_size < 1:
        raise InputError(f"--batch-size: must be at least 1, got {batch_size}")
    torch_device = select_device(device)
    loaded, data = open_trained_checkpoint(checkpoint, data_dir, torch_device)
    run = loaded.extra["run"]
    windows = data.eval_set(eval_set)
    if windows.tokens.max() >= loaded.config.vocab_size:
        raise InputError(f"{eval_set}: token id {windows.tokens.max()} is outside the model's vocabulary of "
                         f"{loaded.config.vocab_size}")
    if str(eval_set) not in EVAL_SET_NAMES:  # a set file of its own: its tokens must be the model's tokenizer's
        check_set_tokenizer(eval_set, windows, data.tokenizer_path, data.tokenizer_sha256, data.vocab_size)
    model = loaded.model
    model.set_value_activation(value_act)
    with out_of_memory_as(lambda cause: RunFailure(
            f"{checkpoint}: out of memory on {torch_device} evaluating the {windows.name} set ({cause}); free the "
            f"device's memory or lower --batch-size ({batch_size})")):
        loss_sums = document_loss_sums(model, windows.tokens, device=torch_device, precision=precision,
                                       batch_size=batch_size, progress=progress)
    docs = eval_set_frame(windows, loss_sums)
    meta = loss_file_metadata(checkpoint, loaded, data, windows, value_act, precision)
    write_loss_file(out, docs, meta)
    return Evaluation(
        out=str(out), arm=run["variant"], seed=int(run["seed"]), step=int(loaded.extra["update"]),
        eval_set=windows.name, value_act=value_act, n_docs=len(docs), n_targets=int(docs["n_targets"].sum()),
        nll=float(np.asarray(loss_sums, dtype=np.float64).sum() / docs["n_targets"].sum()),
    )



def open_trained_checkpoint(checkpoint: Path, data_dir: str | Path | None,
                            device: torch.device) -> tuple[Checkpoint, PreparedData]:
    """A `gatedv train` checkpoint (on `device`) and its data directory: the one given, else the one it trained
    on; refused when the directory's manifest is not the one the run trained on."""
    if not checkpoint.is_file():
        raise InputError(f"{checkpoint}: no such checkpoint")
    loaded = load_checkpoint(checkpoint, device=device)
    run = loaded.extra.get("run")
    if not isinstance(run, dict):
        raise InputError(f"{checkpoint}: not a `gatedv train` checkpoint (no run record)")
    data = PreparedData.open(data_dir if data_dir is not None else run["data"])
    if data.manifest_sha256 != loaded.extra["data_manifest_sha256"]:
        raise InputError(f"{data.path}: data manifest differs from the one {checkpoint} was trained on "
                         "(its tokens would not match the model's)")
    return loaded, data


def evaluate_model(
    out: str | Path,
    *,
    checkpoint: str | Path | Sequence[str | Path] | None = None,
    hf: str | Path | None = None,
    eval_set: str | None = None,
    data: str | Path | None = None,
    value_act: str | None = None,
    bf16: bool = False,
    batch_size: int | None = None,
    dtype: str | None = None,
    context: int | None = None,
    stride: int | None = None,
    arm: str | None = None,
    seed: int | None = None,
    device: str = "auto",
    include_path: Sequence[str] = (),
    num_fewshot: int | None = None,
    limit: int | None = None,
    max_gen_toks: int | None = None,
) -> Evaluation | HFEvaluation:
    """`gatedv evaluate`: a training checkpoint, or instead a local `transformers` model directory `hf`
    (`trainer.hf.evaluate.evaluate_hf`, which needs `data`), scored on `eval_set` (default dev) into the loss file
    `out`. `value_act` and `bf16` only with a checkpoint; `dtype`, `context`, `stride`, `arm` and `seed` only with
    `hf` (a checkpoint records its own); None: not given, the default of the one chosen. `include_path`,
    `num_fewshot`, `limit`, `max_gen_toks` and several checkpoints only with --tasks
    (`trainer.run.tasks.harness_runs`): refused."""
    checkpoints = [checkpoint] if isinstance(checkpoint, (str, Path)) else list(checkpoint or ())
    only_tasks = [flag for flag, given in (("--include-path", include_path or None), ("--num-fewshot", num_fewshot),
                                           ("--limit", limit), ("--max-gen-toks", max_gen_toks)) if given is not None]
    if only_tasks or len(checkpoints) > 1:
        raise InputError(f"{', '.join(only_tasks)}: only with --tasks" if only_tasks else
                         f"give one checkpoint, not {len(checkpoints)} (several only with --tasks)")
    checkpoint = checkpoints[0] if checkpoints else None
    if checkpoint is not None and hf is None:
        only_hf = [flag for flag, given in (("--dtype", dtype), ("--context", context), ("--stride", stride),
                                            ("--arm", arm), ("--seed", seed)) if given is not None]
        if only_hf:
            raise InputError(f"{', '.join(only_hf)}: only with --hf (a checkpoint records its own)")
        return evaluate_checkpoint(checkpoint, eval_set or "dev", out, data_dir=data, value_act=value_act,
                                   device=device, precision=Precision(bf16=bf16),
                                   batch_size=EVAL_BATCH_SIZE if batch_size is None else batch_size)
    if hf is None or checkpoint is not None:
        raise InputError("give a checkpoint, or --hf MODEL_DIR instead of one")
    not_hf = [flag for flag, given in (("--value-act", value_act), ("--bf16", bf16)) if given]
    if not_hf:
        raise InputError(f"{', '.join(not_hf)}: only with a checkpoint (with --hf use --dtype)")
    if data is None:
        raise ParameterError("data", "--hf needs a data directory or a corpus to score")
    from trainer.hf.evaluate import evaluate_hf

    return evaluate_hf(hf, data, out, eval_set=eval_set, arm=arm, seed=seed, dtype=dtype, device=device,
                       context=context, stride=stride, batch_size=batch_size)


def loss_file_metadata(checkpoint: Path, loaded, data: PreparedData, windows: EvalSet, value_act: str | None,
                       precision: Precision) -> dict:
    """The run metadata of a loss file (docs/method-statistics.md §5): who was evaluated, on what, with which hashes."""
    run = loaded.extra["run"]
    return {
        "arm": run["variant"],
        "seed": run["seed"],
        "lr": run["lr"],
        "step": loaded.extra["update"],
        "eval_set": windows.name,
        "eval_set_sha256": windows.sha256,
        "scoring": "context",  # each window's targets given its first token (docs/method-statistics.md §5)
        "tokenizer_sha256": data.tokenizer_sha256,
        "checkpoint_sha256": loaded.sha256 or file_sha256(checkpoint),  # verified against its run's record
        "data_manifest_sha256": data.manifest_sha256,
        "value_act": value_act,
        "trained_value_act": loaded.config.value_act,
        "knobs": differing_knobs(loaded.config, run["size"], run.get("size_knobs")),  # the variant: its changes
        "config": loaded.config.to_dict(),
        "precision": precision.to_dict(),
        "gatedv_version": __version__,
    }
