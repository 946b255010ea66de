"""The training recipe (docs/method.md §4): each size's defaults (Table 1), AdamW and the learning-rate schedule,
the `RunSpec` that fixes a run's numbers and the `Runtime` that says how it executes."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from gatedv_stats.errors import ParameterError
from gatedv_stats.stats.validation import check_seed
from trainer.model.knobs import resolve_variant
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
BATCH_SIZE = 8


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

    @classmethod
    def make(cls, data: str | Path, size: str, variant: str, seed: int, *, lr: float | None = None,
             updates: int | None = None, warmup: int | None = None, eval_every: int | None = None,
             batch_size: int = BATCH_SIZE, knobs: Mapping[str, object] | None = None) -> RunSpec:
        """A spec with the size's recipe filling whatever is not given; checks every field. `knobs` are
        recorded as checked ({} for a preset, which takes only knobs that leave it as it is)."""
        if size not in RECIPES:
            raise ParameterError("config", f"unknown size {size!r} (choose from {', '.join(RECIPES)})")
        recipe = RECIPES[size]
        updates = recipe.updates if updates is None else updates
        if warmup is None:  # the size's warmup, at most a tenth of a shortened run
            warmup = min(recipe.warmup, updates // 10)
        spec = cls(data=str(Path(data).resolve()), size=size, variant=variant, seed=int(seed),
                   lr=float(recipe.lr if lr is None else lr), updates=int(updates), warmup=int(warmup),
                   eval_every=int(min(recipe.eval_every, updates) if eval_every is None else eval_every),
                   batch_size=int(batch_size), knobs=resolve_variant(size, variant, knobs)[1])
        spec.validate()
        return spec

    def model_config(self) -> ModelConfig:
        """The model of the run: the preset `variant`, or the size's baseline with `knobs` under a new name."""
        return resolve_variant(self.size, self.variant, self.knobs)[0]

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


def recorded_spec(record: dict) -> dict:
    """The RunSpec fields of a run record (run.json, or a checkpoint's "run"); a record written before
    knobs existed holds a preset, so its knobs are {}."""
    return {key: record.get(key, {} if key == "knobs" else None) for key in RunSpec.__dataclass_fields__}


def spec_differences(record: dict, spec: RunSpec) -> list[str]:
    """How a run record differs from `spec`, as "key recorded != asked". The data directory's path is not
    compared: its manifest identifies the data, so a moved copy is the same data."""
    saved = recorded_spec(record)
    return [f"{key} {saved[key]!r} != {value!r}" for key, value in spec.to_dict().items()
            if key != "data" and saved[key] != value]


@dataclass(frozen=True)
class Runtime:
    """How a run executes; on a given device, only `precision` changes the numbers (it is recorded, and a run is
    resumed only with the precision it was trained with)."""

    device: str = "auto"
    precision: Precision = Precision()
    compile: bool = False
    progress: bool = True
    eval_batch_size: int = 16
