"""Per-document loss sums of a causal language model in memory, from inside any training loop: the scoring path
of `gatedv evaluate --hf` (`trainer.hf.evaluate`) on a model that has not been saved, on its own device and
dtype, with the same numbers and the same provenance as that command gives on the saved copy."""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from gatedv_stats import __version__
from gatedv_stats.core.errors import InputError, ParameterError, RunFailure
from gatedv_stats.core.outputs import check_output_file
from gatedv_stats.core.validation import check_at_least, check_seed
from gatedv_stats.io.lossfiles import read_loss_file, runs_from_frame, write_loss_file
from gatedv_stats.io.runfiles import Run, json_default
from trainer.data.corpus import Corpus
from trainer.hf.evaluate import (
    Batching,
    CausalLM,
    check_window,
    choose_context,
    open_source,
    score_source,
)
from trainer.hf.model import check_causal, hf_forward, max_positions
from trainer.hf.tokenizer import TextTokenizer, data_tokenizer, in_memory_tokenizer
from trainer.run.device import out_of_memory_as

Forward = Callable[[torch.Tensor], torch.Tensor]


def score_model(model, tokenizer, data: str | os.PathLike, out: str | os.PathLike | None = None, *, arm: str,
                seed: int, step: int | None = None, eval_set: str | None = None, stored_ids: bool | None = None,
                context: int | None = None, stride: int | None = None, batch_size: int | None = None,
                device: str | torch.device | None = None, progress: bool = True) -> Run:
    """Score a causal language model in memory on an evaluation set or a corpus, as `gatedv evaluate --hf` scores
    its saved copy: the loss file `out` is written when given, and the run is returned (read back from `out`).

    The model runs where it is, in its own dtype, in `torch.inference_mode()` and eval mode; each of its modules
    gets its training mode back afterwards. It is never moved. (A callable that is neither a module nor a module's
    method is called as it is.)

    Parameters
    ----------
    model
        A `transformers` `PreTrainedModel`, or any `torch.nn.Module` or callable mapping token ids (B, T) to logits
        (B, T, V): a tensor, a tuple holding them first, or a `ModelOutput` with `.logits`.
    tokenizer
        A `transformers` tokenizer, a `tokenizers.Tokenizer`, or None for the data directory's own. Its SHA-256 is
        that of the files it saves as (`save_pretrained`, or `tokenizer.json`).
    data
        A data directory of `gatedv prepare` (its evaluation set `eval_set`, default dev), or any corpus
        `gatedv prepare` reads (its whole documents).
    out
        The loss file to write (`.parquet`); None returns the run without writing it.
    arm, seed, step
        The run's arm and training seed, and the update count of the model, recorded in the loss file.
    stored_ids
        On an evaluation set: None scores its stored token ids when the tokenizer is the data directory's (by
        SHA-256), else the window text encoded by the tokenizer; True the stored ids, refused unless the tokenizer
        encodes every window's text to them; False the window text.
    context, stride
        Tokens per forward pass and tokens scored per further window of a long sequence. Not given: the context is
        a `transformers` model's maximum length (at most 4,096), else the data directory's window; the stride is
        half the context.
    batch_size
        Windows per forward pass; not given, 8, halved each time the device runs out of memory.
    device
        Where the token ids go for a callable that is no `torch.nn.Module` (default CPU). A module is scored on
        the device of its parameters; another device given with it is refused.
    progress
        A progress bar on stderr (on a terminal).
    """
    if not isinstance(arm, str) or not arm.strip():
        raise ParameterError("arm", f"must name the arm (a non-empty name), got {arm!r}")
    check_seed(seed, "seed")
    if step is not None:
        check_at_least("step", step, 0)
    batching = Batching.of(batch_size)
    check_window(context, stride)
    if out is not None:
        check_output_file(out, "out", suffix=".parquet")
    if not callable(model):
        raise ParameterError("model", f"must be a torch.nn.Module or a callable mapping token ids to logits, got "
                                      f"{_type_name(model)}")
    source = open_source(data, eval_set)
    module = _module_of(model)
    text_tokenizer = _tokenizer(tokenizer, source)
    where = _device(model, module, device)
    name = f"model {_type_name(model)}"
    transformers_model = _is_transformers_model(model)
    forward = _checked_forward(name, hf_forward(model) if transformers_model else model)
    with _evaluating(module), out_of_memory_as(lambda cause: RunFailure(
            f"{name}: out of memory on {where} ({cause}); free the device's memory or lower "
            + (f"batch_size ({batching.size}) or context" if batching.size > 1 else "context"))):
        vocabulary, dtype = _probe(name, forward, module, text_tokenizer, where)
        check_causal(name, forward, text_tokenizer.size, where, dtype, model.config if transformers_model else None)
        if context is None and not transformers_model and isinstance(source, Corpus):
            raise ParameterError("context", f"{name} is no transformers model, so it names no maximum length; give "
                                            "the tokens of one forward pass")
        context = choose_context(name, max_positions(model.config) if transformers_model else None, context,
                                 None if isinstance(source, Corpus) else source[0].context)
        lm = CausalLM(name, forward, text_tokenizer, where, vocabulary)
        docs, scored = score_source(lm, source, context=context, stride=stride, batching=batching, progress=progress,
                                    stored_ids=stored_ids)
    meta = {"arm": arm, "seed": int(seed), **({"step": int(step)} if step is not None else {}),
            **_provenance(model, module, text_tokenizer, dtype), **scored, "gatedv_version": __version__}
    if scored["tokenizer_sha256"] != text_tokenizer.sha256:  # the stored ids, which the tokenizer reproduces
        meta["model_tokenizer_sha256"] = text_tokenizer.sha256
    if out is None:
        as_read = json.loads(json.dumps(meta, default=json_default))  # the metadata as a file's reader gives it
        return runs_from_frame(docs, as_read, f"{arm} seed {seed} (scored in memory)")[0]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_loss_file(out, docs, meta)
    return read_loss_file(out)


