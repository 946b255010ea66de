"""Memory-lean training leaves the numbers as they are: gradient accumulation (to float tolerance), activation
checkpointing (bit for bit), SDPA attention (against the attention written out); the memory estimate against the
tensors a real step holds."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from helpers import SMALL_VOCAB, assert_input_error, invoke
from trainer.model.memory import activation_bytes, block_floats_per_token, estimate_memory
from trainer.model.transformer import Attention, apply_rope, build_model, count_parameters, model_config
from trainer.run.recipe import RunSpec, Runtime, make_optimizer
from trainer.run.train import Objective, accumulate_gradients, train


def _batch(seed: int, rows: int = 8, cfg=None) -> torch.Tensor:
    cfg = cfg or model_config("tiny", **SMALL_VOCAB)
    return torch.randint(0, cfg.vocab_size, (rows, cfg.seq_len + 1), generator=torch.Generator().manual_seed(seed))


def _gradients(model) -> list[torch.Tensor]:
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return grads


@pytest.mark.parametrize("variant", ["baseline", "gatedv", "glu-full", "g1-headwise"])
def test_gradient_accumulation_equals_the_whole_batch_to_float_tolerance(variant):
    model = build_model(model_config("tiny", variant, **SMALL_VOCAB), seed=3)
    objective, batch = Objective(model), _batch(1)
    whole = accumulate_gradients(objective, batch, 1)
    expected = _gradients(model)
    for parts in (2, 4, 8):
        loss = accumulate_gradients(objective, batch, parts)
        assert math.isclose(loss.item(), whole.item(), rel_tol=1e-6)
        for got, want in zip(_gradients(model), expected):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("variant", ["baseline", "gatedv", "glu-reduced", "g1-sigmoid", "o-silu"])
def test_activation_checkpointing_gives_bit_identical_losses_and_gradients(variant):
    model = build_model(model_config("tiny", variant, **SMALL_VOCAB), seed=5)
    batch = _batch(2)
    results = []
    for checkpointed in (False, True):
        model.checkpoint_activations = checkpointed
        loss = model.loss(batch[:, :-1], batch[:, 1:])
        loss.backward()
        results.append((loss.detach(), _gradients(model)))
    assert torch.equal(results[0][0], results[1][0])
    assert all(torch.equal(a, b) for a, b in zip(results[0][1], results[1][1]))


def _attention_written_out(attention: Attention, u: torch.Tensor, cos, sin) -> torch.Tensor:
    """The baseline attention of `attention`'s weights with the softmax written out (no SDPA)."""
    B, T, _ = u.shape
    q, k, v = attention.qkv(u).split(attention.split_sizes, dim=-1)
    heads = attention.n_heads
    q, k, v = (x.view(B, T, heads, attention.head_dim).transpose(1, 2) for x in (q, k, v))
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(attention.head_dim)
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), -math.inf)
    o = F.softmax(scores, dim=-1) @ v
    return attention.out(o.transpose(1, 2).reshape(B, T, -1))


