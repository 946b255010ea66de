"""Device selection and numeric precision: CUDA > MPS > CPU, FP32 unless TF32 or bf16 autocast is asked for;
the CPU's first matrix product spent before any that counts; the process's allocator setting for training
(`retain_freed_memory`); a device's out-of-memory message in short."""

from __future__ import annotations

import contextlib
import ctypes
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from gatedv_stats.core.errors import InputError

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
    if kind == "cpu":
        settle_cpu_matrix_products()
    return torch.device(kind)


def settle_cpu_matrix_products() -> None:
    """Spend the process's first CPU matrix product on nothing.

    Intel MKL (PyTorch's CPU BLAS on x86) now and then computes the first multi-threaded product of a process
    differently, in the last bits, from every later one: one fresh process in ten computed another first training
    loss for the tiny model on 2 cores, and so other weights ever after (docs/method.md §4, "Determinism"). With one
    product spent first, fresh processes agree bit for bit. About 6 ms, mostly MKL start-up the first real product
    would pay (0.2 ms once started).
    """
    torch.zeros(8, 64) @ torch.zeros(64, 8192)


def is_out_of_memory(error: RuntimeError) -> bool:
    """Whether torch's error is memory running out: a GPU's (`torch.OutOfMemoryError`) or, for CPU tensors,
    the host's (a plain RuntimeError from the CPU allocator)."""
    return isinstance(error, torch.OutOfMemoryError) or _CPU_ALLOCATION_FAILED in str(error)


def out_of_memory_cause(error: RuntimeError) -> str:
    """Torch's out-of-memory message in a few words, for a one-line error: the first two sentences of a GPU's
    ("CUDA out of memory. Tried to allocate 2.00 GiB"), the size of the CPU allocator's failed request."""
    requested = re.search(r"you tried to allocate (\d+) bytes", str(error))
    if _CPU_ALLOCATION_FAILED in str(error) and requested:
        return f"{_CPU_ALLOCATION_FAILED}: tried to allocate {_binary_size(int(requested.group(1)))}"
    return ". ".join(str(error).splitlines()[0].split(". ")[:2]).rstrip(".")


@contextlib.contextmanager
def out_of_memory_as(failure: Callable[[str], Exception]) -> Iterator[None]:
    """Raise `failure(cause)` in place of torch (or NumPy, for the host's arrays) running out of memory inside
    the block (one line, no traceback: the machine's limit, not a bug); every other error passes through."""
    try:
        yield
    except RuntimeError as error:
        if not is_out_of_memory(error):
            raise
        raise failure(out_of_memory_cause(error)) from None
    except MemoryError as error:  # NumPy: "Unable to allocate 7.63 TiB for an array with shape ..."
        raise failure(f"host memory: {error}") from None


_CPU_ALLOCATION_FAILED = "can't allocate memory"


def _binary_size(n_bytes: int) -> str:
    """Bytes in torch's style: "2.00 GiB"."""
    if n_bytes < 1024:
        return f"{n_bytes} bytes"
    size = n_bytes / 1024
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        if size < 1024:
            return f"{size:.2f} {unit}"
        size /= 1024
    return f"{size:.2f} PiB"


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

    def describe(self) -> str:
        """In words, for a message: "FP32", "bf16 autocast", "... with TF32 matmuls"."""
        return ("bf16 autocast" if self.bf16 else "FP32") + (" with TF32 matmuls" if self.tf32 else "")


# glibc's mallopt parameters (malloc.h) and the values `retain_freed_memory` sets.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
RETAINED_FREE_BYTES = 1 << 30  # free memory at the top of the heap kept rather than returned to the system
HEAP_ALLOCATION_LIMIT = 32 << 20  # glibc's largest mmap threshold on 64-bit: larger blocks are mapped apart


def retain_freed_memory() -> bool:
    """Make glibc's malloc keep freed memory in this process for the next allocation instead of returning it
    to the system; returns whether the C library took the settings (False where it is not glibc).

    With glibc's defaults (blocks above a moving threshold mapped apart, the heap top trimmed once more than
    twice that threshold is free) a tiny model's CPU training step returned and faulted back its 8 MiB readout
    chunks and activations: ~10,000 minor page faults an update and ~100,000 a development evaluation, a sixth
    of the worker's CPU time in the kernel (docs/benchmarks-system.md, "Sweep worker memory"). Heap blocks up to
    32 MiB and up to 1 GiB of free heap top kept: ~150 an update. Where memory lives changes, never a number.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError, TypeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    mapped_apart_above = mallopt(_M_MMAP_THRESHOLD, HEAP_ALLOCATION_LIMIT)
    kept_free = mallopt(_M_TRIM_THRESHOLD, RETAINED_FREE_BYTES)
    return bool(mapped_apart_above and kept_free)
