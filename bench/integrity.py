"""What verifying every file costs: reading (and writing) a loss file of 100,000 documents and a small checkpoint with
the recorded SHA-256 checked, against the same read with the check switched off. The two alternate over rounds; the
median of each is reported, with the ratio.

    python bench/integrity.py                      # 100,000 documents, the small model's checkpoint, 7 rounds
    python bench/integrity.py --docs 1000000 --config medium --rounds 5

Loss file: `read_loss_file` (which also hashes the file's bytes for `Run.sha256`, as before) with and without
the content check (`gatedv_stats.io.sealing.seal_problem`), and `write_loss_file` with and without sealing the
content. Checkpoint: `load_checkpoint` of `RUN_DIR/checkpoint.pt` (model and AdamW state after one update, as the
trainer writes it) with and without the check against run.json (`verify_run_checkpoint`), and `save_checkpoint`
(hashed while written, then read back) against a plain `torch.save` to a temporary file renamed into place. Token
store: its SHA-256 (checked once by each process that trains) against reading it alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import gatedv_stats.io.lossfiles as lossfiles
import trainer.run.checkpoint as checkpoint
from gatedv_stats.io.lossfiles import read_loss_file, write_loss_file
from gatedv_stats.io.runrecords import update_run_record
from trainer.model.transformer import build_model, model_config
from trainer.run.recipe import make_optimizer


def timed(function: Callable[[], object]) -> float:
    began = time.perf_counter()
    function()
    return time.perf_counter() - began


def alternate(rounds: int, with_check: Callable[[], object], without: Callable[[], object]) -> dict:
    """Median seconds of each over `rounds` alternating rounds (one untimed call of each first)."""
    with_check(), without()
    pairs = [(timed(with_check), timed(without)) for _ in range(rounds)]
    checked, plain = statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)
    return {"checked_s": round(checked, 4), "unchecked_s": round(plain, 4), "ratio": round(checked / plain, 3)}


class Switched:
    """`module.name` replaced by `replacement` while active."""

    def __init__(self, module, name: str, replacement) -> None:
        self.module, self.name, self.replacement = module, name, replacement

    def __call__(self, function: Callable[[], object]) -> Callable[[], object]:
        def run() -> object:
            original = getattr(self.module, self.name)
            setattr(self.module, self.name, self.replacement)
            try:
                return function()
            finally:
                setattr(self.module, self.name, original)
        return run


def loss_file_figures(folder: Path, n_docs: int, rounds: int) -> dict:
    rng = np.random.default_rng(0)
    docs = pd.DataFrame({"doc_id": [f"doc-{i:08d}" for i in range(n_docs)],
                         "n_targets": np.full(n_docs, 256), "loss_sum": rng.uniform(300.0, 900.0, n_docs),
                         "domain": [f"domain{i % 500}" for i in range(n_docs)],
                         "n_bytes": rng.integers(400, 1200, n_docs)})
    path = folder / "dev.parquet"
    meta = {"arm": "gatedv", "seed": 1, "eval_set": "dev"}
    write_loss_file(path, docs, meta)
    unsealed = Switched(lossfiles, "sealed", lambda table: table)
    return {"documents": n_docs, "bytes": path.stat().st_size,
            "read": alternate(rounds, lambda: read_loss_file(path),
                              Switched(lossfiles, "seal_problem", lambda table, raw=None: None)(
                                  lambda: read_loss_file(path))),
            "write": alternate(rounds, lambda: write_loss_file(path, docs, meta),
                               unsealed(lambda: write_loss_file(path, docs, meta)))}


def checkpoint_figures(folder: Path, size: str, rounds: int) -> dict:
    model = build_model(model_config(size, "gatedv"), 1, "cpu")
    optimizer = make_optimizer(model, 1e-3, torch.device("cpu"))
    model.loss(*(torch.randint(0, 100, (1, 16)),) * 2).backward()
    optimizer.step()
    extra = {"update": 1, "optimizer": optimizer.state_dict()}
    run_dir = folder / "run"
    run_dir.mkdir()
    path = run_dir / checkpoint.CHECKPOINT_FILE_NAME
    sha256 = checkpoint.save_checkpoint(path, model, extra=extra)
    update_run_record(run_dir, {"checkpoint_sha256": sha256})

    def plain_save() -> None:
        tmp = path.with_name(".plain.tmp")
        with open(tmp, "wb") as handle:
            torch.save({"format": checkpoint.FORMAT, "model": model.state_dict(), **extra}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, folder / "plain.pt")

    return {"config": size, "bytes": path.stat().st_size,
            "load": alternate(rounds, lambda: checkpoint.load_checkpoint(path),
                              Switched(checkpoint, "verify_run_checkpoint", lambda where: None)(
                                  lambda: checkpoint.load_checkpoint(path))),
            "save": alternate(rounds, lambda: checkpoint.save_checkpoint(path, model, extra=extra), plain_save)}


def store_figures(folder: Path, megabytes: int, rounds: int) -> dict:
    """Verifying a training token store of `megabytes` (what `PreparedData.train_tokens` checks once per process that
    trains): its SHA-256 from the page cache, against reading it alone."""
    from gatedv_stats.core.files import file_sha256

    path = folder / "train.bin"
    path.write_bytes(np.random.default_rng(0).integers(0, 8192, megabytes << 19, dtype=np.uint16).tobytes())

    def read() -> None:
        with open(path, "rb") as handle:
            while handle.read(1 << 20):
                pass

    figures = alternate(rounds, lambda: file_sha256(path), read)
    return {"megabytes": megabytes, **figures, "gb_per_s": round(megabytes / 1024 / figures["checked_s"], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--config", default="small")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--store-mb", type=int, default=512, help="size of the token store to verify")
    args = parser.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    with tempfile.TemporaryDirectory(prefix="gatedv-integrity-") as scratch:
        folder = Path(scratch)
        figures = {"loss_file": loss_file_figures(folder, args.docs, args.rounds),
                   "checkpoint": checkpoint_figures(folder, args.config, args.rounds),
                   "token_store": store_figures(folder, args.store_mb, args.rounds),
                   "load_average_1min": round(os.getloadavg()[0], 2)}
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
