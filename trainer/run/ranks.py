"""The processes of a data-parallel run (torchrun's, or the tasks of one cluster job): where this one is, their
process group, and rank 0's check of the run shared with every rank before any of them starts work.

Rank 0 alone holds the run's lock; when it finds the run held by another writer or refuses its inputs, the
other ranks must not wait for it in a collective until torch's distributed timeout. `rank_zero_checks` forms the
group first, lets rank 0 check, and broadcasts the outcome: every rank raises the same one-line error (the same
exit code), or every rank goes on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.distributed as dist

from gatedv_stats.core.errors import InputError, RunFailure
from trainer.run.device import select_device

T = TypeVar("T")


@dataclass(frozen=True)
class Ranks:
    """This process's place among the run's processes (torchrun's RANK, WORLD_SIZE, LOCAL_RANK; one alone)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> Ranks:
        return cls(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
                   int(os.environ.get("LOCAL_RANK", 0)))

    @property
    def main(self) -> bool:
        return self.rank == 0


@contextlib.contextmanager
def process_group(device: torch.device) -> Iterator[None]:
    """The ranks' process group, formed for the block unless one is (NCCL on a GPU, gloo on a CPU); one formed
    before is entered by every rank together (a barrier), so that no rank writes before each has read the run's
    state."""
    if Ranks.from_env().world == 1:
        yield
        return
    if dist.is_initialized():
        dist.barrier()
        yield
        return
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        yield
    finally:
        dist.destroy_process_group()


@contextlib.contextmanager
def rank_zero_checks(check: Callable[[], contextlib.AbstractContextManager[T]], device: str) -> Iterator[T | None]:
    """Rank 0 enters `check()` (the run's lock) for every rank on `device`; every rank learns its outcome before
    any starts work: an `InputError` (another writer's `LockBusy`, a refused input) or a `RunFailure` of rank 0's is
    raised on every rank. Yields what `check()` gives on rank 0, None on the others; alone, this process enters
    it as it is. A rank that ends with an error, here or in the block, ends with it, not by torchrun's SIGTERM."""
    where = Ranks.from_env()
    if where.world == 1:
        with check() as alone:
            yield alone
        return
    with process_group(select_device(device, local_rank=where.local_rank)), contextlib.ExitStack() as stack:
        held: T | None = None
        refusal: list[InputError | RunFailure | None] = [None]
        if where.main:
            try:
                held = stack.enter_context(check())
            except (InputError, RunFailure) as error:
                refusal[0] = error
                _deaf_to_termination()  # before any other rank can know it, and end
        dist.broadcast_object_list(refusal, src=0)
        if refusal[0] is not None:
            _deaf_to_termination()
            raise refusal[0]
        try:
            yield held
        except Exception:  # raised alike on every rank: the same checks of the same files, the all-reduced loss
            _deaf_to_termination()
            raise


def _deaf_to_termination() -> None:
    """SIGTERM ignored from here on, in a rank that ends with an error: torchrun stops the ranks left once the first
    has ended, and one still on its way out would end by the signal, not with the line and code of the others."""
    if threading.current_thread() is threading.main_thread():  # where a handler can be set
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
