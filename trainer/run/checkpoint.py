"""Checkpoint files: one `torch.save` dict holding the model config, its state dict and the trainer's extras.

Loading uses `torch.load(weights_only=True)`, so `extra` may hold tensors, numbers, strings, None and
lists / tuples / dicts of those (optimizer state dicts and torch RNG states qualify; numpy arrays do not).

A run's checkpoint (`RUN_DIR/checkpoint.pt`) is verified on every load against the SHA-256 its run.json records
(`checkpoint_sha256`): the trainer hashes the file while writing it, reads it back, records the hash and only then
renames it over the previous checkpoint (`save_checkpoint(before_replace=)`), so the record also names that previous
one (`previous_checkpoint_sha256`) while it is still in place. torch.load itself checks no checksum: a flipped bit
in a tensor would load as a different weight.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import torch

from gatedv_stats.core.atomic import atomic_file
from gatedv_stats.core.errors import InputError
from gatedv_stats.core.integrity import check_file_sha256
from gatedv_stats.io.runrecords import read_run_record, run_record_path
from trainer.model.transformer import ModelConfig, Transformer, build_model

FORMAT = "gatedv-checkpoint-1"
_ZIP_MAGIC = b"PK\x03\x04"  # torch.save writes a zip archive; anything else is not one of ours
CHECKPOINT_FILE_NAME = "checkpoint.pt"  # inside a run directory
RETRAIN = ("it cannot be resumed or evaluated: train the run again (move the run directory away first), or restore "
           "an intact copy")


@dataclass(frozen=True)
class Checkpoint:
    model: Transformer
    config: ModelConfig
    extra: dict
    sha256: str | None = None  # of the file, when it was verified against its run's record


def save_checkpoint(path: str | os.PathLike, model: Transformer, *, extra: dict,
                    before_replace: Callable[[str], None] | None = None) -> str:
    """Atomically write {"format", "model_config", "model", **extra} to `path`, hashed while it is written and read
    back before it replaces the previous file; `before_replace(sha256)` records the hash first. Returns the
    file's SHA-256."""
    reserved = {"format", "model_config", "model"} & set(extra)
    if reserved:
        raise ValueError(f"checkpoint extra: keys {sorted(reserved)} are reserved")
    payload = {"format": FORMAT, "model_config": dataclasses.asdict(model.config), "model": model.state_dict(), **extra}
    with atomic_file(path, verify=True, before_replace=before_replace) as writer:
        torch.save(payload, writer)  # type: ignore[arg-type]  # a file object, not the path: torch names the archive after a path's temp name
    return writer.sha256


def verify_run_checkpoint(path: str | os.PathLike) -> str | None:
    """The SHA-256 of a run's checkpoint (`RUN_DIR/checkpoint.pt`), checked against the run.json beside it: a
    `damaged` InputError when it is neither the checkpoint recorded there nor the one it was replacing. None for a
    checkpoint its run records no hash of (another name, a copy elsewhere, a run trained before checkpoints were
    recorded): read as it is."""
    path = Path(path)
    record = read_run_record(path.parent) if path.name == CHECKPOINT_FILE_NAME else None
    if not record or not record.get("checkpoint_sha256"):
        return None
    return check_file_sha256(path, [record["checkpoint_sha256"], record.get("previous_checkpoint_sha256")],
                             run_record_path(path.parent), RETRAIN)


def non_finite_state(model_state: dict, optimizer_state: dict) -> str | None:
    """The name of the first weight, buffer or optimizer tensor holding a NaN or an infinity; None when all are
    finite (a checkpoint is written, or resumed from, only then)."""
    optimizer = ((f"optimizer state {index}.{key}", value) for index, state in optimizer_state.get("state", {}).items()
                 for key, value in state.items() if isinstance(value, torch.Tensor))
    return _first_non_finite(chain(model_state.items(), optimizer))


