"""Sizes of one's own: `--size-knob KEY=VALUE` on `gatedv train` / `params` / `sweep` and `[sizes.NAME]` tables in an
experiment file (docs/method.md §2, "Sizes and contexts").

A size is the baseline model of a run (depth, width, heads, feed-forward width, context, vocabulary, RoPE base)
and its recipe defaults (batch, warmup, updates, peak rate, curve interval); the variants' knobs then act on it.
The rules of a size name mirror those of a variant name (`trainer.model.knobs`):

* A preset (`tiny`, `small`, `medium`) alone is that preset. Model size knobs that leave it as it is are accepted
  and dropped; knobs that change its model are an error (the changed model would carry the preset's name).
  Recipe knobs are taken with any name: they change the run's defaults, not its model.
* Any other name (letters, digits, '.', '_', '-') is a new size: the preset `base` (default `small`) with its
  knobs, at least one of them; its recipe defaults are the base's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from gatedv_stats.core.errors import InputError, ParameterError
from trainer.model.knob_values import NAME, RESERVED_NAMES, Knob, check_values, parse_checked_options
from trainer.model.transformer import CONFIGS, ModelConfig

DEFAULT_BASE = "small"
DEFAULT_BATCH_SIZE = 8  # sequences per update, every preset's
# The knobs of the model (ModelConfig fields), then `base`, then the recipe's (RunSpec fields).
MODEL_SIZE_KNOBS = ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "seq_len", "vocab_size", "rope_base")
RECIPE_KNOBS = ("batch_size", "updates", "warmup", "lr", "eval_every")

SIZE_KNOBS: dict[str, Knob] = {knob.name: knob for knob in (
    Knob("n_layers", int, "Transformer blocks L"),
    Knob("d_model", int, "residual width d (a multiple of n_heads, with an even head width)"),
    Knob("n_heads", int, "query heads H"),
    Knob("n_kv_heads", int, "key/value heads of the baseline (GQA); must divide n_heads"),
    Knob("d_ff", int, "SwiGLU hidden width"),
    Knob("seq_len", int, "context: tokens per training window (gatedv prepare --context must match)"),
    Knob("vocab_size", int, "embedding rows (at least the data's tokenizer size)"),
    Knob("rope_base", float, "rotary base θ (10,000 as Llama; larger for long contexts)"),
    Knob("base", str, "the preset a new size starts from (model and recipe)", tuple(CONFIGS)),
    Knob("batch_size", int, "recipe: sequences per update (global batch)"),
    Knob("updates", int, "recipe: updates"),
    Knob("warmup", int, "recipe: warmup updates", minimum=0),
    Knob("lr", float, "recipe: peak learning rate"),
    Knob("eval_every", int, "recipe: development NLL and checkpoint every k updates"),
)}


def check_size_knobs(knobs: Mapping[str, object]) -> dict:
    """Every size knob of `knobs` checked and typed, in `SIZE_KNOBS` order; InputError "KEY: ..." for a bad one."""
    return check_values(knobs, SIZE_KNOBS, "size knob")


def parse_size_knob_options(options: Sequence[str]) -> dict:
    """The size knobs of repeated `--size-knob KEY=VALUE` options; a malformed, unknown, repeated or bad one is an
    InputError naming it."""
    return parse_checked_options(options, "--size-knob", "KEY=VALUE", "gatedv params --size-knobs lists them",
                                 check_size_knobs)


def size_base(size: str, size_knobs: Mapping[str, object] | None = None) -> str:
    """The preset whose recipe defaults the size takes: the preset itself, or a new size's `base`."""
    return size if size in CONFIGS else str((size_knobs or {}).get("base", DEFAULT_BASE))


def resolve_size(size: str, size_knobs: Mapping[str, object] | None = None) -> tuple[ModelConfig, dict]:
    """The baseline config of `size` with `size_knobs`, and the size knobs a run records (a preset's model knobs
    that leave it as it is are dropped)."""
    knobs = check_size_knobs(size_knobs or {})
    model = {name: knobs[name] for name in MODEL_SIZE_KNOBS if name in knobs}
    if size in CONFIGS:
        if "base" in knobs:
            raise InputError(f"size {size!r} is a preset: base is a knob of a new size only")
        preset = {**{name: getattr(CONFIGS[size], name) for name in model}, "n_kv_heads": CONFIGS[size].kv_heads}
        changes = ", ".join(f"{name}={value}" for name, value in model.items() if value != preset[name])
        if changes:
            raise InputError(f"size {size!r} is a preset and the size knobs change it ({changes}); name the new "
                             "size (a new name is its base plus its knobs)")
        return CONFIGS[size], {name: value for name, value in knobs.items() if name in RECIPE_KNOBS}
    if not knobs:
        raise ParameterError("config", f"unknown size {size!r} (presets: {', '.join(CONFIGS)}; a new name needs at "
                                       "least one size knob)")
    if not NAME.fullmatch(size) or size in RESERVED_NAMES:
        raise InputError(f"size {size!r}: a new name is up to 64 letters, digits, '.', '_' or '-', starting with a "
                         "letter or digit, and not 'all'")
    try:
        config = dataclasses.replace(CONFIGS[size_base(size, knobs)], **model)
    except InputError as error:  # a combination the model cannot take, e.g. a width the heads do not divide
        raise InputError(f"size {size!r}: {error}") from None
    return config, knobs


def size_config(size: str, size_knobs: Mapping[str, object] | None = None) -> ModelConfig:
    """The baseline model config of `size` with `size_knobs` (see `resolve_size`)."""
    return resolve_size(size, size_knobs)[0]


def size_knobs_summary() -> str:
    """The size knobs as an aligned text table, then the naming rules (`gatedv params --size-knobs`)."""
    rows = [("size knob", "values", "")] + [(name, knob.allowed, knob.help) for name, knob in SIZE_KNOBS.items()]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row[:2], widths)) + "  " + row[2] for row in rows]
    lines.append("--size-knob KEY=VALUE (repeatable) on gatedv train, params and sweep, or a [sizes.NAME] table in an "
                 "experiment file: a new --config name is its base (default small) plus its knobs; a preset takes "
                 "recipe knobs and only model knobs that leave it as it is.")
    return "\n".join(line.rstrip() for line in lines)


def size_knobs_listing() -> dict:
    """Every size knob with its allowed values and what it does (`gatedv params --size-knobs --json`)."""
    return {name: {"allowed": knob.allowed, "help": knob.help} for name, knob in SIZE_KNOBS.items()}
