"""Paired initialisation, causality, the GatedV value path, the inference override and the moment buffers."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from gatedv_stats.core.errors import InputError
from helpers import small_vocab_model
from trainer.model import transformer as model_module
from trainer.model.transformer import VARIANTS, build_model, count_parameters, draw_normal, model_config


def test_paired_init_shares_every_matching_tensor_across_variants():
    baseline = small_vocab_model("baseline", seed=11).logical_weights()
    for variant in VARIANTS:
        weights = small_vocab_model(variant, seed=11).logical_weights()
        shared = [n for n in weights if n in baseline and weights[n].shape == baseline[n].shape]
        # Everything but the new gate matrices, and for glu-reduced everything but the narrowed W_V / W_O.
        assert len(shared) >= len(baseline) - 2 * 2, variant
        for name in shared:
            assert torch.equal(weights[name], baseline[name]), (variant, name)
        for name in set(weights) - set(shared):
            assert not any(
                w.shape == weights[name].shape and torch.equal(w, weights[name]) for w in baseline.values()
            ), (variant, name)


def test_glu_full_value_content_matrix_is_the_baseline_value_matrix():
    baseline, glu = small_vocab_model("baseline", seed=5), small_vocab_model("glu-full", seed=5)
    for b_block, g_block in zip(baseline.layers, glu.layers):
        assert torch.equal(g_block.attn.logical_matrices()["w_v"], b_block.attn.logical_matrices()["w_v"])
        assert not torch.equal(g_block.attn.logical_matrices()["w_gv"], b_block.attn.logical_matrices()["w_v"])


def test_paired_init_differs_across_seeds_and_repeats_for_one_seed():
    a, b, again = (small_vocab_model(seed=1).logical_weights(), small_vocab_model(seed=2).logical_weights(),
                   small_vocab_model(seed=1).logical_weights())
    for name in a:
        assert torch.equal(a[name], again[name])
        if a[name].dim() == 2:
            assert not torch.equal(a[name], b[name]), name


def test_logical_matrices_are_distinct_streams_within_a_model():
    weights = small_vocab_model(seed=3).logical_weights()
    w_q, w_k, w_v = (weights[f"layers.0.attn.{n}"] for n in ("w_q", "w_k", "w_v"))
    assert not torch.equal(w_q, w_k) and not torch.equal(w_k, w_v)
    assert not torch.equal(weights["layers.0.attn.w_q"], weights["layers.1.attn.w_q"])


def test_init_scales_follow_fan_in_and_residual_rule():
    cfg = model_config("small")
    weights = build_model(cfg, seed=0).logical_weights()
    residual = 1 / math.sqrt(2 * cfg.n_layers)
    expected = {
        "embed": 1 / math.sqrt(cfg.d_model),
        "layers.0.attn.w_q": 1 / math.sqrt(cfg.d_model),
        "layers.0.attn.w_o": residual / math.sqrt(cfg.d_model),
        "layers.0.ffn.w_1": 1 / math.sqrt(cfg.d_model),
        "layers.0.ffn.w_3": residual / math.sqrt(cfg.d_ff),
    }
    for name, std in expected.items():
        assert weights[name].std().item() == pytest.approx(std, rel=0.03), name
        assert abs(weights[name].mean().item()) < 0.1 * std
    assert torch.equal(weights["layers.0.attn_norm"], torch.ones(cfg.d_model))
    # The draw is a pure function of (seed, name, shape).
    assert torch.equal(
        weights["layers.0.attn.w_q"], draw_normal(0, "layers.0.attn.w_q", (128, 128), 1 / math.sqrt(128))
    )


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_model_is_causal(variant):
    model = small_vocab_model(variant, seed=4)
    if model.config.uses_moments:
        model.set_moments(torch.tensor([[0.1, 1.0, 0.2, 0.5]] * 2))
    idx = torch.randint(0, 512, (2, 20), generator=torch.Generator().manual_seed(0))
    changed = idx.clone()
    changed[:, 9] = (changed[:, 9] + 1) % 512
    with torch.no_grad():
        a, b = model(idx), model(changed)
    torch.testing.assert_close(a[:, :9], b[:, :9], atol=0, rtol=0)
    assert (a[:, 9:] - b[:, 9:]).abs().amax(dim=-1).min() > 0


def test_gatedv_changes_only_the_value_path(monkeypatch):
    """Same weights and input: queries and keys (hence attention weights) equal; values are SiLU(V)."""
    seen = []
    sdpa = F.scaled_dot_product_attention

    def recording(q, k, v, **kwargs):
        seen.append((q, k, v))
        return sdpa(q, k, v, **kwargs)

    monkeypatch.setattr(model_module.F, "scaled_dot_product_attention", recording)
    baseline, gatedv = small_vocab_model("baseline", seed=9), small_vocab_model("gatedv", seed=9)
    u = torch.randn(2, 16, 64, generator=torch.Generator().manual_seed(1))
    cos, sin = baseline.rope_cos[:16], baseline.rope_sin[:16]
    with torch.no_grad():
        baseline.layers[0].attn(u, cos, sin)
        gatedv.layers[0].attn(u, cos, sin)
    (qb, kb, vb), (qg, kg, vg) = seen
    assert torch.equal(qb, qg) and torch.equal(kb, kg)
    torch.testing.assert_close(vg, F.silu(vb), atol=0, rtol=0)
    assert not torch.equal(vg, vb)
    attention = lambda q, k: torch.softmax(q @ k.transpose(-1, -2), dim=-1)  # noqa: E731
    assert torch.equal(attention(qb, kb), attention(qg, kg))


def test_value_activation_override_swaps_linear_and_silu_without_touching_weights():
    baseline, gatedv = small_vocab_model("baseline", seed=2), small_vocab_model("gatedv", seed=2)
    before = {k: v.clone() for k, v in gatedv.state_dict().items()}
    idx = torch.randint(0, 512, (1, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        plain_b, plain_g = baseline(idx), gatedv(idx)
        gatedv.set_value_activation("linear")
        assert torch.equal(gatedv(idx), plain_b)
        baseline.set_value_activation("silu")
        assert torch.equal(baseline(idx), plain_g)
        gatedv.set_value_activation(None)
        assert torch.equal(gatedv(idx), plain_g)
    assert all(torch.equal(v, before[k]) for k, v in gatedv.state_dict().items())
    with pytest.raises(InputError, match="value activation override"):
        gatedv.set_value_activation("tanh")


def test_capture_values_reports_each_layers_projected_values():
    model = small_vocab_model("baseline", seed=6)
    idx = torch.randint(0, 512, (2, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), model.capture_values() as values:
        model(idx)
    assert len(values) == 2 and all(v.shape == (2, 10, 64) for v in values)
    u = model.layers[0].attn_norm(model.embed(idx))
    torch.testing.assert_close(values[0], u @ model.logical_weights()["layers.0.attn.w_v"].T)
    assert model.layers[0].attn.capture is None


def test_moment_buffers_must_be_set_and_validated():
    model = small_vocab_model("moment-silu", seed=1)
    idx = torch.zeros(1, 4, dtype=torch.long)
    with pytest.raises(InputError, match="moment coefficients are unset"):
        model(idx)
    with pytest.raises(InputError, match=r"expected shape \(2, 4\)"):
        model.set_moments(torch.ones(3, 4))
    with pytest.raises(InputError, match="positive sigma"):
        model.set_moments(torch.tensor([[0.0, 0.0, 0.0, 1.0]] * 2))
    coefficients = torch.tensor([[0.1, 1.0, 0.2, 0.5], [0.0, 2.0, 0.1, 0.4]])
    model.set_moments(coefficients)
    assert torch.equal(model.state_dict()["layers.1.attn.moments"], coefficients[1])
    assert torch.isfinite(model(idx)).all()
    assert count_parameters(model) == count_parameters(small_vocab_model("baseline"))  # buffers, not parameters
    with pytest.raises(InputError, match="does not use moment"):
        small_vocab_model("gatedv").set_moments(coefficients)


def test_config_validation_and_presets():
    assert model_config("small", "glu-reduced").v_head_dim * 4 == 84
    assert model_config("medium", "glu-reduced").v_head_dim * 6 == 258
    assert model_config("small", "gatedv", value_act="xtanh").value_act == "xtanh"
    for bad, message in (
        ({"size": "huge"}, "unknown size"),
        ({"variant": "v-relu"}, "unknown variant"),
        ({"ffn": "swish"}, "ffn"),
        ({"d_model": 99}, "not divisible"),
        ({"d_model": 130}, "must be even for RoPE"),
        ({"n_kv_heads": 3}, "n_kv_heads"),
        ({"dropout": 0.1}, "unknown field"),
    ):
        args = {"size": "tiny", "variant": "baseline", **bad}
        with pytest.raises(InputError, match=message):
            model_config(args.pop("size"), args.pop("variant"), **args)
    with pytest.raises(InputError, match="exceeds the model's seq_len"):
        small_vocab_model()(torch.zeros(1, 33, dtype=torch.long))


def test_matched_ffn_width_two_thirds_rule():
    assert model_module.matched_ffn_width(3072, "relu", "swiglu") == 2048
    assert model_module.matched_ffn_width(384, "swiglu", "gelu") == 576
    d, ungated = 128, 768
    gated = model_module.matched_ffn_width(ungated, "gelu", "geglu")
    assert 3 * d * gated == 2 * d * ungated


def test_fused_readout_loss_matches_logits_cross_entropy_and_its_gradients():
    """model(idx, targets) never holds all logits but gives F.cross_entropy's loss and gradients (2 chunks)."""
    model = build_model(model_config("tiny", "gatedv", seq_len=256), seed=8)
    batch = torch.randint(0, 8192, (2, 257), generator=torch.Generator().manual_seed(4))
    inputs, targets = batch[:, :-1], batch[:, 1:]
    reference = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
    reference.backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    loss = model(inputs, targets)
    loss.backward()
    torch.testing.assert_close(loss, reference, atol=1e-6, rtol=1e-6)
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, expected[name], atol=1e-7, rtol=1e-4, msg=name)
    with torch.no_grad():
        per_token = model.loss(inputs, targets, reduction="none")
        plain = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten(), reduction="none").view(2, 256)
    torch.testing.assert_close(per_token, plain, atol=1e-5, rtol=1e-6)
    torch.testing.assert_close(model.loss(inputs, targets, reduction="sum"), reference * 512, rtol=1e-5, atol=1e-3)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_model_has_the_cpu_initial_weights_and_the_same_loss():
    cfg = model_config("small", "gatedv")
    cpu, cuda = build_model(cfg, seed=3), build_model(cfg, seed=3, device="cuda")
    for name, tensor in cpu.state_dict().items():
        assert torch.equal(cuda.state_dict()[name].cpu(), tensor), name
    batch = torch.randint(0, 8192, (4, 257), generator=torch.Generator().manual_seed(0))
    loss_cpu = cpu(batch[:, :-1], batch[:, 1:])
    loss_cuda = cuda(batch[:, :-1].cuda(), batch[:, 1:].cuda())
    torch.testing.assert_close(loss_cuda.cpu(), loss_cpu, atol=1e-4, rtol=1e-5)
    loss_cuda.backward()
    plain = F.cross_entropy(cuda(batch[:, :-1].cuda()).flatten(0, 1), batch[:, 1:].flatten().cuda())
    torch.testing.assert_close(loss_cuda, plain, atol=1e-5, rtol=1e-5)
