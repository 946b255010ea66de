"""Checkpoints: atomic save, exact round trip of weights, config, buffers and extras; one-line errors."""

from __future__ import annotations

import pytest
import torch

from gatedv_stats.core.errors import InputError
from trainer.model.transformer import build_model, model_config
from trainer.run.checkpoint import FORMAT, load_checkpoint, save_checkpoint


def _model(variant="baseline", seed=0):
    return build_model(model_config("tiny", variant, vocab_size=256, seq_len=16), seed)


def test_round_trip_restores_weights_config_buffers_and_extra(tmp_path):
    model = _model("affine-match", seed=3)
    model.set_moments(torch.tensor([[0.1, 1.0, 0.2, 0.5], [0.0, 2.0, 0.1, 0.4]]))
    extra = {"update": 17, "rng": torch.get_rng_state(), "run": {"variant": "affine-match", "lr": 0.003}}
    path = tmp_path / "run" / "checkpoint.pt"
    save_checkpoint(path, model, extra=extra)
    assert [p.name for p in path.parent.iterdir()] == ["checkpoint.pt"]  # no temp file left behind
    loaded = load_checkpoint(path)
    assert loaded.config == model.config
    assert loaded.extra["update"] == 17 and loaded.extra["run"] == extra["run"]
    assert torch.equal(loaded.extra["rng"], extra["rng"])
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], tensor), name
    idx = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(loaded.model(idx), model(idx))
    raw = torch.load(path, weights_only=True)
    assert raw["format"] == FORMAT and raw["model_config"]["variant"] == "affine-match"


def test_reserved_extra_keys_are_refused(tmp_path):
    with pytest.raises(ValueError, match="reserved"):
        save_checkpoint(tmp_path / "c.pt", _model(), extra={"model": 1})


def test_bad_checkpoints_are_one_line_input_errors(tmp_path):
    with pytest.raises(InputError, match="checkpoint not found"):
        load_checkpoint(tmp_path / "missing.pt")
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a torch file at all")
    with pytest.raises(InputError, match="garbage.pt: not a gatedv checkpoint"):
        load_checkpoint(garbage)
    csv = tmp_path / "losses.csv"
    csv.write_text("arm,seed,doc_id,n_targets,loss_sum\nbaseline,1,a.py,256,1476.19\n")
    with pytest.raises(InputError, match="losses.csv: not a gatedv checkpoint"):
        load_checkpoint(csv)
    truncated = tmp_path / "truncated.pt"
    save_checkpoint(truncated, _model(), extra={})
    truncated.write_bytes(truncated.read_bytes()[:200])
    with pytest.raises(InputError, match="truncated.pt: not a readable checkpoint"):
        load_checkpoint(truncated)
    foreign = tmp_path / "foreign.pt"
    torch.save({"state_dict": {}}, foreign)
    with pytest.raises(InputError, match="not a gatedv checkpoint"):
        load_checkpoint(foreign)
    model = _model()
    bad_config = tmp_path / "bad_config.pt"
    torch.save({"format": FORMAT, "model_config": {**model.config.to_dict(), "ffn": "swish"},
                "model": model.state_dict()}, bad_config)
    with pytest.raises(InputError, match="bad_config.pt: model config ffn"):
        load_checkpoint(bad_config)
    mismatched = tmp_path / "mismatched.pt"
    torch.save({"format": FORMAT, "model_config": {**model.config.to_dict(), "d_ff": 96},
                "model": model.state_dict()}, mismatched)
    with pytest.raises(InputError, match="weights do not match the model config"):
        load_checkpoint(mismatched)
    no_config = tmp_path / "no_config.pt"
    torch.save({"format": FORMAT, "model": model.state_dict()}, no_config)
    with pytest.raises(InputError, match="no_config.pt: damaged checkpoint: its 'model_config' is missing"):
        load_checkpoint(no_config)
    listed = tmp_path / "listed.pt"
    torch.save({"format": FORMAT, "model_config": model.config.to_dict(), "model": [1]}, listed)
    with pytest.raises(InputError, match="listed.pt: damaged checkpoint: its 'model' is a list, not a dict"):
        load_checkpoint(listed)
    with pytest.raises(InputError, match="is a directory, not a checkpoint file"):
        load_checkpoint(tmp_path)
    for error_path in (garbage, csv, truncated, foreign, bad_config, mismatched, no_config, listed):
        with pytest.raises(InputError) as info:
            load_checkpoint(error_path)
        assert "\n" not in str(info.value)


@pytest.mark.parametrize("length", [200, 5_000, 20_000, -10])
def test_a_truncated_checkpoint_is_named_truncated_or_corrupt_at_any_length(tmp_path, length):
    path = tmp_path / "cut.pt"
    save_checkpoint(path, _model(), extra={})
    path.write_bytes(path.read_bytes()[:length])
    with pytest.raises(InputError) as caught:
        load_checkpoint(path)
    assert str(caught.value) == (f"{path}: not a readable checkpoint (truncated or corrupt: the zip archive has no "
                                 "end record)")