def _type_name(value: object) -> str:
    """A function's name, a method's with its class, else the name of the value's type."""
    if inspect.ismethod(value):
        return f"{type(value.__self__).__name__}.{value.__name__}"
    return value.__name__ if inspect.isfunction(value) else type(value).__name__


def _module_of(model) -> torch.nn.Module | None:
    """The module whose weights and modes the model is: itself, the module of a bound method, or none."""
    if isinstance(model, torch.nn.Module):
        return model
    owner = getattr(model, "__self__", None)
    return owner if isinstance(owner, torch.nn.Module) else None


def _is_transformers_model(model) -> bool:
    transformers = sys.modules.get("transformers")  # a transformers model means transformers is imported
    return transformers is not None and isinstance(model, transformers.PreTrainedModel)


def _tokenizer(tokenizer, source) -> TextTokenizer:
    if tokenizer is not None:
        return in_memory_tokenizer(tokenizer)
    if isinstance(source, Corpus):
        raise ParameterError("tokenizer", "a corpus is encoded by the model's tokenizer; give it (None means the "
                                          "data directory's own, and a corpus has none)")
    return data_tokenizer(source[0])


def _device(model, module: torch.nn.Module | None, device: str | torch.device | None) -> torch.device:
    """The device of the module's parameters (of a `transformers` model: its `device`), or for a callable without
    any, `device` (default CPU)."""
    own = None
    if _is_transformers_model(model):
        own = model.device
    elif module is not None:
        own = next((tensor.device for tensor in (*module.parameters(), *module.buffers())), None)
    if device is None:
        return own if own is not None else torch.device("cpu")
    try:
        asked = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ParameterError("device", f"not a torch device: {device!r} ({error})") from None
    if own is not None and (asked.type != own.type or asked.index not in (None, own.index)):
        raise ParameterError("device", f"the model is on {own} and is scored there, never moved (got {asked})")
    return own if own is not None else asked


