"""The GatedV model family (docs/method.md §2): a pre-norm decoder-only Transformer and its variants.

Read top to bottom: configuration and presets, the building blocks (RMSNorm, RoPE, attention,
feed-forward), the block, the tied readout's cross-entropy, the model, then paired initialisation and
`build_model`. Table 1's parameter counts are in `trainer/model/params.py`, the command-line knobs and custom
variants in `trainer/model/knobs.py`.

* `model(idx)` gives logits; `model(idx, targets)` the mean next-token cross-entropy, computed chunk by
  chunk without holding all (B·T, vocab) logits (faster on a CPU, less memory anywhere); `model.loss(...,
  reduction="none")` per-token losses for evaluation.

* The baseline is exactly a Hugging Face `LlamaForCausalLM` with tied embeddings: fused bias-free QKV,
  rotary base 10,000 (non-interleaved halves, as Llama), causal softmax attention, SwiGLU, RMSNorm with
  ε = 1e-6 (Llama's default), tied readout, no dropout.
* Variants are named presets (`VARIANTS`) over orthogonal knobs of `ModelConfig`: the value activation,
  query/key activations, a value gate, an output gate, an output activation, the feed-forward kind,
  key/value heads (GQA), QK-norm and the value head width. Two controls place the nonlinearity or gate
  after attention instead of on V: `o-silu`, SiLU(concat_h A_h V_h) W_O (φ(A·V) against GatedV's A·φ(V),
  no parameters), and `g1-headwise`, one sigmoid gate per head on the attention output (W_G ∈ R^{d×H}).
* Paired initialisation: every *logical* matrix (W_Q, W_K, W_V, W_O, W_1, W_2, W_3, W_G, the embedding)
  is drawn from its own `torch.Generator`, seeded from SHA-256 of (seed, name, shape), even where the
  storage is fused. A baseline and a variant with the same seed therefore share every matrix of equal
  name and shape bit for bit (`glu-full`'s W_C is the baseline's W_V), and a matrix of another shape is a
  new draw.
* Inference-time value-activation override (Table 9): `Transformer.set_value_activation("silu")`.
* `model.checkpoint_activations = True` keeps only each block's input for the backward pass and recomputes the block
  (less memory, bit-identical numbers); sizes of one's own are in `trainer/model/sizes.py`.
* Moment matching (docs/method.md §6): `affine-match` / `moment-silu` hold per-layer coefficients
  (mu_v, sigma_v, mu_phi, sigma_phi) as buffers, NaN until `Transformer.set_moments` fills them; a
  forward pass refuses to run on unset coefficients. To compute them, run a baseline model inside
  `with model.capture_values() as values: model(idx)`: afterwards `values[l]` holds layer l's projected
  values V (B, T, value width), taken after the QKV split and before any activation or gate.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from gatedv_stats.core.errors import InputError, ParameterError

# --- configuration -------------------------------------------------------------------------------------

ACTIVATIONS = ("linear", "silu")
VALUE_ACTIVATIONS = ("linear", "silu", "xtanh", "affine-match", "moment-silu")
VALUE_GATES = ("none", "glu", "headwise")
OUTPUT_GATES = ("none", "sigmoid", "softplus", "headwise")
FFN_KINDS = ("swiglu", "geglu", "glu", "reglu", "gelu", "relu")
GATED_FFN_KINDS = ("swiglu", "geglu", "glu", "reglu")


@dataclass(frozen=True)
class ModelConfig:
    """Sizes and knobs of one model. Defaults are the `small` baseline of Table 1.

    value_act: V ← linear | SiLU(V) | V·tanh(V) (`xtanh`) | affine-match | moment-silu (docs/method.md §2, §6).
    query_act, key_act: linear | silu, applied before RoPE.
    value_gate: none | glu (V ← V ⊙ SiLU(U W_G), GLU attention) | headwise (V_h ← V_h · σ((U W_G)_h), G2).
    output_gate: none | sigmoid | softplus: O ← concat_h(A_h V_h) ⊙ gate(U W_G) before W_O (G1);
        headwise: O_h ← O_h · σ((U W_G)_h), one gate per query head.
    output_act: linear | silu: O ← SiLU(concat_h(A_h V_h)) before the output gate and W_O.
    ffn: swiglu | geglu | glu | reglu (gated, W_1 gate, W_2 up) | gelu | relu (ungated: W_1 then W_3).
    n_kv_heads: key/value heads (GQA); None = n_heads. With a value gate, gates act on the key/value heads.
    value_head_dim: per-head value width; None = head width (`glu-reduced` narrows it).
    qk_norm: RMSNorm (learned gain) over each query and key head, after query/key activations, before RoPE.
    norm_eps: RMSNorm ε (1e-6, Llama's default).
    """

    vocab_size: int = 8192
    seq_len: int = 256
    n_layers: int = 6
    d_model: int = 128
    n_heads: int = 4
    d_ff: int = 384
    n_kv_heads: int | None = None
    value_head_dim: int | None = None
    norm_eps: float = 1e-6
    rope_base: float = 10_000.0
    variant: str = "baseline"
    value_act: str = "linear"
    query_act: str = "linear"
    key_act: str = "linear"
    value_gate: str = "none"
    output_gate: str = "none"
    output_act: str = "linear"
    ffn: str = "swiglu"
    qk_norm: bool = False

    def __post_init__(self) -> None:
        for field, allowed in (
            ("value_act", VALUE_ACTIVATIONS),
            ("query_act", ACTIVATIONS),
            ("key_act", ACTIVATIONS),
            ("value_gate", VALUE_GATES),
            ("output_gate", OUTPUT_GATES),
            ("output_act", ACTIVATIONS),
            ("ffn", FFN_KINDS),
        ):
            if getattr(self, field) not in allowed:
                raise InputError(f"model config {field}: {getattr(self, field)!r} is not one of {', '.join(allowed)}")
        for field in ("vocab_size", "seq_len", "n_layers", "d_model", "n_heads", "d_ff"):
            if not isinstance(getattr(self, field), int) or getattr(self, field) < 1:
                raise InputError(f"model config {field}: must be a positive integer, got {getattr(self, field)!r}")
        if self.d_model % self.n_heads:
            raise InputError(f"model config d_model: {self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.head_dim % 2:
            raise InputError(f"model config: head width {self.head_dim} must be even for RoPE")
        if self.kv_heads < 1 or self.n_heads % self.kv_heads:
            raise InputError(f"model config n_kv_heads: {self.n_kv_heads} must divide n_heads={self.n_heads}")
        if self.v_head_dim < 1:
            raise InputError(f"model config value_head_dim: must be positive, got {self.value_head_dim}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def v_head_dim(self) -> int:
        return self.head_dim if self.value_head_dim is None else self.value_head_dim

    @property
    def uses_moments(self) -> bool:
        return self.value_act in ("affine-match", "moment-silu")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def reduced_value_head_dim(cfg: ModelConfig) -> int:
    """GLU-attention value width m = the multiple of H nearest 2d/3, as a per-head width (small 21, medium 43)."""
    return math.floor(2 * cfg.d_model / (3 * cfg.n_heads) + 0.5)


def matched_ffn_width(d_ff: int, from_kind: str, to_kind: str) -> int:
    """Hidden width of `to_kind` with the parameter count of `from_kind` at width `d_ff` (the 2/3 rule:
    a gated FFN has three matrices, an ungated MLP two)."""
    matrices = {kind: 3 if kind in GATED_FFN_KINDS else 2 for kind in FFN_KINDS}
    for kind in (from_kind, to_kind):
        if kind not in matrices:
            raise InputError(f"ffn: {kind!r} is not one of {', '.join(FFN_KINDS)}")
    return round(d_ff * matrices[from_kind] / matrices[to_kind])


CONFIGS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(n_layers=2, d_model=64, n_heads=2, d_ff=192),
    "small": ModelConfig(n_layers=6, d_model=128, n_heads=4, d_ff=384),
    "medium": ModelConfig(n_layers=12, d_model=384, n_heads=6, d_ff=1152),
}

# A knob value may be a function of the base config (glu-reduced's width depends on the size).
VARIANTS: dict[str, dict] = {
    "baseline": {},
    "gatedv": {"value_act": "silu"},
    "q-silu": {"query_act": "silu"},
    "qkv-silu": {"query_act": "silu", "key_act": "silu", "value_act": "silu"},
    "v-tanh": {"value_act": "xtanh"},
    "glu-full": {"value_gate": "glu"},
    "glu-reduced": {"value_gate": "glu", "value_head_dim": reduced_value_head_dim},
    "g2-headwise": {"value_gate": "headwise"},
    "affine-match": {"value_act": "affine-match"},
    "moment-silu": {"value_act": "moment-silu"},
    "g1-sigmoid": {"output_gate": "sigmoid"},
    "g1-softplus": {"output_gate": "softplus"},
    "g1-headwise": {"output_gate": "headwise"},
    "o-silu": {"output_act": "silu"},
}


def model_config(size: str | ModelConfig = "small", variant: str = "baseline", **overrides) -> ModelConfig:
    """The preset `size` (or the baseline config of a size of one's own) with the knobs of `variant`, then
    `overrides` (any ModelConfig field)."""
    if not isinstance(size, ModelConfig) and size not in CONFIGS:
        raise ParameterError("config", f"unknown size {size!r} (choose from {', '.join(CONFIGS)})")
    if variant not in VARIANTS:
        raise ParameterError("variant", f"unknown variant {variant!r} (choose from {', '.join(VARIANTS)})")
    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise InputError(f"model config: unknown field(s) {', '.join(unknown)}")
    base = dataclasses.replace(size if isinstance(size, ModelConfig) else CONFIGS[size],
                               **{k: v for k, v in overrides.items() if k not in VARIANTS[variant]})
    knobs = {k: (v(base) if callable(v) else v) for k, v in VARIANTS[variant].items()}
    knobs.update({k: v for k, v in overrides.items() if k in VARIANTS[variant]})
    return dataclasses.replace(base, variant=variant, **knobs)


# --- building blocks -----------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    """g ⊙ x / sqrt(mean(x²) + ε), learned gain g (initialised to 1)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)


def rope_tables(head_dim: int, seq_len: int, base: float, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin tables (T, head_dim) for rotary embeddings, computed as Llama does (FP32)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim))
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x_i, x_{i+d/2}) of x (B, H, T, d) by position-dependent angles."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def _value_transform(v: torch.Tensor, act: str, moments: torch.Tensor | None) -> torch.Tensor:
    if act == "linear":
        return v
    if act == "silu":
        return F.silu(v)
    if act == "xtanh":
        return v * torch.tanh(v)
    if moments is None:
        raise InputError(f"{act}: the model holds no moment coefficients")
    mu_v, sigma_v, mu_phi, sigma_phi = moments.unbind()
    if act == "affine-match":  # linear values with SiLU(V)'s initial mean and SD
        return mu_phi + (sigma_phi / sigma_v) * (v - mu_v)
    # moment-silu: SiLU values with V's initial mean and SD
    return mu_v + (sigma_v / sigma_phi) * (F.silu(v) - mu_phi)


