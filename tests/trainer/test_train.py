"""The training loop of docs/method.md §4: schedule, optimizer groups, paired runs, the curve, divergence and bad
input."""

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

import cli
import trainer.run.train as train_module
from gatedv_stats.core.validation import MAX_SEED
from trainer.model.transformer import build_model, model_config
from trainer.run.checkpoint import load_checkpoint
from trainer.run.recipe import RunSpec, Runtime, learning_rate, make_optimizer
from trainer.run.train import train

UPDATES, EVAL_EVERY, BATCH = 6, 3, 2  # a short run of small batches keeps the tests fast
QUIET = Runtime(device="cpu", progress=False)


def sampler_windows(run_dir) -> int:
    """Eligible training windows of the run's data, counted from the document offsets."""
    offsets = np.load(Path(json.loads((run_dir / "run.json").read_text())["data"]) / "train_docs.npy")
    return int(np.maximum(np.diff(offsets) - 256, 0).sum())


def _checksum(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.detach().cpu().contiguous().numpy().tobytes()).hexdigest()


@pytest.fixture(scope="module")
def paired_runs(prepared_data, tmp_path_factory):
    """Baseline and GatedV, seed 7, trained side by side while recording every batch and the initial weights."""
    seen = {}
    original = train_module.next_token_loss

    def recording(model, batch):
        record = seen.setdefault(model.config.variant, {"batches": [], "weights": None})
        if record["weights"] is None:
            record["weights"] = {name: _checksum(w) for name, w in model.logical_weights().items()}
        record["batches"].append(_checksum(batch))
        return original(model, batch)

    runs = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(train_module, "next_token_loss", recording)
        for variant in ("baseline", "gatedv"):
            spec = RunSpec.make(prepared_data, "tiny", variant, 7, lr=0.01, updates=UPDATES, eval_every=EVAL_EVERY,
                                batch_size=BATCH)
            run_dir = tmp_path_factory.mktemp(variant)
            runs[variant] = (train(spec, run_dir, runtime=QUIET), run_dir)
    return runs, seen


def test_learning_rate_warms_up_linearly_then_cosine_to_a_tenth():
    peak, warmup, updates = 0.004, 10, 110
    rates = np.array([learning_rate(u, peak=peak, warmup=warmup, updates=updates) for u in range(updates)])
    np.testing.assert_allclose(rates[:warmup], peak * np.arange(1, warmup + 1) / warmup)
    # Independent cosine: from the peak at update `warmup` to 0.1 × peak at the final update.
    progress = np.linspace(0.0, 1.0, updates - warmup)
    np.testing.assert_allclose(rates[warmup:], 0.1 * peak + 0.45 * peak * (1 + np.cos(np.pi * progress)), rtol=1e-12)
    assert rates[warmup] == pytest.approx(peak) and rates[-1] == pytest.approx(0.1 * peak)
    assert np.all(np.diff(rates[warmup:]) <= 0)


def test_adamw_decays_every_matrix_and_no_gain():
    model = build_model(model_config("tiny", "gatedv"), 0)
    optimizer = make_optimizer(model, 1e-3, torch.device("cpu"))
    decayed, plain = optimizer.param_groups
    assert decayed["weight_decay"] == 0.1 and plain["weight_decay"] == 0.0
    assert decayed["betas"] == (0.9, 0.95) and decayed["eps"] == 1e-8
    assert {id(p) for p in decayed["params"]} == {id(p) for p in model.parameters() if p.ndim == 2}
    assert any(p is model.embed.weight for p in decayed["params"])
    assert {id(p) for p in plain["params"]} == {id(p) for p in model.parameters() if p.ndim == 1}
    assert len(decayed["params"]) + len(plain["params"]) == len(list(model.parameters()))


@pytest.mark.slow
def test_training_lowers_the_development_loss(paired_runs):
    runs, _ = paired_runs
    for result, run_dir in runs.values():
        curve = pd.read_csv(run_dir / "curve.csv")
        assert list(curve["step"]) == [0, 3, 6]
        assert curve["dev_nll"].iloc[0] == pytest.approx(math.log(8192), abs=0.5)  # near uniform at init
        assert curve["dev_nll"].iloc[-1] < curve["dev_nll"].iloc[1] < curve["dev_nll"].iloc[0] - 0.2
        assert result.status == "finished" and result.update == UPDATES
        assert result.dev_nll == curve["dev_nll"].iloc[-1]


@pytest.mark.slow
def test_curve_file_columns_and_rows(paired_runs):
    runs, _ = paired_runs
    result, run_dir = runs["gatedv"]
    curve = pd.read_csv(run_dir / "curve.csv")
    assert list(curve.columns) == ["arm", "seed", "lr", "step", "dev_nll", "train_loss", "tokens"]
    assert set(curve["arm"]) == {"gatedv"} and set(curve["seed"]) == {7} and set(curve["lr"]) == {0.01}
    assert list(curve["tokens"]) == [0, 3 * BATCH * 256, 6 * BATCH * 256]
    assert math.isnan(curve["train_loss"].iloc[0]) and (curve["train_loss"].iloc[1:] > 0).all()
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "finished" and record["variant"] == "gatedv" and record["update"] == UPDATES
    assert record["model_config"]["value_act"] == "silu" and record["tokens_per_second"] > 0
    checkpoint = load_checkpoint(run_dir / "checkpoint.pt")
    assert checkpoint.extra["update"] == UPDATES
    assert checkpoint.extra["sampler"] == {"seed": 7, "update": UPDATES, "n_windows": sampler_windows(run_dir)}
    pd.testing.assert_frame_equal(pd.DataFrame(checkpoint.extra["curve"]), curve)


