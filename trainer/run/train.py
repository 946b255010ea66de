"""The training loop of docs/method.md §4: paired runs, development curve, atomic checkpoints, bit-for-bit resume, DDP.

A run is a pure function of its `RunSpec`: the initial weights depend on (seed, tensor name, shape), the
batch of update u on (seed, u) only, so a baseline and a variant with the same seed see the same windows,
and a resumed run continues exactly where it stopped (the sampler position is the update index).
Under `torchrun` every process takes its slice of the same global batch; rank 0 evaluates and writes.
"""

from __future__ import annotations

import contextlib
import math
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from tqdm import tqdm

from gatedv_stats import __version__
from gatedv_stats.core.atomic import remove_stale_temp_files
from gatedv_stats.core.errors import InputError, NoSpaceError, RunFailure
from gatedv_stats.io.runrecords import update_run_record
from trainer.data.prepared import PreparedData
from trainer.model.moments import compute_moments
from trainer.model.transformer import Transformer, build_model, count_parameters
from trainer.run.checkpoint import load_checkpoint, non_finite_state
from trainer.run.device import Precision, out_of_memory_as, retain_freed_memory, select_device
from trainer.run.evaluate import document_loss_sums
from trainer.run.interruption import DeferredInterruption
from trainer.run.ranks import Ranks, process_group
from trainer.run.recipe import (
    CLIP_NORM,
    RunSpec,
    Runtime,
    check_data_fits,
    learning_rate,
    make_optimizer,
    spec_differences,
)
from trainer.run.rng import rng_state, seed_global_rngs, set_rng_state
from trainer.run.run_files import RunFiles, TrainResult, no_space


class DivergenceError(RuntimeError):
    """The training loss, the gradients, the weights or the development NLL became NaN or infinite; the run
    directory keeps its last good checkpoint, whose weights are finite."""


