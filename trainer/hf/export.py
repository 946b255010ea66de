"""Baseline-family models as `transformers` `LlamaForCausalLM` (the numerical reference of docs/method.md §2).

Llama expresses linear values, queries and keys, no value or output gate, no QK-norm, equal query and
value head widths and a gated feed-forward whose gate activation Llama names (SwiGLU, GEGLU, GLU, ReGLU);
GQA is fine. Anything else is refused with a one-line InputError.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

from gatedv_stats.core.atomic import NO_SPACE_ERRNOS, current_umask, is_no_space, no_space_message
from gatedv_stats.core.errors import InputError, NoSpaceError
from gatedv_stats.core.files import file_sha256
from trainer.data.prepared import MANIFEST, TOKENIZER
from trainer.model.transformer import ModelConfig, Transformer

# Our gated feed-forward kinds and the `hidden_act` Llama applies to its gate projection.
_LLAMA_ACT = {"swiglu": "silu", "geglu": "gelu", "glu": "sigmoid", "reglu": "relu"}
# The end-of-text and padding token of an exported tokenizer: our BPE has no special entry, so the NUL byte's
# token (byte-level spelling "Ā") stands for it; no text holds a NUL, so as a stop string it never cuts a
# generation. There is no beginning-of-sequence token: the model was never trained after one, and
# `transformers` and the harness then condition an empty context on the end-of-text token.
END_OF_TEXT = "\u0100"
# A special token's text is matched in the input before the bytes are encoded: "Ā" in a text would become the
# end-of-text token. So special tokens are named but their text is split like any other (`transformers`'
# split_special_tokens, the `tokenizers` library's encode_special_tokens): every text is encoded as its bytes, and
# only a NUL byte as the end-of-text token.
SPLIT_SPECIAL_TOKENS = True


def llama_incompatibilities(cfg: ModelConfig) -> list[str]:
    """The knobs of `cfg` a LlamaForCausalLM cannot express (empty when it can)."""
    problems = [
        f"{knob}={getattr(cfg, knob)}"
        for knob, plain in (
            ("value_act", "linear"),
            ("query_act", "linear"),
            ("key_act", "linear"),
            ("value_gate", "none"),
            ("output_gate", "none"),
            ("output_act", "linear"),
            ("qk_norm", False),
        )
        if getattr(cfg, knob) != plain
    ]
    if cfg.v_head_dim != cfg.head_dim:
        problems.append(f"value_head_dim={cfg.value_head_dim}")
    if cfg.ffn not in _LLAMA_ACT:
        problems.append(f"ffn={cfg.ffn}")
    return problems


def llama_config(cfg: ModelConfig):
    """The `transformers.LlamaConfig` of a baseline-family config (tied embeddings, bias-free)."""
    from transformers import LlamaConfig

    problems = llama_incompatibilities(cfg)
    if problems:
        raise InputError(f"variant {cfg.variant!r}: LlamaForCausalLM cannot express {', '.join(problems)}")
    return LlamaConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.d_model,
        intermediate_size=cfg.d_ff,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.kv_heads,
        head_dim=cfg.head_dim,
        hidden_act=_LLAMA_ACT[cfg.ffn],
        max_position_embeddings=cfg.seq_len,
        rms_norm_eps=cfg.norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_base},
        tie_word_embeddings=True,
        attention_bias=False,
        mlp_bias=False,
        attention_dropout=0.0,
        bos_token_id=None,
        eos_token_id=None,
        use_cache=False,
    )


def llama_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    """Our logical weights under Llama's parameter names (contiguous copies, lm_head tied to the embedding)."""
    weights = model.logical_weights()
    names = {"embed": "model.embed_tokens.weight", "norm": "model.norm.weight"}
    hf_suffix = {
        "attn_norm": "input_layernorm.weight",
        "attn.w_q": "self_attn.q_proj.weight",
        "attn.w_k": "self_attn.k_proj.weight",
        "attn.w_v": "self_attn.v_proj.weight",
        "attn.w_o": "self_attn.o_proj.weight",
        "ffn_norm": "post_attention_layernorm.weight",
        "ffn.w_1": "mlp.gate_proj.weight",
        "ffn.w_2": "mlp.up_proj.weight",
        "ffn.w_3": "mlp.down_proj.weight",
    }
    for i in range(model.config.n_layers):
        names |= {f"layers.{i}.{ours}": f"model.layers.{i}.{theirs}" for ours, theirs in hf_suffix.items()}
    return {names[name]: tensor.detach().clone().contiguous() for name, tensor in weights.items()}