def test_sdpa_attention_equals_the_attention_written_out():
    model = build_model(model_config("small", seq_len=128, vocab_size=512), seed=7)
    attention = model.blocks[0].attn
    u = torch.randn(2, 128, model.config.d_model, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got = attention(u, model.rope_cos, model.rope_sin)
        want = _attention_written_out(attention, u, model.rope_cos, model.rope_sin)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _saved_bytes(model, batch: torch.Tensor) -> int:
    """Bytes of every tensor autograd saves in the forward pass, each storage once, weights and buffers left out."""
    own = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    seen: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in own:
            seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model.loss(batch[:, :-1], batch[:, 1:])
    return sum(seen.values())


@pytest.mark.parametrize("overrides", [{}, {"n_kv_heads": 1, "ffn": "gelu", "n_layers": 3, "d_ff": 100}])
@pytest.mark.parametrize("variant", ["baseline", "gatedv", "glu-full", "g1-sigmoid", "g1-headwise", "q-silu"])
def test_activation_estimate_equals_the_tensors_a_real_step_saves(variant, overrides):
    cfg = model_config("tiny", variant, **SMALL_VOCAB, **overrides)
    model, batch = build_model(cfg, seed=0), _batch(3, rows=4, cfg=cfg)
    assert _saved_bytes(model, batch) == activation_bytes(cfg, 4)
    model.checkpoint_activations = True  # block inputs only; one block's activations again while it is recomputed
    recomputed = 4 * cfg.seq_len * block_floats_per_token(cfg) * 4
    assert _saved_bytes(model, batch) + recomputed == activation_bytes(cfg, 4, checkpoint_activations=True)


def test_qk_norm_estimate_is_within_one_percent():
    cfg = model_config("tiny", qk_norm=True, **SMALL_VOCAB)
    measured = _saved_bytes(build_model(cfg, seed=0), _batch(3, rows=4, cfg=cfg))
    assert abs(activation_bytes(cfg, 4) / measured - 1) < 0.01


def test_weights_gradients_and_adamw_are_sixteen_bytes_a_parameter():
    cfg = model_config("tiny", **SMALL_VOCAB)
    model = build_model(cfg, seed=0)
    optimizer = make_optimizer(model, 1e-3, torch.device("cpu"))
    batch = _batch(4, rows=2, cfg=cfg)
    model.loss(batch[:, :-1], batch[:, 1:]).backward()
    optimizer.step()
    held = [*model.parameters(), *(p.grad for p in model.parameters())]
    held += [value for state in optimizer.state.values() for key, value in state.items() if key != "step"]
    parameters = count_parameters(model)
    estimate = estimate_memory(cfg, parameters, 2)
    assert sum(t.numel() * t.element_size() for t in held) == estimate.weights_and_optimizer == 16 * parameters
    assert estimate.readout == 4 * min(4096, 2 * cfg.seq_len) * cfg.vocab_size


def test_params_memory_prints_both_settings_and_refuses_bad_batches():
    result = invoke("params", "--config", "small", "--variant", "gatedv", "--memory", "--batch-size", "8",
                    "--grad-accum", "2", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["plain"]["micro_batch"] == 4
    assert report["checkpointed"]["activations"] < report["plain"]["activations"]
    assert report["plain"]["total"] == sum(report["plain"][key] for key in ("weights_and_optimizer", "activations",
                                                                             "readout"))
    text = invoke("params", "--config", "small", "--variant", "baseline", "--memory").stdout
    assert "checkpointed:" in text and "batch 8 on 1 device(s)" in text
    assert_input_error(invoke("params", "--config", "small", "--variant", "baseline", "--memory", "--batch-size", "6",
                              "--grad-accum", "4"), "--grad-accum: 4 micro-batches")
    assert_input_error(invoke("params", "--memory"), "--memory: needs one --config and one --variant")


def test_grad_accum_that_does_not_divide_the_batch_is_refused(prepared_data, tmp_path):
    spec = RunSpec.make(prepared_data, "tiny", "baseline", 1, updates=2, batch_size=6)
    with pytest.raises(Exception, match="--grad-accum: 4 micro-batches do not divide"):
        train(spec, tmp_path / "run", runtime=Runtime(device="cpu", progress=False, grad_accum=4))
    assert_input_error(invoke("train", "--data", prepared_data, "--config", "tiny", "--seed", "1", "--out",
                              tmp_path / "run2", "--grad-accum", "0"), "--grad-accum: must be at least 1")


def _trained(spec: RunSpec, run_dir, runtime: Runtime, stop_after: int | None = None, resume: bool = False):
    train(spec, run_dir, runtime=runtime, resume=resume, stop_after=stop_after)
    return torch.load(run_dir / "checkpoint.pt", weights_only=False)


@pytest.mark.slow
def test_memory_lean_runs_match_the_plain_run_and_resume_bit_for_bit(prepared_data, tmp_path):
    spec = RunSpec.make(prepared_data, "tiny", "gatedv", 3, updates=6, eval_every=3)
    plain = _trained(spec, tmp_path / "plain", Runtime(device="cpu", progress=False))
    lean = Runtime(device="cpu", progress=False, grad_accum=4, checkpoint_activations=True)
    whole = _trained(spec, tmp_path / "lean", lean)
    for name, value in plain["model"].items():  # the same run to float tolerance (6 AdamW steps amplify last bits)
        torch.testing.assert_close(whole["model"][name], value, rtol=1e-3, atol=2e-4)
    assert [row["dev_nll"] for row in whole["curve"]] == pytest.approx([row["dev_nll"] for row in plain["curve"]],
                                                                        rel=1e-5)
    _trained(spec, tmp_path / "resumed", lean, stop_after=4)
    with pytest.raises(Exception, match="trained with grad_accum=4, checkpoint_activations=True"):
        train(spec, tmp_path / "resumed", runtime=Runtime(device="cpu", progress=False), resume=True)
    resumed = _trained(spec, tmp_path / "resumed", lean, resume=True)
    assert all(torch.equal(resumed["model"][name], value) for name, value in whole["model"].items())
    assert json.dumps(resumed["curve"]) == json.dumps(whole["curve"])  # NaN train loss at step 0 compares as text
    assert resumed["memory"] == lean.memory_settings()
    record = json.loads((tmp_path / "resumed" / "run.json").read_text())
    assert record["memory"] == {"grad_accum": 4, "checkpoint_activations": True, "compile": False}
    # paired initialisation: the lean run starts from the plain run's weights (the same step-0 development NLL)
    assert json.dumps(whole["curve"][0]) == json.dumps(plain["curve"][0])