class Attention(nn.Module):
    """Causal multi-head attention with a fused QKV map and the value/query/key/gate knobs of docs/method.md §2."""

    moments: torch.Tensor | None  # a buffer, registered in __init__

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.n_heads, self.kv_heads = cfg.n_heads, cfg.kv_heads
        self.head_dim, self.v_head_dim = cfg.head_dim, cfg.v_head_dim
        q_width, k_width = cfg.n_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
        self.v_width = cfg.kv_heads * cfg.v_head_dim
        self.out_width = cfg.n_heads * cfg.v_head_dim
        self.split_sizes = (q_width, k_width, self.v_width)
        self.qkv = nn.Linear(cfg.d_model, sum(self.split_sizes), bias=False)
        self.out = nn.Linear(self.out_width, cfg.d_model, bias=False)
        gate_width = {"none": 0, "glu": self.v_width, "headwise": cfg.kv_heads}[cfg.value_gate]
        self.value_gate = nn.Linear(cfg.d_model, gate_width, bias=False) if gate_width else None
        gate_width = {"none": 0, "sigmoid": self.out_width, "softplus": self.out_width, "headwise": cfg.n_heads}[
            cfg.output_gate]
        self.output_gate = nn.Linear(cfg.d_model, gate_width, bias=False) if gate_width else None
        if cfg.qk_norm:
            self.q_norm = RMSNorm(cfg.head_dim, cfg.norm_eps)
            self.k_norm = RMSNorm(cfg.head_dim, cfg.norm_eps)
        # mu_v, sigma_v, mu_phi, sigma_phi (docs/method.md §6); NaN until set_moments.
        self.register_buffer("moments", torch.full((4,), math.nan) if cfg.uses_moments else None)
        self.value_act = cfg.value_act
        self.capture: Callable[[torch.Tensor], None] | None = None

    def logical_matrices(self) -> dict[str, torch.Tensor]:
        """Views of W_Q, W_K, W_V, W_O (and W_G) in nn.Linear layout (out, in)."""
        w_q, w_k, w_v = self.qkv.weight.split(self.split_sizes, dim=0)
        matrices = {"w_q": w_q, "w_k": w_k, "w_v": w_v, "w_o": self.out.weight}
        if self.value_gate is not None:
            matrices["w_gv"] = self.value_gate.weight
        if self.output_gate is not None:
            matrices["w_go"] = self.output_gate.weight
        return matrices

    def forward(self, u: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, _ = u.shape
        q, k, v = self.qkv(u).split(self.split_sizes, dim=-1)
        if self.capture is not None:
            self.capture(v.detach())
        if self.cfg.query_act == "silu":
            q = F.silu(q)
        if self.cfg.key_act == "silu":
            k = F.silu(k)
        v = _value_transform(v, self.value_act, self.moments)
        if self.value_gate is not None and self.cfg.value_gate == "glu":
            v = v * F.silu(self.value_gate(u))
        elif self.value_gate is not None:  # headwise
            gate = torch.sigmoid(self.value_gate(u)).unsqueeze(-1)
            v = (v.view(B, T, self.kv_heads, self.v_head_dim) * gate).view(B, T, self.v_width)
        q = q.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.kv_heads, self.v_head_dim).transpose(1, 2)
        if self.cfg.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.n_heads)
        o = o.transpose(1, 2).reshape(B, T, self.out_width)
        if self.cfg.output_act == "silu":
            o = F.silu(o)
        if self.output_gate is not None:
            g = self.output_gate(u)
            if self.cfg.output_gate == "headwise":  # head h's gate scales all of its v_head_dim channels
                g = g.repeat_interleave(self.v_head_dim, dim=-1)
            o = o * (F.softplus(g) if self.cfg.output_gate == "softplus" else torch.sigmoid(g))
        return self.out(o)


