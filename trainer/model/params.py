"""Table 1: the model setup of each size and the trainable-parameter count of each variant (docs/method.md §2),
for the presets and for sizes of one's own (`trainer.model.sizes`).

Every model is built on the meta device: no memory, no initialisation, exact counts in milliseconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gatedv_stats.core.errors import ParameterError
from trainer.model.knobs import differing_knobs, parse_knob_options, resolve_variant
from trainer.model.sizes import parse_size_knob_options, size_config
from trainer.model.transformer import CONFIGS, VARIANTS, build_model, count_parameters


@dataclass(frozen=True)
class ParameterTable:
    """The model setup of each size (Table 1) and the trainable-parameter count of each variant."""

    setups: dict[str, dict]  # size -> layers, width, heads, head width, d_ff, vocabulary, context, norm ε, RoPE base
    counts: dict[str, dict[str, int]]  # size -> variant -> trainable parameters
    knobs: dict[str, dict[str, dict]]  # size -> variant -> the knobs that differ from the size's baseline
    given_knobs: dict[str, dict] = field(default_factory=dict)  # new variant -> its knobs as given

    def to_dict(self) -> dict:
        return {size: {**self.setups[size], "parameters": self.counts[size], "knobs": self.knobs[size]}
                for size in self.setups}

    def summary(self) -> str:
        sizes = list(self.setups)
        rows = [
            ("layers / width", lambda s: f"{s['n_layers']} / {s['d_model']}"),
            ("heads / head width", lambda s: f"{s['n_heads']} / {s['head_dim']}"),
            ("SwiGLU hidden width d_ff", lambda s: f"{s['d_ff']:,}"),
            ("vocabulary", lambda s: f"{s['vocab_size']:,}"),
            ("context", lambda s: f"{s['seq_len']}"),
            ("RMSNorm eps", lambda s: f"{s['norm_eps']:g}"),
            ("RoPE base", lambda s: f"{s['rope_base']:g}"),
        ]
        table = [("", *sizes)] + [(label, *(fmt(self.setups[size]) for size in sizes)) for label, fmt in rows]
        table.append(("trainable parameters", *("" for _ in sizes)))
        for variant in self.counts[sizes[0]]:
            given = ", ".join(f"{name}={value}" for name, value in self.given_knobs.get(variant, {}).items())
            label = f"  {variant} ({given})" if given else f"  {variant}"
            table.append((label, *(f"{self.counts[size][variant]:,}" for size in sizes)))
        widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
        return "\n".join(
            "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
            for row in table
        )


def variant_parameters(size: str, variant: str, knobs: Mapping[str, object] | None = None,
                       size_knobs: Mapping[str, object] | None = None) -> tuple[int, dict]:
    """Trainable parameters of `variant` (with `knobs`) at `size` (with `size_knobs`), and its knobs that differ
    from the baseline."""
    cfg, _ = resolve_variant(size, variant, knobs, size_knobs)
    return count_parameters(build_model(cfg, 0, "meta")), differing_knobs(cfg, size, size_knobs)


def parameter_table(sizes: Sequence[str], variants: Sequence[str],
                    knobs: Mapping[str, Mapping[str, object]] | None = None,
                    size_knobs: Mapping[str, Mapping[str, object]] | None = None) -> ParameterTable:
    """Setups and counts of `variants` at `sizes`; `knobs` maps a variant name to its knobs (a new variant
    needs them, a preset takes only knobs that leave it as it is; see `trainer.model.knobs`), `size_knobs` a size
    name to its size knobs (`trainer.model.sizes`)."""
    knobs, size_knobs = knobs or {}, size_knobs or {}
    setups, counts, differing = {}, {}, {}
    for size in sizes:
        cfg = size_config(size, size_knobs.get(size))
        setups[size] = {
            "n_layers": cfg.n_layers,
            "d_model": cfg.d_model,
            "n_heads": cfg.n_heads,
            "head_dim": cfg.head_dim,
            "d_ff": cfg.d_ff,
            "vocab_size": cfg.vocab_size,
            "seq_len": cfg.seq_len,
            "norm_eps": cfg.norm_eps,
            "rope_base": cfg.rope_base,
        }
        described = {variant: variant_parameters(size, variant, knobs.get(variant), size_knobs.get(size))
                     for variant in variants}
        counts[size] = {variant: count for variant, (count, _) in described.items()}
        differing[size] = {variant: changed for variant, (_, changed) in described.items()}
    given = {variant: dict(knobs[variant]) for variant in variants if knobs.get(variant) and variant not in VARIANTS}
    return ParameterTable(setups=setups, counts=counts, knobs=differing, given_knobs=given)


def requested_table(config: str = "all", variant: str = "all", knobs: Sequence[str] = (),
                    size_knobs: Sequence[str] = ()) -> ParameterTable:
    """The table `gatedv params` prints: `config` is a size or all (small and medium), `variant` a variant name or
    all, `knobs` KNOB=VALUE settings that make `variant` a new one (or leave a preset as it is), `size_knobs`
    KEY=VALUE settings that make `config` a size of one's own."""
    parsed_sizes = parse_size_knob_options(size_knobs)
    if config == "all" and parsed_sizes:
        raise ParameterError("size_knobs", "needs one --config name (a new one, or the preset they leave as it is), "
                                           "not all")
    if config != "all" and config not in CONFIGS and not parsed_sizes:
        raise ParameterError("config", f"unknown size {config!r} (choose from {', '.join(CONFIGS)}, all; a new "
                                       "name needs at least one --size-knob)")
    parsed = parse_knob_options(knobs)
    if variant == "all" and parsed:
        raise ParameterError("knobs", "needs one --variant name (a new one, or the preset they leave as it is), "
                                      "not all")
    if variant != "all" and variant not in VARIANTS and not parsed:
        raise ParameterError("variant", f"unknown variant {variant!r} (choose from {', '.join(VARIANTS)}, all; a new "
                                        "name needs at least one --knob)")
    return parameter_table(["small", "medium"] if config == "all" else [config],
                           list(VARIANTS) if variant == "all" else [variant], {variant: parsed} if parsed else None,
                           {config: parsed_sizes} if parsed_sizes else None)
