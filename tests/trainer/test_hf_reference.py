"""The baseline is a `transformers` LlamaForCausalLM: equal logits on the same weights; export-hf round-trips."""

from __future__ import annotations

import json
import os
import stat

import torch
from transformers import LlamaForCausalLM
from typer.testing import CliRunner

from cli import app
from helpers import full_disk_line, invoke, tree
from trainer.hf.export import to_llama
from trainer.model.sizes import parse_size_knob_options, size_config
from trainer.model.transformer import build_model, model_config
from trainer.run.checkpoint import save_checkpoint


def _max_logit_diff(model, llama, idx) -> float:
    with torch.no_grad():
        return (model(idx) - llama(idx).logits).abs().max().item()


def test_small_baseline_logits_equal_llama_in_fp32():
    model = build_model(model_config("small"), seed=20270211).eval()
    llama = to_llama(model)
    assert llama.config._attn_implementation == "sdpa"
    assert sum(p.numel() for p in llama.parameters()) == 2_328_192
    idx = torch.randint(0, 8192, (1, 256), generator=torch.Generator().manual_seed(0))
    assert _max_logit_diff(model, llama, idx) <= 1e-4
    # The comparison is sensitive: a GatedV model with the same weights is far from Llama.
    gatedv = build_model(model_config("small", "gatedv"), seed=20270211).eval()
    assert _max_logit_diff(gatedv, llama, idx) > 1e-2


def test_gqa_and_geglu_baselines_equal_llama():
    for overrides in ({"n_kv_heads": 1}, {"ffn": "geglu"}):
        model = build_model(model_config("tiny", **overrides), seed=1).eval()
        idx = torch.randint(0, 8192, (1, 64), generator=torch.Generator().manual_seed(1))
        assert _max_logit_diff(model, to_llama(model), idx) <= 1e-4, overrides


def test_params_counts_of_sizes_of_ones_own_equal_llamas():
    """`gatedv params` for custom sizes (depth, width, heads, GQA, d_ff, context, vocabulary, RoPE base) counts what
    transformers' LlamaForCausalLM holds, and the logits agree."""
    sizes = [["n_layers=3", "d_model=96", "n_heads=3", "d_ff=160", "seq_len=48", "vocab_size=300"],
             ["n_layers=1", "d_model=128", "n_heads=8", "n_kv_heads=2", "d_ff=64", "vocab_size=1000",
              "rope_base=500000", "seq_len=64"]]
    for options in sizes:
        result = CliRunner().invoke(app, ["params", "--config", "mine", "--variant", "baseline", "--json",
                                          *(f"--size-knob={option}" for option in options)])
        assert result.exit_code == 0, result.output
        counted = json.loads(result.stdout)["mine"]["parameters"]["baseline"]
        model = build_model(size_config("mine", parse_size_knob_options(options)), seed=4).eval()
        llama = to_llama(model)
        assert llama.config.rope_parameters["rope_theta"] == model.config.rope_base
        assert counted == sum(p.numel() for p in llama.parameters())
        idx = torch.randint(0, model.config.vocab_size, (1, model.config.seq_len),
                            generator=torch.Generator().manual_seed(5))
        assert _max_logit_diff(model, llama, idx) <= 1e-4, options


def test_export_hf_round_trips_through_from_pretrained(tmp_path):
    model = build_model(model_config("tiny", seq_len=64), seed=3).eval()
    save_checkpoint(tmp_path / "checkpoint.pt", model, extra={"update": 0})
    out = tmp_path / "hf"
    result = CliRunner().invoke(app, ["export-hf", str(tmp_path / "checkpoint.pt"), str(out)])
    assert result.exit_code == 0, result.output
    assert {"config.json", "model.safetensors"} <= {p.name for p in out.iterdir()}
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~mask  # shareable like any directory, not owner-only
    assert {stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()} == {0o666 & ~mask}
    config = json.loads((out / "config.json").read_text())
    assert config["tie_word_embeddings"] is True and config["rms_norm_eps"] == 1e-6
    llama = LlamaForCausalLM.from_pretrained(out, local_files_only=True, attn_implementation="sdpa").eval()
    idx = torch.randint(0, 8192, (2, 64), generator=torch.Generator().manual_seed(2))
    assert _max_logit_diff(model, llama, idx) <= 1e-4


def test_export_hf_refuses_what_llama_cannot_express(tmp_path):
    runner = CliRunner()
    gatedv = build_model(model_config("tiny", "gatedv", vocab_size=256, seq_len=16), seed=0)
    save_checkpoint(tmp_path / "gatedv.pt", gatedv, extra={})
    result = runner.invoke(app, ["export-hf", str(tmp_path / "gatedv.pt"), str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "error: variant 'gatedv': LlamaForCausalLM cannot express value_act=silu" in result.output
    assert not (tmp_path / "out").exists()

    baseline = build_model(model_config("tiny", vocab_size=256, seq_len=16), seed=0)
    save_checkpoint(tmp_path / "baseline.pt", baseline, extra={})
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("x")
    result = runner.invoke(app, ["export-hf", str(tmp_path / "baseline.pt"), str(tmp_path / "full")])
    assert result.exit_code == 2 and "output directory exists and is not empty" in result.output

    result = runner.invoke(app, ["export-hf", str(tmp_path / "nope.pt"), str(tmp_path / "x")])
    assert result.exit_code == 2 and "nope.pt: checkpoint not found" in result.output

    with torch.no_grad():
        baseline.embed.weight[0, 0] = float("nan")
    save_checkpoint(tmp_path / "nan.pt", baseline, extra={})
    result = runner.invoke(app, ["export-hf", str(tmp_path / "nan.pt"), str(tmp_path / "nan")])
    assert result.exit_code == 2 and "nan.pt: embed.weight holds non-finite values" in result.output
    assert not (tmp_path / "nan").exists()


def test_export_hf_on_a_full_disk_leaves_no_directory(tmp_path, monkeypatch):
    """safetensors' own write fills the disk half way through the weights (its error as it reports ENOSPC): one
    line, exit 4, and neither the directory nor its temporary sibling is left."""
    import transformers.modeling_utils
    from safetensors import SafetensorError

    def half_written(tensors, filename, metadata=None):
        with open(filename, "wb") as handle:
            handle.write(b"\0" * 1000)
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    save_checkpoint(tmp_path / "baseline.pt", build_model(model_config("tiny", vocab_size=256, seq_len=16), seed=0),
                    extra={})
    before = tree(tmp_path)
    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", half_written)
    full_disk_line(invoke("export-hf", tmp_path / "baseline.pt", tmp_path / "hf"),
                   f"{tmp_path / 'hf'}: could not be written", "nothing is left under its name")
    assert tree(tmp_path) == before
