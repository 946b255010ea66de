"""What a training run writes into its directory, each file recorded where its readers verify it: the curve and the
checkpoint are hashed while written, and run.json records each hash before the file replaces the one before it
(naming that one as the previous), so that a run killed at any point leaves files its record vouches for."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from pathlib import Path

from gatedv_stats.core.errors import NoSpaceError
from gatedv_stats.core.files import file_sha256
from gatedv_stats.io.curvefiles import CURVE_FILE_NAME, write_curve_file
from gatedv_stats.io.runrecords import update_run_record
from trainer.model.transformer import Transformer
from trainer.run.checkpoint import CHECKPOINT_FILE_NAME, Checkpoint, save_checkpoint


@dataclass(frozen=True)
class TrainResult:
    run_dir: str
    status: str  # finished | stopped
    update: int
    dev_nll: float
    tokens: int
    train_seconds: float
    tokens_per_second: float
    stopped_by: str | None = None  # the signal that ended the call early (SIGINT, SIGTERM), if one did

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    def summary(self) -> str:
        return (f"{self.status} at update {self.update}: dev NLL {self.dev_nll:.6f} "
                f"(PPL {math.exp(self.dev_nll):.3f}), {self.tokens:,} training tokens at "
                f"{self.tokens_per_second:,.0f} tokens/s -> {self.run_dir}")


class RunFiles:
    """The checkpoint and curve of one run directory, as rank 0 writes them, and the hash of the checkpoint now
    under its name (the previous one while the next is recorded)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.checkpoint_path = run_dir / CHECKPOINT_FILE_NAME
        self.checkpoint_sha256: str | None = None

    def resumed_from(self, loaded: Checkpoint) -> None:
        """The checkpoint read to resume (verified against run.json when it records one)."""
        self.checkpoint_sha256 = loaded.sha256 or file_sha256(self.checkpoint_path)

    def write_curve(self, rows: list[dict]) -> None:
        write_curve_file(self.run_dir / CURVE_FILE_NAME, rows, record=True)

    def write_checkpoint(self, model: Transformer, extra: dict) -> None:
        """The checkpoint of `extra["update"]`: written, read back, recorded, then put in place; run.json's
        `checkpoint_update` (for `gatedv sweep --status`) last."""
        previous = self.checkpoint_sha256

        def record(sha256: str) -> None:
            update_run_record(self.run_dir, {"checkpoint_sha256": sha256, "previous_checkpoint_sha256": previous})

        self.checkpoint_sha256 = save_checkpoint(self.checkpoint_path, model, extra=extra, before_replace=record)
        update_run_record(self.run_dir, {"checkpoint_update": extra["update"]})


def no_space(error: NoSpaceError, run_dir: Path, update: int, saved_update: int | None) -> NoSpaceError:
    """The one line of a run stopped by a full disk: the file that could not be written, the checkpoint kept, how
    to go on. run.json says `failed` with the reason when there is room left to say so."""
    kept = (f"its checkpoint of update {saved_update} is kept" if saved_update is not None else
            "no checkpoint was written yet")
    reason = f"no space left on the device writing {error.path or 'a file'} after update {update}"
    with contextlib.suppress(OSError, NoSpaceError):
        update_run_record(run_dir, {"status": "failed", "reason": reason, "update": update,
                                    "checkpoint_update": saved_update})
    return NoSpaceError(f"{run_dir}: {reason} ({error.reason}); {kept} and no file is left half written: free "
                        "space, then resume (gatedv train --resume, or the same sweep again)", error.path, error.reason)
