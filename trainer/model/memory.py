"""Per-GPU memory of one training step, estimated from the model config and the batch (`gatedv params --memory`).

FP32 training with AdamW holds 16 bytes per parameter (weights, gradients, two moment buffers) and, per micro-batch,
the activations autograd saves for the backward pass. Those are counted tensor by tensor from the model's forward
pass (`trainer.model.transformer`): per token and block, the residual input, RMSNorm's normalised input, inverse RMS
and output (twice), the fused QKV output, the rotated queries and keys, the attention output and its log-sum-exp,
and the feed-forward's fused input map, activation and product; after the blocks the final norm's, the readout's
gradient with respect to the hidden states, its (vocabulary × width) weight gradient, and the token ids. With
activation checkpointing only each block's input is kept, and one block's activations exist again while its backward
pass runs. The readout adds one chunk of logits at a time. `tests/trainer/test_memory_lean.py` checks the activation
count against the bytes of every tensor autograd saves in a real step on the CPU (`torch.autograd.graph.
saved_tensors_hooks`, each storage once).

Not counted: the allocator's fragmentation and caching, CUDA's context and kernels' workspaces (a few hundred MiB on
a GPU), and data-parallel communication buffers. Under bf16 autocast the activations are mostly half as large, so the
FP32 figure is an upper bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gatedv_stats.core.errors import InputError
from trainer.model.knobs import parse_knob_options, resolve_variant
from trainer.model.sizes import DEFAULT_BATCH_SIZE, parse_size_knob_options
from trainer.model.transformer import (
    GATED_FFN_KINDS,
    READOUT_CHUNK,
    READOUT_CHUNK_DEFAULT,
    ModelConfig,
    build_model,
    count_parameters,
)

FLOAT_BYTES = 4
STATE_BYTES_PER_PARAMETER = 16  # FP32 weight, gradient and AdamW's two moments
GIB = 1024**3


def block_floats_per_token(cfg: ModelConfig) -> int:
    """Floats one block saves for its backward pass per token."""
    q_width, k_width = cfg.n_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    v_width, out_width = cfg.kv_heads * cfg.v_head_dim, cfg.n_heads * cfg.v_head_dim
    norms = 2 * (3 * cfg.d_model + 1)  # input, normalised input, output, inverse RMS: before attention and the FFN
    attention = (q_width + k_width + v_width) + q_width + k_width + out_width + cfg.n_heads
    feed_forward = 4 * cfg.d_ff if cfg.ffn in GATED_FFN_KINDS else 2 * cfg.d_ff
    return norms + attention + feed_forward + _variant_floats(cfg, v_width, out_width)


def _variant_floats(cfg: ModelConfig, v_width: int, out_width: int) -> int:
    """The variants' extra saved tensors: a value activation's output, a gate's map, its activation and the gated
    product, QK-norm's statistics (query/key activations save nothing new: the rotation keeps their outputs)."""
    extra = {"linear": 0, "silu": v_width, "xtanh": 2 * v_width}.get(cfg.value_act, 2 * v_width)
    extra += {"none": 0, "glu": 3 * v_width, "headwise": 2 * cfg.kv_heads + v_width}[cfg.value_gate]
    extra += 0 if cfg.output_gate == "none" else 2 * out_width
    extra += out_width if cfg.output_act == "silu" else 0
    return extra + (3 * (cfg.n_heads + cfg.kv_heads) * cfg.head_dim // 2 if cfg.qk_norm else 0)


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one training step holds on one device (see the module docstring for what is counted)."""

    parameters: int
    micro_batch: int  # sequences per forward pass on one device
    seq_len: int
    checkpoint_activations: bool
    weights_and_optimizer: int  # weights, gradients, AdamW's moments
    activations: int  # saved for the backward pass (with checkpointing: block inputs, plus one block recomputed)
    readout: int  # one chunk of logits

    @property
    def total(self) -> int:
        return self.weights_and_optimizer + self.activations + self.readout

    def to_dict(self) -> dict:
        return {**self.__dict__, "total": self.total}


def activation_bytes(cfg: ModelConfig, micro_batch: int, checkpoint_activations: bool = False) -> int:
    """Bytes autograd saves in the forward pass of `micro_batch` full-context windows (with checkpointing: the block
    inputs and one block's activations, the most held while the backward pass recomputes a block)."""
    tokens = micro_batch * cfg.seq_len
    per_block = block_floats_per_token(cfg)
    blocks = cfg.n_layers * cfg.d_model + per_block if checkpoint_activations else cfg.n_layers * per_block
    after_blocks = 2 * cfg.d_model + 1 + cfg.d_model  # final norm's input and statistics; the readout's gradient
    ids = 8 * micro_batch * (cfg.seq_len + 1)  # the int64 window the inputs are a view of
    return FLOAT_BYTES * (tokens * (blocks + after_blocks) + cfg.vocab_size * cfg.d_model) + ids


def estimate_memory(cfg: ModelConfig, parameters: int, batch_size: int, *, grad_accum: int = 1, devices: int = 1,
                    checkpoint_activations: bool = False, device_type: str = "cuda") -> MemoryEstimate:
    """Per-device memory of a step of `batch_size` sequences over `devices` data-parallel processes, each in
    `grad_accum` micro-batches."""
    for name, value in (("--batch-size", batch_size), ("--grad-accum", grad_accum), ("--gpus", devices)):
        if value < 1:
            raise InputError(f"{name}: must be at least 1, got {value}")
    if batch_size % (grad_accum * devices):
        raise InputError(f"--grad-accum: {grad_accum} micro-batches on {devices} device(s) do not divide the batch "
                         f"of {batch_size} sequences")
    micro_batch = batch_size // (grad_accum * devices)
    chunk = min(READOUT_CHUNK.get(device_type, READOUT_CHUNK_DEFAULT), micro_batch * cfg.seq_len)
    return MemoryEstimate(parameters=parameters, micro_batch=micro_batch, seq_len=cfg.seq_len,
                          checkpoint_activations=checkpoint_activations,
                          weights_and_optimizer=STATE_BYTES_PER_PARAMETER * parameters,
                          activations=activation_bytes(cfg, micro_batch, checkpoint_activations),
                          readout=FLOAT_BYTES * chunk * cfg.vocab_size)


@dataclass(frozen=True)
class MemoryReport:
    """`gatedv params --memory`: one model's per-device memory without and with activation checkpointing."""

    size: str
    variant: str
    batch_size: int
    grad_accum: int
    devices: int
    estimates: dict[str, MemoryEstimate] = field(default_factory=dict)  # "plain", "checkpointed"

    def to_dict(self) -> dict:
        return {"size": self.size, "variant": self.variant, "batch_size": self.batch_size,
                "grad_accum": self.grad_accum, "devices": self.devices,
                **{name: estimate.to_dict() for name, estimate in self.estimates.items()}}

    def summary(self) -> str:
        first = self.estimates["plain"]
        lines = [f"{self.variant} at {self.size}: {first.parameters:,} parameters; batch {self.batch_size} on "
                 f"{self.devices} device(s) in {self.grad_accum} micro-batch(es) of {first.micro_batch} × "
                 f"{first.seq_len} tokens"]
        for name, estimate in self.estimates.items():
            lines.append(f"  {name + ':':<14}weights+grads+AdamW {_gib(estimate.weights_and_optimizer):>10}  "
                         f"activations {_gib(estimate.activations):>10}  logits {_gib(estimate.readout):>9}  "
                         f"total {_gib(estimate.total):>10}")
        lines.append("  (FP32 estimate per device, without the allocator's and CUDA's own overhead; bf16 autocast "
                     "needs less)")
        return "\n".join(lines)


def requested_memory(config: str, variant: str = "baseline", knobs: Sequence[str] = (),
                     size_knobs: Sequence[str] = (), *, batch_size: int | None = None, grad_accum: int = 1,
                     devices: int = 1) -> MemoryReport:
    """The memory `gatedv params --memory` prints for one size and variant (`knobs` and `size_knobs` as KEY=VALUE
    options); the batch defaults to the size's."""
    if config == "all" or variant == "all":
        raise InputError("--memory: needs one --config and one --variant, not all")
    parsed_sizes = parse_size_knob_options(size_knobs)
    cfg, _ = resolve_variant(config, variant, parse_knob_options(knobs), parsed_sizes)
    batch = int(parsed_sizes.get("batch_size", DEFAULT_BATCH_SIZE)) if batch_size is None else batch_size
    parameters = count_parameters(build_model(cfg, 0, "meta"))
    estimates = {name: estimate_memory(cfg, parameters, batch, grad_accum=grad_accum, devices=devices,
                                       checkpoint_activations=checkpointed)
                 for name, checkpointed in (("plain", False), ("checkpointed", True))}
    return MemoryReport(config, variant, batch, grad_accum, devices, estimates)


def _gib(count: int) -> str:
    return f"{count / GIB:.2f} GiB" if count >= GIB // 100 else f"{count / 1024**2:.1f} MiB"