_FFN_ACT: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "swiglu": F.silu, "geglu": F.gelu, "glu": torch.sigmoid, "reglu": F.relu, "gelu": F.gelu, "relu": F.relu}


class FeedForward(nn.Module):
    """Gated: (act(U W_1) ⊙ U W_2) W_3 with W_1, W_2 fused into one map; ungated: act(U W_1) W_3."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gated = cfg.ffn in GATED_FFN_KINDS
        self.act = _FFN_ACT[cfg.ffn]
        self.d_ff = cfg.d_ff
        self.w_in = nn.Linear(cfg.d_model, (2 if self.gated else 1) * cfg.d_ff, bias=False)
        self.w_out = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def logical_matrices(self) -> dict[str, torch.Tensor]:
        if self.gated:
            w_1, w_2 = self.w_in.weight.split(self.d_ff, dim=0)
            return {"w_1": w_1, "w_2": w_2, "w_3": self.w_out.weight}
        return {"w_1": self.w_in.weight, "w_3": self.w_out.weight}

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        if self.gated:
            gate, up = self.w_in(u).split(self.d_ff, dim=-1)
            return self.w_out(self.act(gate) * up)
        return self.w_out(self.act(self.w_in(u)))


class Block(nn.Module):
    """Pre-norm residual block: X' = X + Attn(RMSNorm(X)); X'' = X' + FFN(RMSNorm(X'))."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.ffn = FeedForward(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.ffn(self.ffn_norm(x))


# --- tied readout and cross-entropy --------------------------------------------------------------------

# Tokens whose logits exist at once in `Transformer.loss`: on a CPU, chunks of 256 × 8,192 logits (8 MiB) stay in
# cache and measured ~30% faster than whole-batch logits; a GPU prefers one large product.
READOUT_CHUNK = {"cpu": 256}
READOUT_CHUNK_DEFAULT = 4096


class _ReadoutCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of the logits h Wᵀ, a chunk of tokens at a time.

    The gradients are formed in the forward pass from each chunk's softmax − one-hot while its logits are at
    hand, so the full (N, vocab) logits, their log-softmax and its gradient never exist at once: the same three
    matrix products as the plain path with fewer passes over the logits.
    """

    @staticmethod
    def forward(ctx, h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int) -> torch.Tensor:
        n = h.shape[0]
        total = torch.zeros((), dtype=torch.float32, device=h.device)
        grad_h, grad_w = torch.empty_like(h), torch.zeros_like(weight)
        for start in range(0, n, chunk):
            h_c, t_c = h[start : start + chunk], targets[start : start + chunk]
            logits = (h_c @ weight.T).float()
            target_logit = logits.gather(1, t_c[:, None])
            peak = logits.amax(dim=1, keepdim=True)
            probs = logits.sub_(peak).exp_()
            norm = probs.sum(dim=1, keepdim=True)
            total += (peak + norm.log() - target_logit).sum()
            probs.div_(norm)[torch.arange(len(t_c), device=h.device), t_c] -= 1.0  # softmax − one-hot
            probs = probs.to(h.dtype)
            grad_h[start : start + chunk] = probs @ weight
            grad_w.addmm_(probs.T, h_c)
        ctx.save_for_backward(grad_h, grad_w)
        ctx.n = n
        return total / n

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad_h, grad_w = ctx.saved_tensors
        scale = grad / ctx.n
        return grad_h * scale.to(grad_h.dtype), grad_w * scale.to(grad_w.dtype), None, None


def readout_cross_entropy(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                          reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy of the readout h Wᵀ against `targets` (h (N, d), targets (N,)), chunk by chunk: the fused
    path for a differentiable mean or sum, chunked `F.cross_entropy` when no gradient is needed."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction: {reduction!r} is not mean, sum or none")
    chunk = READOUT_CHUNK.get(h.device.type, READOUT_CHUNK_DEFAULT)
    if torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad):
        if reduction == "none":
            return F.cross_entropy(F.linear(h, weight).float(), targets, reduction="none")
        mean = _ReadoutCrossEntropy.apply(h, weight, targets, chunk)
        return mean if reduction == "mean" else mean * h.shape[0]
    losses = torch.cat([
        F.cross_entropy(F.linear(h[s : s + chunk], weight).float(), targets[s : s + chunk], reduction="none")
        for s in range(0, h.shape[0], chunk)
    ])
    return {"none": losses, "sum": losses.sum(), "mean": losses.mean()}[reduction]


class Transformer(nn.Module):
    """Embedding, L blocks, final RMSNorm, readout tied to the embedding."""

    rope_cos: torch.Tensor  # buffers (T, head_dim), registered in __init__
    rope_sin: torch.Tensor

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.register_buffer("rope_cos", torch.empty(cfg.seq_len, cfg.head_dim), persistent=False)
        self.register_buffer("rope_sin", torch.empty(cfg.seq_len, cfg.head_dim), persistent=False)
        self._moments_checked = False
        self.checkpoint_activations = False  # keep only each block's input for the backward pass (same numbers)

    @property
    def blocks(self) -> list[Block]:
        """The layers, typed (an `nn.ModuleList` holds plain modules)."""
        return cast(list[Block], list(self.layers))

    def _moments(self) -> list[torch.Tensor]:
        """Every layer's moment-coefficient buffer (none unless the variant uses them)."""
        return [block.attn.moments for block in self.blocks if block.attn.moments is not None]

    def init_buffers(self) -> None:
        """(Re)compute the RoPE tables on the model's device and mark moment coefficients unset (NaN)."""
        cos, sin = rope_tables(self.config.head_dim, self.config.seq_len, self.config.rope_base, self.rope_cos.device)
        with torch.no_grad():
            self.rope_cos.copy_(cos)
            self.rope_sin.copy_(sin)
            for moments in self._moments():
                moments.fill_(math.nan)

    def hidden_states(self, idx: torch.Tensor) -> torch.Tensor:
        """Final-normed hidden states (B, T, d) for token ids idx (B, T)."""
        T = idx.shape[1]
        if T > self.config.seq_len:
            raise InputError(f"input: sequence length {T} exceeds the model's seq_len {self.config.seq_len}")
        if self.config.uses_moments and not self._moments_checked:
            if any(torch.isnan(moments).any() for moments in self._moments()):
                raise InputError(f"{self.config.value_act}: moment coefficients are unset; call set_moments first")
            self._moments_checked = True
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        x = self.embed(idx)
        recompute = self.checkpoint_activations and torch.is_grad_enabled()
        for block in self.layers:  # checkpointed: the backward pass recomputes each block from its input
            x = checkpoint(block, x, cos, sin, use_reentrant=False) if recompute else block(x, cos, sin)
        return self.norm(x)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, T, vocab) for token ids idx (B, T); with `targets` (B, T), the mean cross-entropy instead
        (computed without materialising the logits; the form to call under DDP or torch.compile)."""
        if targets is None:
            return F.linear(self.hidden_states(idx), self.embed.weight)
        return self.loss(idx, targets)

    def loss(self, idx: torch.Tensor, targets: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        """Next-token cross-entropy (nats): a scalar for "mean"/"sum", per token (B, T) for "none"."""
        h = self.hidden_states(idx)
        losses = readout_cross_entropy(h.flatten(0, 1), self.embed.weight, targets.flatten(), reduction)
        return losses.view(targets.shape) if reduction == "none" else losses

    def set_value_activation(self, act: str | None) -> None:
        """Override the value activation of every layer at inference (Table 9); None restores the config's."""
        if act not in (None, "linear", "silu"):
            raise InputError(f"value activation override: {act!r} is not linear, silu or None")
        for block in self.blocks:
            block.attn.value_act = self.config.value_act if act is None else act

    def set_moments(self, coefficients: torch.Tensor) -> None:
        """Per-layer moment-matching coefficients (L, 4): mu_v, sigma_v, mu_phi, sigma_phi (docs/method.md §6)."""
        if not self.config.uses_moments:
            raise InputError(f"moments: variant {self.config.variant!r} does not use moment coefficients")
        coefficients = torch.as_tensor(coefficients, dtype=torch.float32)
        if coefficients.shape != (self.config.n_layers, 4):
            raise InputError(f"moments: expected shape ({self.config.n_layers}, 4), got {tuple(coefficients.shape)}")
        if not torch.isfinite(coefficients).all() or (coefficients[:, [1, 3]] <= 0).any():
            raise InputError("moments: coefficients must be finite with positive sigma_v and sigma_phi")
        with torch.no_grad():
            for moments, row in zip(self._moments(), coefficients):
                moments.copy_(row)
        self._moments_checked = False

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        self._moments_checked = False
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    @contextlib.contextmanager
    def capture_values(self) -> Iterator[list[torch.Tensor | None]]:
        """Inside the block, every forward stores layer l's projected values V (detached) in `values[l]`."""
        values: list[torch.Tensor | None] = [None] * len(self.layers)

        def recorder(layer: int) -> Callable[[torch.Tensor], None]:
            return lambda v: values.__setitem__(layer, v)

        for layer, block in enumerate(self.blocks):
            block.attn.capture = recorder(layer)
        try:
            yield values
        finally:
            for block in self.blocks:
                block.attn.capture = None

    def logical_weights(self) -> dict[str, torch.Tensor]:
        """Every logical matrix and gain by its pairing name (views into the possibly fused storage)."""
        weights = {"embed": self.embed.weight}
        for i, block in enumerate(self.blocks):
            prefix = f"layers.{i}."
            weights[prefix + "attn_norm"] = block.attn_norm.weight
            weights |= {prefix + "attn." + k: v for k, v in block.attn.logical_matrices().items()}
            if self.config.qk_norm:
                weights[prefix + "attn.q_norm"] = block.attn.q_norm.weight
                weights[prefix + "attn.k_norm"] = block.attn.k_norm.weight
            weights[prefix + "ffn_norm"] = block.ffn_norm.weight
            weights |= {prefix + "ffn." + k: v for k, v in block.ffn.logical_matrices().items()}
        weights["norm"] = self.norm.weight
        return weights


# --- paired initialisation -----------------------------------------------------------------------------


def tensor_seed(seed: int, name: str, shape: tuple[int, ...]) -> int:
    """The generator seed of one logical tensor: SHA-256 of (seed, name, shape), first 63 bits."""
    key = f"{int(seed)}|{name}|{'x'.join(map(str, shape))}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "little") & ((1 << 63) - 1)


def draw_normal(seed: int, name: str, shape: tuple[int, ...], std: float) -> torch.Tensor:
    """N(0, std²) draw of `shape` from the (seed, name, shape) stream, on the CPU in FP32."""
    generator = torch.Generator().manual_seed(tensor_seed(seed, name, shape))
    return torch.randn(shape, generator=generator) * std


def init_weights(model: Transformer, seed: int) -> None:
    """Paired initialisation (docs/method.md §2): every matrix ~ N(0, 1/fan_in); W_O and W_3 also × 1/sqrt(2L);
    the tied embedding uses
    fan-in d; gains 1. Each logical matrix from its own stream."""
    residual_scale = 1.0 / math.sqrt(2 * model.config.n_layers)
    with torch.no_grad():
        for name, tensor in model.logical_weights().items():
            if tensor.dim() == 1:
                tensor.fill_(1.0)
                continue
            fan_in = model.config.d_model if name == "embed" else tensor.shape[1]
            std = 1.0 / math.sqrt(fan_in)
            if name.endswith(("attn.w_o", "ffn.w_3")):
                std *= residual_scale
            tensor.copy_(draw_normal(seed, name, tuple(tensor.shape), std))


def build_model(cfg: ModelConfig, seed: int, device: str | torch.device = "cpu") -> Transformer:
    """A Transformer with paired initialisation for `seed` on `device` ("meta": shapes only, no values)."""
    with torch.device("meta"):
        model = Transformer(cfg)
    if torch.device(device).type == "meta":
        return model
    model.to_empty(device=device)
    model.init_buffers()
    init_weights(model, seed)
    return model


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters, each shared tensor once (the tied readout is the embedding)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
