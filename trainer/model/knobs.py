"""Knobs of the model on the command line and in experiment files, and the variants made of them.

A knob is a field of `ModelConfig` that a variant may change (docs/method.md §2); `--knob KNOB=VALUE` on
`gatedv train` / `gatedv params` and the keys of a `[variants.NAME]` table in an experiment file set them.
The rules of a variant name:

* A preset name (`VARIANTS`) alone is that preset. Knobs that leave it as it is are accepted and dropped;
  knobs that change it are an error, because the changed model would carry the preset's name.
* Any other name (letters, digits, '.', '_', '-') is a new variant: the baseline of its size plus its knobs,
  at least one of them.
* `d_ff` is a knob of its own: a positive integer, or `matched` for the width that gives the `ffn` kind the
  parameters of the size's SwiGLU (the 2/3 rule, `matched_ffn_width`). Without it every kind keeps the
  size's width.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from gatedv_stats.core.errors import InputError, ParameterError
from trainer.model.knob_values import (
    MATCHED,
    NAME,
    RESERVED_NAMES,
    Knob,
    KnobError,
    check_values,
    parse_checked_options,
)
from trainer.model.sizes import size_config
from trainer.model.transformer import (
    ACTIVATIONS,
    CONFIGS,
    FFN_KINDS,
    OUTPUT_GATES,
    VALUE_ACTIVATIONS,
    VALUE_GATES,
    VARIANTS,
    ModelConfig,
    matched_ffn_width,
    model_config,
)

KNOBS: dict[str, Knob] = {knob.name: knob for knob in (
    Knob("value_act", str, "value activation φ(V) after the QKV split (gatedv: silu)", VALUE_ACTIVATIONS),
    Knob("query_act", str, "query activation, before RoPE (q-silu: silu)", ACTIVATIONS),
    Knob("key_act", str, "key activation, before RoPE", ACTIVATIONS),
    Knob("value_gate", str, "gate on V: glu (V ⊙ SiLU(U W_G)) or headwise (σ per key/value head, G2)", VALUE_GATES),
    Knob("output_gate", str, "gate on the attention output before W_O: elementwise sigmoid / softplus (G1) or "
         "headwise (σ per head)", OUTPUT_GATES),
    Knob("output_act", str, "activation on the concatenated head outputs before W_O (o-silu: silu)", ACTIVATIONS),
    Knob("ffn", str, "feed-forward kind; gelu and relu are ungated (two matrices, not three)", FFN_KINDS),
    Knob("d_ff", int, "feed-forward hidden width; matched: the size's SwiGLU parameter count (2/3 rule)"),
    Knob("n_kv_heads", int, "key/value heads (GQA); must divide the query heads"),
    Knob("value_head_dim", int, "per-head value width (glu-reduced narrows it)"),
    Knob("qk_norm", bool, "RMSNorm over each query and key head before RoPE"),
)}


def check_knobs(knobs: Mapping[str, object]) -> dict:
    """Every knob of `knobs` checked and typed, in `KNOBS` order; InputError "KNOB: ..." for the first bad one."""
    return check_values(knobs, KNOBS, "knob")


def parse_knob_options(options: Sequence[str]) -> dict:
    """The knobs of repeated `--knob KNOB=VALUE` options; a malformed, unknown, repeated or bad one is an
    InputError naming it."""
    return parse_checked_options(options, "--knob", "KNOB=VALUE", "gatedv params --knobs lists the knobs", check_knobs)


def effective_knobs(cfg: ModelConfig) -> dict:
    """Every knob's value in `cfg`, with key/value heads and value head width resolved from their defaults."""
    values = {name: getattr(cfg, name) for name in KNOBS}
    values["n_kv_heads"], values["value_head_dim"] = cfg.kv_heads, cfg.v_head_dim
    return values


def differing_knobs(cfg: ModelConfig, size: str, size_knobs: Mapping[str, object] | None = None) -> dict:
    """The knobs of `cfg` that differ from the baseline of `size` (with its `size_knobs`): what the variant is."""
    baseline = effective_knobs(size_config(size, size_knobs))
    return {name: value for name, value in effective_knobs(cfg).items() if value != baseline[name]}


def resolve_variant(size: str, variant: str, knobs: Mapping[str, object] | None = None,
                    size_knobs: Mapping[str, object] | None = None) -> tuple[ModelConfig, dict]:
    """The model config of `variant` at `size` (a preset, or a size of one's own with its `size_knobs`,
    `trainer.model.sizes`) with `knobs`, and the knobs a run records ({} for a preset)."""
    knobs = check_knobs(knobs or {})
    base = size_config(size, size_knobs)  # names an unknown size
    if variant in VARIANTS:
        preset = model_config(base, variant)
        preset_knobs = effective_knobs(preset)
        changed = effective_knobs(_with_knobs(preset, knobs, base, size))
        changes = ", ".join(f"{name}={value}" for name, value in changed.items() if value != preset_knobs[name])
        if changes:
            raise InputError(f"variant {variant!r} is a preset and the knobs change it ({changes}); name the new "
                             "model (a new name is the baseline plus its knobs)")
        return preset, {}
    if not knobs:
        raise ParameterError("variant", f"unknown variant {variant!r} (presets: {', '.join(VARIANTS)}; a new name "
                                        "needs at least one knob)")
    if not NAME.fullmatch(variant) or variant in RESERVED_NAMES:
        raise InputError(f"variant {variant!r}: a new name is up to 64 letters, digits, '.', '_' or '-', starting "
                         "with a letter or digit, and not 'all'")
    return dataclasses.replace(_with_knobs(base, knobs, base, size), variant=variant), knobs


def _with_knobs(cfg: ModelConfig, knobs: dict, base: ModelConfig, size: str) -> ModelConfig:
    fields = dict(knobs)
    if fields.get("d_ff") == MATCHED:
        fields["d_ff"] = matched_ffn_width(base.d_ff, base.ffn, fields.get("ffn", cfg.ffn))
    if cfg.n_heads % fields.get("n_kv_heads", 1):
        raise KnobError(f"n_kv_heads: {fields['n_kv_heads']} does not divide the {size} model's {cfg.n_heads} query "
                        "heads")
    return dataclasses.replace(cfg, **fields)


def knobs_listing() -> dict:
    """Every knob with its allowed values, its baseline value and what it does (`gatedv params --knobs`)."""
    small = effective_knobs(CONFIGS["small"])
    size_dependent = ("d_ff", "n_kv_heads", "value_head_dim")
    return {name: {"allowed": knob.allowed, "baseline": "the size's" if name in size_dependent else small[name],
                   "help": knob.help} for name, knob in KNOBS.items()}


def knobs_summary() -> str:
    """The knobs as an aligned text table, then the naming rules."""
    def shown(value: object) -> str:
        return str(value).lower() if isinstance(value, bool) else str(value)

    rows = [("knob", "values", "baseline", "")]
    rows += [(name, entry["allowed"], shown(entry["baseline"]), entry["help"])
             for name, entry in knobs_listing().items()]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[3] for row in rows]
    lines.append("--knob KNOB=VALUE (repeatable) on gatedv train and params, or [variants.NAME] tables in an "
                 "experiment file: a new variant name is the baseline of its size plus its knobs; a preset takes "
                 "only knobs that leave it as it is.")
    return "\n".join(line.rstrip() for line in lines)
