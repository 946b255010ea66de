"""Device selection and numeric precision: CUDA > MPS > CPU, FP32 unless TF32 or bf16 autocast is asked for."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from gatedv_stats.errors import InputError

DEVICE_CHOICES = ("auto", "cpu", "cuda", "mps")


def select_device(name: str = "auto", *, local_rank: int = 0) -> torch.device:
    """The torch device for `name` (`auto`, `cpu`, `cuda`, `cuda:N`, `mps`); `auto` prefers CUDA, then MPS.

    Under data-parallel training each process takes the CUDA device of its local rank.
    """
    kind = name.split(":", 1)[0]
    if kind not in DEVICE_CHOICES or (":" in name and kind != "cuda"):
        raise InputError(f"--device: unknown device {name!r} (choose auto, cpu, cuda, cuda:N or mps)")
    if kind == "auto":
        if torch.cuda.is_available():
            kind = "cuda"
        elif torch.backends.mps.is_available():
            kind = "mps"
        else:
            kind = "cpu"
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise InputError(f"--device: {name!r} requested but CUDA is not available")
        index = int(name.split(":", 1)[1]) if ":" in name else local_rank
        if index >= torch.cuda.device_count():
            raise InputError(f"--device: {name!r} but only {torch.cuda.device_count()} CUDA device(s) exist")
        return torch.device("cuda", index)
    if kind == "mps" and not torch.backends.mps.is_available():
        raise InputError(f"--device: {name!r} requested but MPS is not available")
    return torch.device(kind)


@dataclass(frozen=True)
class Precision:
    """Numeric settings of a run: FP32 by default; TF32 matmuls and bf16 autocast only on request."""

    tf32: bool = False
    bf16: bool = False

    def apply(self, device: torch.device) -> None:
        """Set the process-wide matmul precision for this run."""
        if self.tf32 and device.type != "cuda":
            raise InputError("--tf32: TF32 needs a CUDA device")
        torch.backends.cuda.matmul.allow_tf32 = self.tf32
        torch.backends.cudnn.allow_tf32 = self.tf32
        torch.set_float32_matmul_precision("high" if self.tf32 else "highest")

    def autocast(self, device: torch.device) -> contextlib.AbstractContextManager:
        """bf16 autocast around a forward pass when asked for, else a no-op."""
        if not self.bf16:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)

    def to_dict(self) -> dict:
        return {"tf32": self.tf32, "bf16": self.bf16}

