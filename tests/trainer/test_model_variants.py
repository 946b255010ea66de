"""Every variant computes its formula (docs/method.md §2): the model against a direct FP64 re-computation."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from trainer.model.transformer import VARIANTS, build_model, model_config

MOMENTS = torch.tensor([[0.05, 0.9, 0.3, 0.45], [-0.02, 1.1, 0.25, 0.5]])


def _rope(x: torch.Tensor, base: float) -> torch.Tensor:
    """Rotate each pair (x_i, x_{i+d/2}) at position t by the angle t·base^(-2i/d); x (T, d)."""
    T, d = x.shape
    theta = torch.arange(T, dtype=torch.float64)[:, None] * base ** (-2 * torch.arange(d // 2, dtype=torch.float64) / d)
    a, b = x[:, : d // 2], x[:, d // 2 :]
    return torch.cat((a * theta.cos() - b * theta.sin(), a * theta.sin() + b * theta.cos()), dim=1)


def reference_logits(model, idx: torch.Tensor) -> torch.Tensor:
    """docs/method.md §2 written out with explicit heads, masks and FP64, from the model's logical weights."""
    cfg = model.config
    W = {name: w.detach().double() for name, w in model.logical_weights().items()}
    silu = lambda z: z * torch.sigmoid(z)  # noqa: E731

    def rms(x, g):
        return g * x / torch.sqrt((x * x).mean(-1, keepdim=True) + cfg.norm_eps)

    T = idx.shape[0]
    mask = torch.full((T, T), -math.inf, dtype=torch.float64).triu(1)
    dh, dv, H, KV = cfg.head_dim, cfg.v_head_dim, cfg.n_heads, cfg.kv_heads
    x = W["embed"][idx]
    for layer in range(cfg.n_layers):
        p = f"layers.{layer}."
        u = rms(x, W[p + "attn_norm"])
        q, k, v = u @ W[p + "attn.w_q"].T, u @ W[p + "attn.w_k"].T, u @ W[p + "attn.w_v"].T
        q = silu(q) if cfg.query_act == "silu" else q
        k = silu(k) if cfg.key_act == "silu" else k
        mu_v, sigma_v, mu_phi, sigma_phi = model.layers[layer].attn.moments.double() if cfg.uses_moments else [0] * 4
        v = {
            "linear": lambda: v,
            "silu": lambda: silu(v),
            "xtanh": lambda: v * torch.tanh(v),
            "affine-match": lambda: mu_phi + (sigma_phi / sigma_v) * (v - mu_v),
            "moment-silu": lambda: mu_v + (sigma_v / sigma_phi) * (silu(v) - mu_phi),
        }[cfg.value_act]()
        if cfg.value_gate == "glu":
            v = v * silu(u @ W[p + "attn.w_gv"].T)
        heads = []
        for h in range(H):
            g = h // (H // KV)
            qh, kh, vh = q[:, h * dh : (h + 1) * dh], k[:, g * dh : (g + 1) * dh], v[:, g * dv : (g + 1) * dv]
            if cfg.value_gate == "headwise":
                vh = vh * torch.sigmoid(u @ W[p + "attn.w_gv"].T)[:, g : g + 1]
            if cfg.qk_norm:
                qh, kh = rms(qh, W[p + "attn.q_norm"]), rms(kh, W[p + "attn.k_norm"])
            qh, kh = _rope(qh, cfg.rope_base), _rope(kh, cfg.rope_base)
            heads.append(torch.softmax(qh @ kh.T / math.sqrt(dh) + mask, dim=-1) @ vh)
        o = torch.cat(heads, dim=-1)
        if cfg.output_act == "silu":
            o = silu(o)
        if cfg.output_gate == "headwise":
            gates = torch.sigmoid(u @ W[p + "attn.w_go"].T)  # (T, H)
            o = torch.cat([o[:, h * dv : (h + 1) * dv] * gates[:, h : h + 1] for h in range(H)], dim=-1)
        elif cfg.output_gate != "none":
            z = u @ W[p + "attn.w_go"].T
            o = o * (torch.sigmoid(z) if cfg.output_gate == "sigmoid" else torch.log1p(torch.exp(z)))
        x = x + o @ W[p + "attn.w_o"].T
        u = rms(x, W[p + "ffn_norm"])
        act = {"swiglu": silu, "geglu": lambda z: F.gelu(z), "glu": torch.sigmoid, "reglu": torch.relu}
        if cfg.ffn in act:
            hidden = act[cfg.ffn](u @ W[p + "ffn.w_1"].T) * (u @ W[p + "ffn.w_2"].T)
        else:
            hidden = (F.gelu if cfg.ffn == "gelu" else torch.relu)(u @ W[p + "ffn.w_1"].T)
        x = x + hidden @ W[p + "ffn.w_3"].T
    return rms(x, W["norm"]) @ W["embed"].T


CASES = [(variant, {}) for variant in VARIANTS] + [
    ("baseline", {"n_kv_heads": 1}),
    ("gatedv", {"n_kv_heads": 2, "n_heads": 4}),
    ("baseline", {"qk_norm": True}),
    ("baseline", {"ffn": "geglu"}),
    ("baseline", {"ffn": "glu"}),
    ("baseline", {"ffn": "reglu"}),
    ("baseline", {"ffn": "gelu", "d_ff": 288}),
    ("baseline", {"ffn": "relu", "d_ff": 288}),
    ("o-silu", {"n_kv_heads": 1}),
    ("g1-headwise", {"n_kv_heads": 1}),
    ("g1-headwise", {"value_head_dim": 8}),
    ("baseline", {"output_act": "silu", "output_gate": "headwise"}),
    ("baseline", {"output_act": "silu", "output_gate": "sigmoid", "value_act": "silu"}),
]


@pytest.mark.parametrize("variant,overrides", CASES, ids=[f"{v}{o or ''}" for v, o in CASES])
def test_variant_matches_direct_formula(variant, overrides):
    cfg = model_config("tiny", variant, vocab_size=512, seq_len=16, **overrides)
    model = build_model(cfg, seed=7)
    if cfg.uses_moments:
        model.set_moments(MOMENTS)
    # Gains away from 1 so that a missing norm gain would show.
    with torch.no_grad():
        for name, w in model.logical_weights().items():
            if w.dim() == 1:
                w.uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(len(name)))
    idx = torch.randint(0, cfg.vocab_size, (1, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ours = model(idx)[0].double()
    expected = reference_logits(model, idx[0])
    assert ours.shape == (12, cfg.vocab_size)
    torch.testing.assert_close(ours, expected, atol=2e-5, rtol=1e-4)


def test_reference_distinguishes_variants():
    """The re-computation is sensitive: baseline weights under the GatedV formula give other logits."""
    model = build_model(model_config("tiny", "baseline", vocab_size=512, seq_len=16), seed=7)
    idx = torch.arange(10)
    gatedv = build_model(model_config("tiny", "gatedv", vocab_size=512, seq_len=16), seed=7)
    assert (reference_logits(model, idx) - reference_logits(gatedv, idx)).abs().max() > 1e-3
