"""A local `transformers` causal language model with its tokenizer, opened offline, and what identifies it: the
SHA-256 of its weight files and of its tokenizer (docs/method-statistics.md §5, "Models with their own tokenizer")."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch

from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.core.files import files_sha256, weight_files

if TYPE_CHECKING:
    from transformers import PreTrainedModel

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# The file that fully defines a fast tokenizer; without it, the files a slow tokenizer is read from.
TOKENIZER_JSON = "tokenizer.json"
SLOW_VOCABULARY_FILES = ("tokenizer.model", "spiece.model", "sentencepiece.bpe.model", "vocab.json", "merges.txt",
                         "vocab.txt")
SLOW_SETTINGS_FILES = ("added_tokens.json", "special_tokens_map.json", "tokenizer_config.json")
# The longest window a default --context takes, whatever the model's own maximum (logits grow with it).
MAX_DEFAULT_CONTEXT = 4096
_LENGTH_KEYS = ("max_position_embeddings", "n_positions", "n_ctx", "seq_length")
# Encoder families whose causal-LM class attends both ways unless the config sets is_decoder.
_ENCODER_TYPES = frozenset({"bert", "bert-generation", "big_bird", "camembert", "data2vec-text", "electra", "ernie",
                            "megatron-bert", "rembert", "roberta", "roberta-prelayernorm", "roc_bert", "roformer",
                            "xlm-roberta", "xlm-roberta-xl", "xmod"})
# The causality probe: pairs of two-token sequences that differ in their second token. A causal model computes the
# first position of both rows alike, so its logits there agree up to float noise: at most this fraction of the
# largest logit (at least 1), a few rounding steps of bfloat16 and float16 and far more than float32's. With two
# tokens a leak is largest (attention split between fewer tokens).
_PROBE_PAIRS = 4
_CAUSAL_TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2.0 ** -6, torch.float16: 2.0 ** -8}
_SHOWN_KEYS = 3
_SNAPSHOT = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class HFModel:
    """An opened model directory: the model (eval mode, on its device), its tokenizer and its provenance."""

    path: Path
    model: PreTrainedModel
    tokenizer: object
    device: torch.device
    provenance: dict

    @property
    def tokenizer_sha256(self) -> str:
        return self.provenance["tokenizer_sha256"]


def max_positions(config) -> tuple[int, str] | None:
    """(a `transformers` config's maximum sequence length, the key that holds it), or None when it names none.
    The key is the one in config.json (GPT-2's `n_positions`, not its alias `max_position_embeddings`)."""
    for key in _LENGTH_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 1:
            return value, getattr(config, "attribute_map", {}).get(key, key)
    return None


def tokenizer_files(model_dir: Path) -> list[Path]:
    """`tokenizer.json` when present (it defines the tokenizer), else the slow tokenizer's files; [] for none."""
    if (model_dir / TOKENIZER_JSON).is_file():
        return [model_dir / TOKENIZER_JSON]
    present = [model_dir / name for name in (*SLOW_VOCABULARY_FILES, *SLOW_SETTINGS_FILES)
               if (model_dir / name).is_file()]
    return present if any(path.name in SLOW_VOCABULARY_FILES for path in present) else []


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
    model, loading = _load(path, "a causal language model", "AutoModelForCausalLM", output_loading_info=True,
                           **_dtype_argument(torch_dtype))
    _check_weights_fit(path, model, loading)
    try:
        model.to(device).eval()
    except (RuntimeError, ValueError, TypeError) as error:  # e.g. a quantised model that cannot move
        raise InputError(f"{path}: cannot run the model on {device} ({' '.join(str(error).split())[:200]})") from None
    check_causal(str(path), hf_forward(model), vocabulary_size(model), device, torch_dtype, model.config)
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


def _check_weights_fit(path: Path, model: torch.nn.Module, loading: dict) -> None:
    """Refuse weight files that do not fill the model its config builds: a weight missing from them would be left
    random, and weights the model has no place for mean the files hold another architecture. Weights the model
    ties to others (an LM head tied to the embeddings) are not reported missing by transformers."""
    found = []
    for key, what in (("missing_keys", "of the model's weights are missing from its weight files (left random)"),
                      ("unexpected_keys", "weights in its weight files are not in the model")):
        names = sorted(loading.get(key) or ())
        if names:
            shown = ", ".join(names[:_SHOWN_KEYS]) + (", ..." if len(names) > _SHOWN_KEYS else "")
            found.append(f"{len(names)} {what}: {shown}")
    if found:
        raise InputError(f"{path}: its weights do not fit its config ({type(model).__name__}): {'; '.join(found)}")



def vocabulary_size(model: PreTrainedModel) -> int:
    """The token ids the model's input embedding holds."""
    return cast(torch.nn.Embedding, model.get_input_embeddings()).num_embeddings


def hf_forward(model: PreTrainedModel) -> Callable[[torch.Tensor], torch.Tensor]:
    """Token ids (B, T) -> logits (B, T, V) of a `transformers` causal LM, without its key-value cache."""
    return lambda ids: model(input_ids=ids, use_cache=False).logits


@torch.inference_mode()
def check_causal(name: str, forward: Callable[[torch.Tensor], torch.Tensor], vocabulary: int, device: torch.device,
                 torch_dtype: torch.dtype, config=None) -> None:
    """Refuse a model whose prediction at a position depends on a later token: scoring each token given the ones
    before it needs a causal (left-to-right) model. One forward pass over `_PROBE_PAIRS` pairs of two-token
    sequences that differ only in their second token; then, for what float noise could hide in a low precision,
    the `transformers` configs that are causal only with is_decoder (an encoder's masked LM loads as its causal-LM
    class). `name` names the model in the error."""
    ids = torch.randint(vocabulary, (_PROBE_PAIRS, 2), generator=torch.Generator().manual_seed(0))
    changed = ids.clone()
    changed[:, 1] = (ids[:, 1] + 1) % vocabulary
    logits = forward(torch.cat([ids, changed]).to(device))[:, 0].float()
    shift = (logits[:_PROBE_PAIRS] - logits[_PROBE_PAIRS:]).abs().max().item()
    noise = _CAUSAL_TOLERANCE.get(torch_dtype, _CAUSAL_TOLERANCE[torch.float32]) * max(1.0, logits.abs().max().item())
    if shift > noise:  # NaN logits are left to the scores, which show them
        raise InputError(f"{name}: not a causal language model: its prediction at position 1 changes with a later "
                         f"token (its logits move by up to {shift:.3g} when token 2 changes; float noise stays "
                         f"within {noise:.2g})")
    if config is None:
        return
    if getattr(config, "is_encoder_decoder", False) or (getattr(config, "model_type", None) in _ENCODER_TYPES
                                                       and not getattr(config, "is_decoder", False)):
        kind = ("an encoder-decoder's" if getattr(config, "is_encoder_decoder", False)
                else f"a {config.model_type} encoder's without is_decoder")
        raise InputError(f"{name}: not a causal language model: its config is {kind}, so each position attends to "
                         "the later tokens too")


def _load(path: Path, what: str, auto_class: str, **kwargs):
    """`from_pretrained` offline, without its progress bars or load report (errors stay one line on stderr)."""
    import transformers
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    verbosity = hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        return getattr(transformers, auto_class).from_pretrained(path, local_files_only=True, **kwargs)
    except Exception as error:  # noqa: BLE001 - transformers raises many types for a directory it cannot read
        reason = " ".join(str(error).split())[:240] or type(error).__name__
        raise InputError(f"{path}: cannot load {what} ({reason})") from None
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def _dtype_argument(torch_dtype: torch.dtype) -> dict:
    """`dtype=` (transformers >= 4.56) or `torch_dtype=` (older), so weights load in the asked precision."""
    import transformers
    from packaging.version import Version

    return {"dtype" if Version(transformers.__version__) >= Version("4.56") else "torch_dtype": torch_dtype}


__all__ = ["DTYPES", "HFModel", "check_causal", "check_dtype", "hf_forward", "max_positions", "model_name",
           "open_hf_model", "snapshot_revision", "tokenizer_files", "vocabulary_size"]