def to_llama(model: Transformer):
    """A `LlamaForCausalLM` (FP32, SDPA attention, eval mode) holding the weights of `model`."""
    from transformers import LlamaForCausalLM

    config = llama_config(model.config)
    config._attn_implementation = "sdpa"
    device = model.embed.weight.device
    with torch.device("meta"):
        llama = LlamaForCausalLM(config)
    llama.to_empty(device=device)
    missing, unexpected = llama.load_state_dict(llama_state_dict(model), strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise RuntimeError(f"Llama weight mapping mismatch: missing {missing}, unexpected {unexpected}")
    llama.tie_weights()
    # Non-persistent buffers (the rotary inverse frequencies) were left empty by to_empty.
    llama.model.rotary_emb = type(llama.model.rotary_emb)(config).to(device)
    return llama.eval()


def export_hf(checkpoint: str | os.PathLike, out_dir: str | os.PathLike, *,
              tokenizer: str | os.PathLike | None = None) -> Path:
    """Write a baseline-family checkpoint as a Llama directory (config.json + model.safetensors) with the
    tokenizer it was trained with (tokenizer.json + tokenizer_config.json + special_tokens_map.json,
    loadable by `AutoTokenizer`; end of text and padding named, no BOS).

    `tokenizer`: a tokenizer.json or a data directory; default: the data directory the run trained on (none
    for a checkpoint without a run record). The directory appears whole or not at all: it is written beside the
    target and renamed into place.
    """
    from trainer.run.checkpoint import check_finite_weights, load_checkpoint

    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"{out}: output directory exists and is not empty")
    loaded = load_checkpoint(checkpoint)
    check_finite_weights(checkpoint, loaded)
    tokenizer_path = _tokenizer_source(Path(checkpoint), loaded.extra, tokenizer)
    if tokenizer_path is not None:
        _check_tokenizer(tokenizer_path, loaded.config.vocab_size)
    llama = to_llama(loaded.model)
    if tokenizer_path is not None:
        from tokenizers import Tokenizer

        end = end_of_text_id(Tokenizer.from_file(str(tokenizer_path)), str(tokenizer_path))
        for config in (llama.config, llama.generation_config):
            config.eos_token_id = config.pad_token_id = end
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        llama.save_pretrained(tmp, safe_serialization=True)
        if tokenizer_path is not None:
            shutil.copyfile(tokenizer_path, tmp / TOKENIZER)  # byte for byte: its SHA-256 names the tokenizer
            _write_tokenizer_config(tmp, loaded.config.seq_len)
        mask = current_umask()  # the modes a plain mkdir and open() would give, not mkdtemp's owner-only ones
        for path in tmp.iterdir():
            os.chmod(path, 0o666 & ~mask)
        os.chmod(tmp, 0o777 & ~mask)
        os.replace(tmp, out)
    except BaseException as error:
        shutil.rmtree(tmp, ignore_errors=True)
        # safetensors reports a full disk as its own error, with the OS error's number in its text
        if is_no_space(error) or any(f"(os error {number})" in str(error) for number in NO_SPACE_ERRNOS):
            full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            raise NoSpaceError(no_space_message(out, full, existed=False), str(out), full.strerror) from None
        raise
    return out



def export_summary(path: Path) -> str:
    """The line `gatedv export-hf` prints for the directory it wrote, saying when it holds no tokenizer."""
    note = "" if (path / TOKENIZER).is_file() else (" (no tokenizer: the checkpoint names no data directory; add one "
                                                    "with --tokenizer)")
    return f"wrote {path}{note}"


def _write_tokenizer_config(directory: Path, max_length: int) -> None:
    """`tokenizer_config.json` and `special_tokens_map.json` for `PreTrainedTokenizerFast`: end-of-text and
    padding named but never matched in a text (`SPLIT_SPECIAL_TOKENS`), no BOS added at encode time (the
    tokenizer.json has no post-processor)."""
    special = {"eos_token": END_OF_TEXT, "pad_token": END_OF_TEXT}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_length,
              "clean_up_tokenization_spaces": False, "add_bos_token": False, "add_eos_token": False,
              "split_special_tokens": SPLIT_SPECIAL_TOKENS, **special}
    for name, content in (("tokenizer_config.json", config), ("special_tokens_map.json", special)):
        (directory / name).write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")


def end_of_text_id(tokenizer, source: str) -> int:
    """The id of the end-of-text token (the NUL byte's) of a `tokenizers.Tokenizer`."""
    token = tokenizer.token_to_id(END_OF_TEXT)
    if token is None:
        raise InputError(f"{source}: not a byte-level tokenizer (no token for the NUL byte, the end-of-text token)")
    return int(token)


def _tokenizer_source(checkpoint: Path, extra: dict, tokenizer: str | os.PathLike | None) -> Path | None:
    """The tokenizer.json to export: the one given, else the run's data directory's (unchanged since training)."""
    if tokenizer is not None:
        path = Path(tokenizer)
        path = path / TOKENIZER if path.is_dir() else path
        if not path.is_file():
            raise InputError(f"{tokenizer}: no tokenizer.json there")
        return path
    run = extra.get("run")
    if not isinstance(run, dict) or not run.get("data"):
        return None
    data = Path(run["data"])
    if not (data / TOKENIZER).is_file() or not (data / MANIFEST).is_file() \
            or file_sha256(data / MANIFEST) != extra.get("data_manifest_sha256"):
        raise InputError(f"{checkpoint}: the data directory it was trained on ({data}) is gone or has changed; "
                         "name its tokenizer with --tokenizer")
    return data / TOKENIZER


def _check_tokenizer(path: Path, vocab_size: int) -> None:
    from tokenizers import Tokenizer

    try:
        size = Tokenizer.from_file(str(path)).get_vocab_size(with_added_tokens=True)
    except Exception as error:  # noqa: BLE001 - tokenizers raises plain Exception for malformed files
        raise InputError(f"{path}: not a readable tokenizer.json ({str(error).splitlines()[0]})") from None
    if size != vocab_size:
        raise InputError(f"{path}: the tokenizer has {size} entries, the model's vocabulary {vocab_size}")
