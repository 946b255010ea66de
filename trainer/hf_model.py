"""A local `transformers` causal language model with its tokenizer, opened offline, and what identifies it: the
SHA-256 of its weight files and of its tokenizer (docs/method.md §5, "Models with their own tokenizer")."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from gatedv_stats.errors import InputError, ParameterError
from gatedv_stats.io.fileio import file_sha256

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# The file that fully defines a fast tokenizer; without it, the files a slow tokenizer is read from.
TOKENIZER_JSON = "tokenizer.json"
SLOW_VOCABULARY_FILES = ("tokenizer.model", "spiece.model", "sentencepiece.bpe.model", "vocab.json", "merges.txt",
                         "vocab.txt")
SLOW_SETTINGS_FILES = ("added_tokens.json", "special_tokens_map.json", "tokenizer_config.json")
# The longest window a default --context takes, whatever the model's own maximum (logits grow with it).
MAX_DEFAULT_CONTEXT = 4096
_LENGTH_KEYS = ("max_position_embeddings", "n_positions", "n_ctx", "seq_length")
_SNAPSHOT = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class HFModel:
    """An opened model directory: the model (eval mode, on its device), its tokenizer and its provenance."""

    path: Path
    model: torch.nn.Module
    tokenizer: object
    device: torch.device
    provenance: dict

    @property
    def tokenizer_sha256(self) -> str:
        return self.provenance["tokenizer_sha256"]

    def default_context(self) -> int:
        """The model's maximum sequence length from its config, at most MAX_DEFAULT_CONTEXT."""
        for key in _LENGTH_KEYS:
            value = getattr(self.model.config, key, None)
            if isinstance(value, int) and value > 1:
                return min(value, MAX_DEFAULT_CONTEXT)
        raise ParameterError("context", f"{self.path}: the model's config names no maximum length; give one")


def weight_files(model_dir: Path) -> list[Path]:
    """The weight files of a model directory: `*.safetensors` and `pytorch_model*.bin`, sorted by name."""
    return sorted(path for path in model_dir.iterdir() if path.is_file()
                  and (path.suffix == ".safetensors" or re.fullmatch(r"pytorch_model.*\.bin", path.name)))


def tokenizer_files(model_dir: Path) -> list[Path]:
    """`tokenizer.json` when present (it defines the tokenizer), else the slow tokenizer's files; [] for none."""
    if (model_dir / TOKENIZER_JSON).is_file():
        return [model_dir / TOKENIZER_JSON]
    present = [model_dir / name for name in (*SLOW_VOCABULARY_FILES, *SLOW_SETTINGS_FILES)
               if (model_dir / name).is_file()]
    return present if any(path.name in SLOW_VOCABULARY_FILES for path in present) else []


def files_sha256(paths: list[Path]) -> str:
    """SHA-256 identifying several files: of their bytes for one file, else of the `name<TAB>sha256` lines."""
    if len(paths) == 1:
        return file_sha256(paths[0])
    lines = "".join(f"{path.name}\t{file_sha256(path)}\n" for path in sorted(paths, key=lambda path: path.name))
    return hashlib.sha256(lines.encode("utf-8")).hexdigest()


def model_name(model_dir: Path) -> str:
    """The model directory's name; for a Hugging Face cache snapshot, the repository's (`models--org--NAME`)."""
    resolved = model_dir.resolve()
    if snapshot_revision(model_dir) is not None and resolved.parent.parent.name.startswith("models--"):
        return resolved.parent.parent.name.rsplit("--", 1)[-1]
    return resolved.name


def snapshot_revision(model_dir: Path) -> str | None:
    """The commit of a Hugging Face cache snapshot (`.../snapshots/<commit>/`), else None."""
    resolved = model_dir.resolve()
    if resolved.parent.name == "snapshots" and _SNAPSHOT.fullmatch(resolved.name):
        return resolved.name
    return None


def check_dtype(dtype: str) -> torch.dtype:
    if dtype not in DTYPES:
        raise ParameterError("dtype", f"must be one of {', '.join(DTYPES)} (got {dtype!r})")
    return DTYPES[dtype]


def open_hf_model(model_dir: str | os.PathLike, *, dtype: str = "float32",
                  device: torch.device = torch.device("cpu")) -> HFModel:
    """Open a local model directory offline (`local_files_only`): `AutoModelForCausalLM` + `AutoTokenizer`."""
    path = Path(model_dir)
    torch_dtype = check_dtype(dtype)
    if not path.is_dir():
        raise InputError(f"{path}: no such model directory")
    if not (path / "config.json").is_file():
        raise InputError(f"{path}: not a transformers model directory (no config.json)")
    weights = weight_files(path)
    if not weights:
        raise InputError(f"{path}: holds no model weights (*.safetensors or pytorch_model*.bin)")
    tokenizer_paths = tokenizer_files(path)
    if not tokenizer_paths:
        raise InputError(f"{path}: holds no tokenizer (tokenizer.json, or a slow tokenizer's tokenizer.model / "
                         "vocab.json + merges.txt / vocab.txt); scoring text needs the model's own tokenizer")
    tokenizer = _load(path, "its tokenizer", "AutoTokenizer")
    model = _load(path, "a causal language model", "AutoModelForCausalLM", **_dtype_argument(torch_dtype))
    try:
        model.to(device).eval()
    except (RuntimeError, ValueError, TypeError) as error:  # e.g. a quantised model that cannot move
        raise InputError(f"{path}: cannot run the model on {device} ({' '.join(str(error).split())[:200]})") from None
    import transformers

    provenance = {
        "model_path": str(path.resolve()),
        "model_revision": snapshot_revision(path),
        "model_weights_sha256": files_sha256(weights),
        "model_weight_files": [weight.name for weight in weights],
        "model_type": getattr(model.config, "model_type", None),
        "tokenizer_sha256": files_sha256(tokenizer_paths),
        "tokenizer_files": [tokenizer_path.name for tokenizer_path in tokenizer_paths],
        "dtype": dtype,
        "transformers_version": transformers.__version__,
    }
    return HFModel(path, model, tokenizer, device, provenance)


def _load(path: Path, what: str, auto_class: str, **kwargs):
    """`from_pretrained` offline, without its progress bars (errors stay one line on stderr)."""
    import transformers
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        return getattr(transformers, auto_class).from_pretrained(path, local_files_only=True, **kwargs)
    except Exception as error:  # noqa: BLE001 - transformers raises many types for a directory it cannot read
        reason = " ".join(str(error).split())[:240] or type(error).__name__
        raise InputError(f"{path}: cannot load {what} ({reason})") from None
    finally:
        if bars:
            hf_logging.enable_progress_bar()


def _dtype_argument(torch_dtype: torch.dtype) -> dict:
    """`dtype=` (transformers >= 4.56) or `torch_dtype=` (older), so weights load in the asked precision."""
    import transformers
    from packaging.version import Version

    return {"dtype" if Version(transformers.__version__) >= Version("4.56") else "torch_dtype": torch_dtype}


__all__ = ["DTYPES", "HFModel", "check_dtype", "files_sha256", "model_name", "open_hf_model", "snapshot_revision",
           "tokenizer_files", "weight_files"]
