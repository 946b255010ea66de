"""The two controls after attention: `o-silu` (SiLU on the concatenated head outputs) and `g1-headwise`
(one sigmoid gate per head), against the baseline of the same seed and a direct computation."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from helpers import small_vocab_model
from trainer.hf.export import llama_incompatibilities
from trainer.model.transformer import draw_normal, model_config


def _inputs_of_w_o(model, idx: torch.Tensor) -> list[torch.Tensor]:
    """What each layer feeds into W_O: the attention output after any output activation or gate."""
    seen = []
    hooks = [block.attn.out.register_forward_hook(lambda module, args, out: seen.append(args[0]))
             for block in model.layers]
    with torch.no_grad():
        model(idx)
    for hook in hooks:
        hook.remove()
    return seen


def test_o_silu_is_silu_of_the_baseline_attention_output_in_the_first_layer():
    idx = torch.randint(0, 512, (2, 16), generator=torch.Generator().manual_seed(0))
    baseline, o_silu = small_vocab_model("baseline", 4), small_vocab_model("o-silu", 4)
    for name, weight in baseline.state_dict().items():
        assert torch.equal(weight, o_silu.state_dict()[name]), name  # no parameter of its own
    plain, activated = _inputs_of_w_o(baseline, idx)[0], _inputs_of_w_o(o_silu, idx)[0]
    torch.testing.assert_close(activated, F.silu(plain), atol=0, rtol=0)


def test_o_silu_is_not_gatedv_silu_after_mixing_differs_from_silu_before():
    """φ(A·V) and A·φ(V) from the same weights give different logits (the placement the control tests)."""
    idx = torch.arange(12)[None]
    with torch.no_grad():
        o_silu, gatedv, baseline = (small_vocab_model(variant, 7)(idx) for variant in ("o-silu", "gatedv", "baseline"))
    assert (o_silu - gatedv).abs().max() > 1e-3 and (o_silu - baseline).abs().max() > 1e-3


def test_g1_headwise_gate_is_one_sigmoid_per_head_from_the_normed_input():
    idx = torch.randint(0, 512, (1, 10), generator=torch.Generator().manual_seed(1))
    baseline, gated = small_vocab_model("baseline", 5), small_vocab_model("g1-headwise", 5)
    plain, scaled = _inputs_of_w_o(baseline, idx)[0], _inputs_of_w_o(gated, idx)[0]
    attn = gated.layers[0].attn
    u = gated.layers[0].attn_norm(gated.embed(idx))
    gates = torch.sigmoid(u @ attn.output_gate.weight.T)  # (1, T, H)
    H, dv = gated.config.n_heads, gated.config.v_head_dim
    for h in range(H):
        channels = slice(h * dv, (h + 1) * dv)
        torch.testing.assert_close(scaled[..., channels], plain[..., channels] * gates[..., h : h + 1])


def test_g1_headwise_gate_matrix_is_its_own_stream_and_every_other_matrix_is_the_baselines():
    seed = 11
    baseline = small_vocab_model("baseline", seed, "small").logical_weights()
    gated = small_vocab_model("g1-headwise", seed, "small").logical_weights()
    cfg = model_config("small")
    assert set(gated) - set(baseline) == {f"layers.{i}.attn.w_go" for i in range(cfg.n_layers)}
    for name, weight in baseline.items():
        assert torch.equal(gated[name], weight), name
    elementwise = small_vocab_model("g1-sigmoid", seed, "small").logical_weights()
    value_gate = small_vocab_model("g2-headwise", seed, "small").logical_weights()
    for layer in range(cfg.n_layers):
        name = f"layers.{layer}.attn.w_go"
        w_g = gated[name]
        assert w_g.shape == (cfg.n_heads, cfg.d_model)  # nn.Linear layout of W_G ∈ R^{d×H}
        assert torch.equal(w_g, draw_normal(seed, name, (cfg.n_heads, cfg.d_model), 1 / math.sqrt(cfg.d_model)))
        assert not torch.equal(w_g, elementwise[name][: cfg.n_heads])  # another shape: another draw
        assert not torch.equal(w_g, value_gate[f"layers.{layer}.attn.w_gv"])  # same shape, another matrix
    gates = torch.cat([gated[f"layers.{i}.attn.w_go"].flatten() for i in range(cfg.n_layers)])
    assert abs(gates.std().item() * math.sqrt(cfg.d_model) - 1) < 0.05


def test_llama_export_refuses_both_controls():
    assert llama_incompatibilities(model_config("tiny", "o-silu")) == ["output_act=silu"]
    assert llama_incompatibilities(model_config("tiny", "g1-headwise")) == ["output_gate=headwise"]