def _first_non_finite(tensors: Iterable[tuple[str, torch.Tensor]]) -> str | None:
    named = [(name, tensor) for name, tensor in tensors if tensor.is_floating_point()]
    by_device: dict[torch.device, list[int]] = {}
    for index, (_, tensor) in enumerate(named):
        by_device.setdefault(tensor.device, []).append(index)
    finite = torch.ones(len(named), dtype=torch.bool)
    for indices in by_device.values():  # one transfer per device
        finite[indices] = torch.stack([named[index][1].isfinite().all() for index in indices]).cpu()
    return None if bool(finite.all()) else named[int((~finite).nonzero()[0])][0]


def read_checkpoint_dict(path: str | os.PathLike, device: str | torch.device = "cpu") -> dict:
    """The raw checkpoint dict, validated: a one-line InputError for a missing, foreign or damaged file (verify a
    run's checkpoint against its record first: `verify_run_checkpoint`)."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not a checkpoint file")
    if not path.is_file():
        raise InputError(f"{path}: checkpoint not found")
    try:
        with path.open("rb") as file:
            is_zip = file.read(len(_ZIP_MAGIC)) == _ZIP_MAGIC
    except OSError as error:
        raise InputError(f"{path}: not a readable checkpoint ({error.strerror or error})") from None
    if not is_zip:
        raise InputError(f"{path}: not a gatedv checkpoint (not a torch.save zip archive)")
    # A zip archive ends in its directory: a file cut short has none, and torch's error for it depends on where
    # the cut falls (a zip message, or an OSError), so it is named here first.
    if not zipfile.is_zipfile(path):
        raise InputError(f"{path}: not a readable checkpoint (truncated or corrupt: the zip archive has no end "
                         "record)")
    try:
        payload = torch.load(path, map_location=device, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError) as error:
        # torch's own message is a paragraph of advice on `weights_only`; its first sentence is the reason
        reason = str(error).strip().splitlines()[0].split(". ")[0] if str(error).strip() else type(error).__name__
        raise InputError(f"{path}: not a readable checkpoint (truncated or corrupt: {reason})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        found = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise InputError(f"{path}: not a gatedv checkpoint (format {found!r}, expected {FORMAT!r})")
    for key in ("model_config", "model"):
        if not isinstance(payload.get(key), dict):
            found = "missing" if key not in payload else f"a {type(payload[key]).__name__}, not a dict"
            raise InputError(f"{path}: damaged checkpoint: its {key!r} is {found}")
    return payload


def check_finite_weights(path: str | os.PathLike, loaded: Checkpoint) -> None:
    """An InputError naming `path` and the first weight or buffer of `loaded` holding a NaN or an infinity."""
    bad = _first_non_finite(loaded.model.state_dict().items())
    if bad is not None:
        raise InputError(f"{path}: {bad} holds non-finite values (NaN or infinity); the model diverged")


def config_from_dict(fields: dict, source: str) -> ModelConfig:
    """A ModelConfig from its `asdict` form; unknown or bad fields are an InputError naming `source`."""
    known = {f.name for f in dataclasses.fields(ModelConfig)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise InputError(f"{source}: model_config has unknown field(s) {', '.join(unknown)}")
    try:
        return ModelConfig(**fields)
    except InputError as error:
        raise InputError(f"{source}: {error}") from None


def load_checkpoint(path: str | os.PathLike, device: str | torch.device = "cpu") -> Checkpoint:
    """The model (weights restored, on `device`), its config and every other key of the file as `extra`; a run's
    checkpoint verified against its run.json first (`verify_run_checkpoint`)."""
    sha256 = verify_run_checkpoint(path) if Path(path).is_file() else None
    payload = read_checkpoint_dict(path, device)
    config = config_from_dict(payload["model_config"], str(path))
    model = build_model(config, seed=0, device="meta").to_empty(device=device)
    model.init_buffers()
    try:
        model.load_state_dict(payload["model"])
    except RuntimeError as error:
        reason = " ".join(str(error).split())[:300]
        raise InputError(f"{path}: weights do not match the model config ({reason})") from None
    extra = {k: v for k, v in payload.items() if k not in ("format", "model_config", "model")}
    return Checkpoint(model=model, config=config, extra=extra, sha256=sha256)
