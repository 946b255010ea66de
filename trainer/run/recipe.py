"""The training recipe (docs/method.md §4): each size's defaults (Table 1), AdamW and the learning-rate schedule,
the `RunSpec` that fixes a run's numbers and the `Runtime` that says how it executes."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.core.validation import check_seed
from trainer.data.prepared import PreparedData
from trainer.model.knobs import resolve_variant
from trainer.model.sizes import DEFAULT_BATCH_SIZE, resolve_size, size_base, size_config
from trainer.model.transformer import ModelConfig
from trainer.run.device import Precision

BETAS = (0.9, 0.95)
EPS = 1e-8
WEIGHT_DECAY = 0.1
CLIP_NORM = 1.0
FINAL_LR_FRACTION = 0.1


@dataclass(frozen=True)
class Recipe:
    """Default length, warmup, peak LR and curve interval of a size (Table 1; `tiny` for CPU demos and tests)."""

    updates: int
    warmup: int
    lr: float
    eval_every: int


RECIPES = {
    "tiny": Recipe(updates=500, warmup=50, lr=0.004, eval_every=50),
    "small": Recipe(updates=32_768, warmup=512, lr=0.0048, eval_every=1024),
    "medium": Recipe(updates=327_680, warmup=5_120, lr=0.0003, eval_every=10_240),
}
BATCH_SIZE = DEFAULT_BATCH_SIZE


def learning_rate(update: int, *, peak: float, warmup: int, updates: int) -> float:
    """LR of update `update` (0-based): linear warmup, (u + 1) / warmup × peak over the first `warmup`
    updates, then cosine from the peak down to 0.1 × peak at the final update."""
    if update < warmup:
        return peak * (update + 1) / warmup
    span = updates - 1 - warmup
    progress = 1.0 if span <= 0 else (update - warmup) / span
    return peak * (FINAL_LR_FRACTION + (1 - FINAL_LR_FRACTION) * 0.5 * (1 + math.cos(math.pi * progress)))


def make_optimizer(model: torch.nn.Module, lr: float, device: torch.device) -> torch.optim.AdamW:
    """AdamW with weight decay on every matrix (embedding included) and none on the norm gains."""
    matrices = [p for p in model.parameters() if p.ndim >= 2]
    gains = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": matrices, "weight_decay": WEIGHT_DECAY}, {"params": gains, "weight_decay": 0.0}]
    # The fused kernel (CPU and CUDA) is one pass over all tensors: on a CPU 7× faster than foreach.
    fused = device.type in ("cpu", "cuda")
    return torch.optim.AdamW(groups, lr=lr, betas=BETAS, eps=EPS, fused=fused, foreach=None if fused else True)


@dataclass(frozen=True)
class RunSpec:
    """Everything that determines a run's numbers; a resumed run must match it field for field."""

    data: str
    size: str
    variant: str
    seed: int
    lr: float
    updates: int
    warmup: int
    eval_every: int
    batch_size: int = BATCH_SIZE
    knobs: dict = field(default_factory=dict)  # a new variant's knobs (trainer/model/knobs.py); {} for a preset
    size_knobs: dict = field(default_factory=dict)  # a size's knobs (trainer/model/sizes.py); {} for a preset

    @classmethod
    def make(cls, data: str | Path, size: str, variant: str, seed: int, *, lr: float | None = None,
             updates: int | None = None, warmup: int | None = None, eval_every: int | None = None,
             batch_size: int | None = None, knobs: Mapping[str, object] | None = None,
             size_knobs: Mapping[str, object] | None = None) -> RunSpec:
        """A spec with the size's recipe filling whatever is not given (a size's recipe knobs first, then its
        base's `RECIPES` entry); checks every field. `knobs` and `size_knobs` are recorded as checked ({} for a
        preset, which takes only knobs that leave it as it is)."""
        checked_size = resolve_size(size, size_knobs)[1]
        recipe = dataclasses.replace(RECIPES[size_base(size, checked_size)],
                                     **{k: v for k, v in checked_size.items() if k in ("updates", "warmup", "lr",
                                                                                       "eval_every")})
        updates = recipe.updates if updates is None else updates
        if warmup is None:  # the size's warmup, at most a tenth of a shortened run
            warmup = recipe.warmup if "warmup" in checked_size else min(recipe.warmup, updates // 10)
        if batch_size is None:
            batch_size = int(checked_size.get("batch_size", BATCH_SIZE))
        spec = cls(data=str(Path(data).resolve()), size=size, variant=variant, seed=int(seed),
                   lr=float(recipe.lr if lr is None else lr), updates=int(updates), warmup=int(warmup),
                   eval_every=int(min(recipe.eval_every, updates) if eval_every is None else eval_every),
                   batch_size=int(batch_size), knobs=resolve_variant(size, variant, knobs, checked_size)[1],
                   size_knobs=checked_size)
        spec.validate()
        return spec

    def model_config(self) -> ModelConfig:
        """The model of the run: the preset `variant`, or the size's baseline with `knobs` under a new name."""
        return resolve_variant(self.size, self.variant, self.knobs, self.size_knobs)[0]

    def size_config(self) -> ModelConfig:
        """The baseline of the run's size (for moment matching)."""
        return size_config(self.size, self.size_knobs)

    def validate(self) -> None:
        """Every field checked; a bad one is a ParameterError named after the field."""
        self.model_config()  # names the bad size, variant or knob
        check_seed(self.seed, "seed")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ParameterError("lr", f"must be a positive number, got {self.lr}")
        for name, value, minimum in (("updates", self.updates, 1), ("warmup", self.warmup, 0),
                                     ("eval_every", self.eval_every, 1), ("batch_size", self.batch_size, 1)):
            if value < minimum:
                raise ParameterError(name, f"must be at least {minimum}, got {value}")
        if self.warmup >= self.updates:
            raise ParameterError("warmup", f"{self.warmup} must be below the number of updates ({self.updates})")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def check_data_fits(data: PreparedData, config: ModelConfig) -> None:
    """The model takes the data's windows (its context is the data's) and every token id of its tokenizer."""
    if config.seq_len != data.context:
        raise InputError(f"{data.path}: prepared with a context of {data.context} tokens, the model's seq_len is "
                         f"{config.seq_len}; prepare the data with --context {config.seq_len} or give the size "
                         f"seq_len={data.context}")
    if config.vocab_size < data.vocab_size:
        raise InputError(f"{data.path}: its tokenizer has {data.vocab_size:,} entries, more than the model's "
                         f"vocab_size {config.vocab_size:,}")


def recorded_spec(record: dict) -> dict:
    """The RunSpec fields of a run record (run.json, or a checkpoint's "run"); a record written before
    knobs or size knobs existed holds a preset, so they are {}."""
    empty_default = ("knobs", "size_knobs")
    return {key: record.get(key, {} if key in empty_default else None) for key in RunSpec.__dataclass_fields__}


def spec_differences(record: dict, spec: RunSpec) -> list[str]:
    """How a run record differs from `spec`, as "key recorded != asked". The data directory's path is not
    compared: its manifest identifies the data, so a moved copy is the same data."""
    saved = recorded_spec(record)
    return [f"{key} {saved[key]!r} != {value!r}" for key, value in spec.to_dict().items()
            if key != "data" and saved[key] != value]


@dataclass(frozen=True)
class Runtime:
    """How a run executes; on a given device, only `precision` changes the numbers (it is recorded, and a run is
    resumed only with the precision it was trained with). The memory-lean settings change them at most in the last
    bits: `grad_accum` K splits each process's share of the global batch into K micro-batches whose gradients add
    up to the whole batch's (to float tolerance); `checkpoint_activations` recomputes each block in the backward
    pass (bit for bit). They and `compile` are recorded too, and a run resumes only with the same ones."""

    device: str = "auto"
    precision: Precision = Precision()
    compile: bool = False
    progress: bool = True
    eval_batch_size: int = 16
    grad_accum: int = 1
    checkpoint_activations: bool = False

    def memory_settings(self) -> dict:
        """The recorded settings besides precision (run.json's and a checkpoint's "memory")."""
        return {"grad_accum": self.grad_accum, "checkpoint_activations": self.checkpoint_activations,
                "compile": self.compile}