def next_token_loss(model: Transformer, batch: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of a (B, T + 1) batch of windows."""
    return model.loss(batch[:, :-1], batch[:, 1:])


class Objective(torch.nn.Module):
    """The training loss as a module's forward, so that DDP and torch.compile wrap the model's loss path
    (its chunked readout never materialises the logits of a whole batch)."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        return next_token_loss(self.model, batch)


def accumulate_gradients(objective: Callable[[torch.Tensor], torch.Tensor], batch: torch.Tensor, parts: int,
                         autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
                         ) -> torch.Tensor:
    """Gradients of the mean loss of `batch` from `parts` equal micro-batches, each micro-batch's mean loss divided
    by `parts` (the same gradients as the whole batch's to float tolerance; under data parallel they are
    all-reduced once, after the last); the mean loss. `autocast` wraps each forward pass."""
    pieces = batch.split(len(batch) // parts)
    total = torch.zeros((), device=batch.device)
    no_sync = getattr(objective, "no_sync", None)
    for index, piece in enumerate(pieces):
        with contextlib.nullcontext() if index == len(pieces) - 1 or no_sync is None else no_sync():
            with autocast():
                loss = objective(piece) / len(pieces)
            loss.backward()
        total = total + loss.detach()
    return total


def _described(memory: dict) -> str:
    return ", ".join(f"{key}={value}" for key, value in memory.items())


def _write_run_record(run_dir: Path, spec: RunSpec, **fields) -> None:
    update_run_record(run_dir, {**spec.to_dict(), "gatedv_version": __version__, **fields})


def train(spec: RunSpec, run_dir: str | Path, *, runtime: Runtime = Runtime(), resume: bool = False,
          stop_after: int | None = None) -> TrainResult:
    """Train (or, with `resume`, continue) the run `spec` in `run_dir`; `stop_after` ends this call after
    that update with a checkpoint, as an interruption would. Under `torchrun` this runs data parallel."""
    spec.validate()
    where = Ranks.from_env()
    if spec.batch_size % where.world:
        raise InputError(f"--batch-size: {spec.batch_size} is not divisible by {where.world} processes")
    if runtime.grad_accum < 1 or spec.batch_size % (where.world * runtime.grad_accum):
        raise InputError(f"--grad-accum: {runtime.grad_accum} micro-batches do not divide each of {where.world} "
                         f"process(es)' share of the batch of {spec.batch_size} sequences")
    if stop_after is not None and not 0 < stop_after <= spec.updates:
        raise InputError(f"--stop-after: must be in 1..{spec.updates}, got {stop_after}")
    device = select_device(runtime.device, local_rank=where.local_rank)
    runtime.precision.apply(device)
    retain_freed_memory()  # a step's freed blocks are the next step's: do not return them to the system
    with process_group(device):
        loop = _Loop(spec, Path(run_dir), runtime, where, device)
        with out_of_memory_as(loop.out_of_memory), loop.no_space_as_failure():
            return loop.run(resume, stop_after or spec.updates)


class _Loop:
    """State of one training call: model, optimizer, curve rows and the window of training losses."""

    def __init__(self, spec: RunSpec, run_dir: Path, runtime: Runtime, where: Ranks, device: torch.device) -> None:
        self.spec, self.run_dir, self.runtime, self.where, self.device = spec, run_dir, runtime, where, device
        self.files = RunFiles(run_dir)
        self.checkpoint_path = self.files.checkpoint_path
        self.data = PreparedData.open(spec.data)
        check_data_fits(self.data, spec.model_config())
        self.dev = self.data.eval_set("dev")
        self.sampler = self.data.sampler(spec.seed)
        self.curve: list[dict] = []
        self.window = [0.0, 0]  # Σ training loss, updates since the last curve row
        self.train_seconds = 0.0
        self.saved_update: int | None = None  # update of the last checkpoint written or resumed from
        self.update = 0  # the model's
        self.built = False  # the model and its optimizer are built or loaded

    def run(self, resume: bool, stop_at: int) -> TrainResult:
        self._start(resume)
        if self.where.main:  # a CPU run resumes bit for bit only on as many threads; a resumed run runs again
            update_run_record(self.run_dir, {"threads": torch.get_num_threads(),
                                             **({"status": "running"} if resume else {})}, drop=("reason",))
        objective: Callable[[torch.Tensor], torch.Tensor] = Objective(self.model)
        if self.where.world > 1:
            objective = torch.nn.parallel.DistributedDataParallel(
                objective, device_ids=[self.device.index] if self.device.type == "cuda" else None,
                broadcast_buffers=False)
        if self.runtime.compile:
            objective = torch.compile(objective)
        tokens_per_update = self.spec.batch_size * self.model.config.seq_len
        trained_from = self.update
        with tqdm(total=self.spec.updates, initial=self.update, unit="upd", file=sys.stderr, dynamic_ncols=True,
                  desc=f"{self.spec.variant} seed {self.spec.seed}",
                  disable=not (self.runtime.progress and self.where.main)) as bar, \
                DeferredInterruption(parallel=self.where.world > 1) as interruption:
            agreed = False  # under data parallel: every rank's word, from the loss's all-reduce, to stop now
            while self.update < stop_at and not agreed and (self.where.world > 1 or interruption.received is None):
                began = time.perf_counter()
                value, agreed, save_requested = self._step(objective, interruption)
                self.train_seconds += time.perf_counter() - began
                rate = (self.update - trained_from) * tokens_per_update / self.train_seconds
                bar.set_postfix_str(f"loss {value:.3f}, {rate:,.0f} tok/s", refresh=False)
                bar.update()
                if self.update % self.spec.eval_every == 0 or self.update == self.spec.updates:
                    self._record()
                if save_requested or (self.where.world == 1 and interruption.user_signal is not None):
                    # a scheduler's user signal: its handler finds a checkpoint of this update
                    self._save_unless_saved()
                    if self.where.world > 1:
                        dist.barrier()
                    interruption.deliver_user_signal()
            self._save_unless_saved()  # stopped between curve points: by --stop-after or a signal
            if agreed and self.where.world > 1:
                dist.barrier()  # no rank ends before rank 0 has written the checkpoint
        interruption.deliver()
        trained = self.update - trained_from
        result = TrainResult(run_dir=str(self.run_dir),
                             status="finished" if self.update == self.spec.updates else "stopped",
                             update=self.update, dev_nll=self.curve[-1]["dev_nll"],
                             tokens=self.update * tokens_per_update, train_seconds=self.train_seconds,
                             tokens_per_second=trained * tokens_per_update / self.train_seconds if trained else 0.0,
                             stopped_by=None if interruption.received is None else
                             signal.Signals(interruption.received).name)
        if self.where.main:
            throughput = {"train_seconds": result.train_seconds, "tokens_per_second": result.tokens_per_second}
            _write_run_record(self.run_dir, self.spec, status=result.status, update=self.update,
                              **(throughput if trained else {}))
        return result

    def out_of_memory(self, cause: str) -> RunFailure:
        """The one-line failure of a device that ran out of memory, with what is kept and how to go on; run.json
        says `failed`, with the reason."""
        kept = (f"its checkpoint of update {self.saved_update} is kept: free the device's memory and resume "
                "(gatedv train --resume, or the same sweep again)" if self.saved_update is not None else
                "no checkpoint was written yet: free the device's memory and start it again")
        when = f"after update {self.update}" if self.built else "building the model"
        reason = f"out of memory on {self.device} {when} ({cause})"
        self._failed(reason)
        return RunFailure(f"{self.run_dir}: {reason}; {kept}")

    @contextlib.contextmanager
    def no_space_as_failure(self) -> Iterator[None]:
        """A checkpoint, curve or record that did not fit on the disk: one line with what is kept, how to go on."""
        try:
            yield
        except NoSpaceError as error:
            if not self.where.main:
                raise
            raise no_space(error, self.run_dir, self.update, self.saved_update) from None

    def _failed(self, reason: str) -> None:
        """run.json of a run that ended for a reason outside the inputs: `failed`, the reason, the update reached
        and that of the last checkpoint (null: none written)."""
        if self.where.main:
            _write_run_record(self.run_dir, self.spec, status="failed", reason=reason, update=self.update,
                              checkpoint_update=self.saved_update)

    def _step(self, objective: Callable[[torch.Tensor], torch.Tensor],
              interruption: DeferredInterruption) -> tuple[float, bool, bool]:
        """One update on this process's slice of the global batch; returns the global mean training loss,
        whether to stop after it and whether to checkpoint it for a user signal's handler (a signal held here, or
        under data parallel on any rank, so that every rank decides alike)."""
        local = self.spec.batch_size // self.where.world
        batch = self.sampler.batch(self.update, self.spec.batch_size)
        batch = batch[self.where.rank * local : (self.where.rank + 1) * local].to(self.device, non_blocking=True)
        lr = learning_rate(self.update, peak=self.spec.lr, warmup=self.spec.warmup, updates=self.spec.updates)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        value = accumulate_gradients(objective, batch, self.runtime.grad_accum,
                                     lambda: self.runtime.precision.autocast(self.device)).float()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), CLIP_NORM)  # gradients are all-reduced
        flags = value.new_tensor([interruption.received is not None, interruption.user_signal is not None])
        if self.where.world > 1:  # the decisions ride on the loss's all-reduce
            summed = torch.cat([value[None], flags])
            dist.all_reduce(summed)
            value, flags = summed[0] / self.where.world, summed[1:]
        value, grad_norm, stop, save = torch.cat([torch.stack([value, grad_norm.float()]), flags]).tolist()
        for what, number in (("training loss", value), ("gradient norm", grad_norm)):  # before the step uses them
            if not math.isfinite(number):
                self._diverged(f"{what} is {number}", self.update + 1)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.update += 1
        self.window[0] += value
        self.window[1] += 1
        return value, stop > 0, save > 0

    def _start(self, resume: bool) -> None:
        exists = self.checkpoint_path.is_file()
        if resume and not exists:
            raise InputError(f"{self.checkpoint_path}: no checkpoint to resume")
        if not resume and exists:
            raise InputError(f"{self.run_dir}: already holds a run; pass --resume to continue it or choose another "
                             "--out")
        if resume:
            if self.where.main:
                remove_stale_temp_files(self.run_dir)  # partial files of a killed write
            self._load()
            return
        seed_global_rngs(self.spec.seed)
        self.model = build_model(self.spec.model_config(), self.spec.seed, self.device)
        if self.model.config.uses_moments:
            moments = compute_moments(self.data, self.spec.size, self.spec.seed, device=self.device,
                                      config=self.spec.size_config())
            self.model.set_moments(moments.tensor())
            if self.where.main:
                moments.write(self.run_dir / "moments.json")
        if self.where.main:
            _write_run_record(self.run_dir, self.spec, status="running", update=0,
                              model_config=self.model.config.to_dict(), parameters=count_parameters(self.model),
                              data_manifest_sha256=self.data.manifest_sha256,
                              precision=self.runtime.precision.to_dict(), memory=self.runtime.memory_settings())
        self.model.checkpoint_activations = self.runtime.checkpoint_activations
        self.optimizer = make_optimizer(self.model, self.spec.lr, self.device)
        self.update, self.built = 0, True
        self._record()

    def _load(self) -> None:
        loaded = load_checkpoint(self.checkpoint_path, device=self.device)
        extra = loaded.extra
        differing = spec_differences(extra.get("run", {}), self.spec)
        if differing:
            raise InputError(f"{self.checkpoint_path}: the checkpoint's run differs ({', '.join(differing)})")
        if extra["data_manifest_sha256"] != self.data.manifest_sha256:
            raise InputError(f"{self.spec.data}: data manifest differs from the one the checkpoint was trained on")
        trained_with = Precision(**extra.get("precision", self.runtime.precision.to_dict()))
        if trained_with != self.runtime.precision:
            raise InputError(f"{self.checkpoint_path}: trained in {trained_with.describe()}, resumed in "
                             f"{self.runtime.precision.describe()}; resume with the precision it was trained with "
                             "(--bf16, --tf32 as before) so that one run is not two")
        trained_memory = extra.get("memory", self.runtime.memory_settings())
        if trained_memory != self.runtime.memory_settings():
            raise InputError(f"{self.checkpoint_path}: trained with {_described(trained_memory)}, resumed with "
                             f"{_described(self.runtime.memory_settings())}; resume with the settings it was trained "
                             "with (--grad-accum, --checkpoint-activations, --compile as before)")
        bad = non_finite_state(loaded.model.state_dict(), extra["optimizer"])
        if bad is not None:
            raise InputError(f"{self.checkpoint_path}: {bad} holds non-finite values (update {extra['update']}); "
                             "a diverged run cannot be resumed, train it again")
        self.model = loaded.model
        self.model.checkpoint_activations = self.runtime.checkpoint_activations
        self.optimizer = make_optimizer(self.model, self.spec.lr, self.device)
        self.optimizer.load_state_dict(extra["optimizer"])
        self.update, self.built = extra["update"], True
        self.curve = list(extra["curve"])
        self.window = list(extra["train_loss_window"])
        self.saved_update = self.update
        self.files.resumed_from(loaded)
        set_rng_state(extra["rng"])

    def _record(self) -> None:
        """Development NLL of the current weights → curve row (every rank), curve file and checkpoint (rank 0);
        non-finite weights or a non-finite NLL stop the run before anything is written."""
        self._check_finite()
        row: list[dict] = [{}]  # rank 0's, broadcast to every rank
        if self.where.main:
            sums = document_loss_sums(self.model, self.dev.tokens, device=self.device,
                                      precision=self.runtime.precision, batch_size=self.runtime.eval_batch_size)
            n_targets = np.full(len(sums), self.dev.tokens.shape[1] - 1)
            count = self.window[1]
            row[0] = {
                "arm": self.spec.variant, "seed": self.spec.seed, "lr": self.spec.lr, "step": self.update,
                "dev_nll": float(np.asarray(sums, dtype=np.float64).sum() / n_targets.sum()),
                "train_loss": self.window[0] / count if count else math.nan,
                "tokens": self.update * self.spec.batch_size * self.model.config.seq_len,
            }
        if self.where.world > 1:
            dist.broadcast_object_list(row, src=0)
        if not math.isfinite(row[0]["dev_nll"]):
            self._diverged(f"development NLL is {row[0]['dev_nll']}", self.update)
        self.curve.append(row[0])
        self.window = [0.0, 0]
        if self.where.main:
            self.files.write_curve(self.curve)
        self._write_checkpoint()

    def _save_unless_saved(self) -> None:
        """A checkpoint of the current update, unless the last one written or resumed from is of it."""
        if self.saved_update != self.update:
            self._check_finite()
            self._write_checkpoint()

    def _check_finite(self) -> None:
        """Weights, buffers and optimizer state hold no NaN or infinity (the same on every rank)."""
        bad = non_finite_state(self.model.state_dict(), self.optimizer.state_dict())
        if bad is not None:
            self._diverged(f"{bad} holds non-finite values", self.update)

    def _write_checkpoint(self) -> None:
        if self.where.main:
            self.files.write_checkpoint(self.model, {
                "run": self.spec.to_dict(),
                "data_manifest_sha256": self.data.manifest_sha256,
                "update": self.update,
                "optimizer": self.optimizer.state_dict(),
                "schedule": {"update": self.update, "warmup": self.spec.warmup, "updates": self.spec.updates,
                             "peak_lr": self.spec.lr},
                "sampler": {"seed": self.sampler.seed, "n_windows": self.sampler.n_windows, "update": self.update},
                "rng": rng_state(),
                "precision": self.runtime.precision.to_dict(),
                "memory": self.runtime.memory_settings(),
                "curve": self.curve,
                "train_loss_window": self.window,
                "gatedv_version": __version__,
            })
        self.saved_update = self.update
        if self.where.world > 1:
            dist.barrier()

    def _diverged(self, what: str, update: int) -> None:
        saved = ("no checkpoint written" if self.saved_update is None else
                 f"last good checkpoint {self.checkpoint_path} (update {self.saved_update})")
        if self.where.main:
            _write_run_record(self.run_dir, self.spec, status="diverged", update=self.update, diverged_update=update,
                              checkpoint_update=self.saved_update)
        raise DivergenceError(f"{what} at update {update}; stopped, {saved}")