@pytest.mark.slow
def test_paired_runs_share_initial_weights_and_every_batch(paired_runs):
    _, seen = paired_runs
    base, gated = seen["baseline"], seen["gatedv"]
    assert len(base["batches"]) == UPDATES and base["batches"] == gated["batches"]
    assert len(set(base["batches"])) == UPDATES  # the batches do change from update to update
    assert base["weights"] == gated["weights"]  # the same logical tensors, bit for bit


@pytest.mark.slow
def test_the_largest_seed_trains_reproducibly(prepared_data, tmp_path):
    spec = RunSpec.make(prepared_data, "tiny", "baseline", MAX_SEED, updates=2, eval_every=2, batch_size=BATCH)
    for name in ("first", "second"):
        train(spec, tmp_path / name, runtime=QUIET)
    first, second = (pd.read_csv(tmp_path / name / "curve.csv") for name in ("first", "second"))
    pd.testing.assert_frame_equal(first, second)
    assert list(first["seed"]) == [MAX_SEED, MAX_SEED] and list(first["step"]) == [0, 2]
    weights = [load_checkpoint(tmp_path / name / "checkpoint.pt").model.state_dict() for name in ("first", "second")]
    assert all(torch.equal(tensor, weights[1][name]) for name, tensor in weights[0].items())


@pytest.mark.slow
def test_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(prepared_data, tmp_path, monkeypatch):
    calls = []
    original = train_module.next_token_loss

    def poisoned(model, batch):
        calls.append(1)
        loss = original(model, batch)
        return loss * math.nan if len(calls) == 3 else loss

    monkeypatch.setattr(train_module, "next_token_loss", poisoned)
    run_dir = tmp_path / "run"
    result = CliRunner().invoke(cli.app, ["train", "--data", str(prepared_data), "--config", "tiny", "--seed", "1",
                                          "--updates", "4", "--eval-every", "2", "--batch-size", "2", "--out",
                                          str(run_dir), "--device", "cpu"])
    assert result.exit_code == 3
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [result.stderr.strip().splitlines()[-1]] and "Traceback" not in result.stderr  # progress bar above
    assert errors[0] == (f"error: training loss is nan at update 3; stopped, last good checkpoint "
                         f"{run_dir / 'checkpoint.pt'} (update 2)")
    checkpoint = load_checkpoint(run_dir / "checkpoint.pt")
    assert checkpoint.extra["update"] == 2
    assert all(torch.isfinite(t).all() for t in checkpoint.model.state_dict().values())
    assert json.loads((run_dir / "run.json").read_text())["status"] == "diverged"
    assert list(pd.read_csv(run_dir / "curve.csv")["step"]) == [0, 2]


@pytest.mark.parametrize(("args", "message"), [
    (["--variant", "gatedvv"], "error: --variant: unknown variant 'gatedvv'"),
    (["--config", "huge"], "error: --config: unknown size 'huge'"),
    (["--lr", "-1"], "error: --lr: must be a positive number, got -1.0"),
    (["--seed", str(MAX_SEED + 1)], f"error: --seed: must be an integer from 0 to {MAX_SEED} (got {MAX_SEED + 1})"),
    (["--updates", "4", "--warmup", "4"], "error: --warmup: 4 must be below the number of updates (4)"),
    (["--device", "tpu"], "error: --device: unknown device 'tpu'"),
    (["--device", "cuda"] if not torch.cuda.is_available() else ["--device", "cuda:99"], "error: --device: 'cuda"),
    (["--device", "cpu", "--tf32"], "error: --tf32: TF32 needs a CUDA device"),
    (["--stop-after", "9"], "error: --stop-after: must be in 1..8, got 9"),
    (["--resume"], "error: "),  # completed below: the missing checkpoint is named
])
def test_bad_training_input_is_one_line(prepared_data, tmp_path, args, message):
    result = CliRunner().invoke(cli.app, ["train", "--data", str(prepared_data), "--config", "tiny", "--seed", "1",
                                          "--out", str(tmp_path / "run"), "--updates", "8", *args])
    assert result.exit_code == 2
    assert result.stderr.startswith(message) and len(result.stderr.strip().splitlines()) == 1
    if "--resume" in args:
        assert result.stderr.strip() == f"error: {tmp_path / 'run' / 'checkpoint.pt'}: no checkpoint to resume"
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


@pytest.mark.slow
def test_an_existing_run_needs_resume_and_a_missing_data_dir_is_named(paired_runs, tmp_path):
    runs, _ = paired_runs
    _, run_dir = runs["baseline"]
    runner = CliRunner()
    taken = runner.invoke(cli.app, ["train", "--data", json.loads((run_dir / "run.json").read_text())["data"],
                                    "--config", "tiny", "--seed", "7", "--out", str(run_dir), "--updates", "8"])
    assert taken.exit_code == 2 and "already holds a run; pass --resume" in taken.stderr
    missing = runner.invoke(cli.app, ["train", "--data", str(tmp_path / "nope"), "--config", "tiny", "--seed", "1",
                                      "--out", str(tmp_path / "run")])
    assert missing.exit_code == 2 and "not a prepared data directory" in missing.stderr