def _checked_forward(name: str, call: Callable) -> Forward:
    """`call` with its output unwrapped to logits (a tuple's first item, a `ModelOutput`'s `.logits`) and checked:
    a floating-point (B, T, V) tensor for token ids (B, T)."""

    def forward(ids: torch.Tensor) -> torch.Tensor:
        output = call(ids)
        if isinstance(output, torch.Tensor):
            logits = output
        elif isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
            logits = output[0]
        elif isinstance(getattr(output, "logits", None), torch.Tensor):
            logits = output.logits
        else:
            got = (f"a {type(output).__name__} starting with a {type(output[0]).__qualname__}"
                   if isinstance(output, (tuple, list)) and output else f"a {type(output).__qualname__}")
            raise InputError(f"{name}: returned {got} for token ids of shape {tuple(ids.shape)}; expected logits "
                             "(a tensor (B, T, V), a tuple holding them first, or a ModelOutput with .logits)")
        if logits.ndim != 3 or tuple(logits.shape[:2]) != tuple(ids.shape):
            raise InputError(f"{name}: its logits have shape {tuple(logits.shape)} for token ids of shape "
                             f"{tuple(ids.shape)}; expected ({ids.shape[0]}, {ids.shape[1]}, V), one row of logits "
                             "per input position")
        if not logits.is_floating_point():
            raise InputError(f"{name}: its logits are {logits.dtype}; expected a floating-point tensor")
        return logits

    return forward


@contextlib.contextmanager
def _evaluating(module: torch.nn.Module | None) -> Iterator[None]:
    """Eval mode inside the block; every submodule's own training mode back after it."""
    modes = [(submodule, submodule.training) for submodule in module.modules()] if module is not None else []
    if module is not None:
        module.eval()
    try:
        yield
    finally:
        for submodule, training in modes:
            submodule.training = training


@torch.inference_mode()
def _probe(name: str, forward: Forward, module: torch.nn.Module | None, tokenizer: TextTokenizer,
           device: torch.device) -> tuple[int, torch.dtype]:
    """(the model's vocabulary, its dtype) from one forward pass of two tokens, which checks its logits; a
    vocabulary smaller than the tokenizer's is refused."""
    logits = forward(torch.zeros((1, 2), dtype=torch.long, device=device))
    vocabulary = int(logits.shape[-1])
    if vocabulary < tokenizer.size:
        raise InputError(f"{name}: its vocabulary ({vocabulary} logits) is smaller than its tokenizer's "
                         f"({tokenizer.size} entries), so some of the tokenizer's ids have no prediction")
    parameters = module.parameters() if module is not None else iter(())
    dtype = next((parameter.dtype for parameter in parameters if parameter.is_floating_point()), logits.dtype)
    return vocabulary, dtype


def state_dict_sha256(module: torch.nn.Module) -> str:
    """SHA-256 of a module's state dict: each entry in name order, its name, dtype, shape and bytes."""
    digest = hashlib.sha256()
    for key, value in sorted(module.state_dict().items()):
        if not isinstance(value, torch.Tensor):  # a module's extra state
            digest.update(json.dumps([key, repr(value)]).encode("utf-8"))
            continue
        digest.update(json.dumps([key, str(value.dtype), list(value.shape)]).encode("utf-8"))
        digest.update(value.detach().contiguous().reshape(-1).view(torch.uint8).cpu().numpy().data)
    return digest.hexdigest()


def _provenance(model, module: torch.nn.Module | None, tokenizer: TextTokenizer, dtype: torch.dtype) -> dict:
    """What identifies the model in memory: its class, its weights (the state dict's SHA-256) and dtype, and its
    tokenizer's files; the versions of the libraries involved."""
    named = type(module) if module is not None else model if inspect.isfunction(model) else type(model)
    provenance = {
        "model_class": f"{named.__module__}.{named.__qualname__}",  # a function without a module: the function
        "model_type": getattr(getattr(model, "config", None), "model_type", None) if _is_transformers_model(model)
        else None,
        "model_state_sha256": state_dict_sha256(module) if module is not None else None,
        "dtype": str(dtype).removeprefix("torch."),
        "tokenizer_files": tokenizer.files,
        "torch_version": torch.__version__,
    }
    transformers = sys.modules.get("transformers")
    if transformers is not None:
        provenance["transformers_version"] = transformers.__version__
    return provenance


__all__ = ["score_model", "state_dict_sha256"]
