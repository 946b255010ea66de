"""Divergence: no NaN is ever saved as good. A non-finite loss, gradient, weight or development NLL stops the run
(exit 3, status diverged) before the curve row or checkpoint of that update is written; the checkpoint the
message names holds finite weights; `--resume` refuses a non-finite checkpoint in one line."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

import cli
import trainer.run.train as train_module
from trainer.run.checkpoint import load_checkpoint, non_finite_state


def train_cli(data, run_dir, *args: str):
    return CliRunner().invoke(cli.app, ["train", "--data", str(data), "--config", "tiny", "--seed", "1",
                                        "--batch-size", "2", "--out", str(run_dir), "--device", "cpu", *args])


def diverged_update(result, run_dir, what: str) -> int:
    """Checks the one error line (below the progress bar) and returns the update of the checkpoint it names."""
    assert result.exit_code == 3, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [result.stderr.strip().splitlines()[-1]], result.stderr
    match = re.fullmatch(rf"error: {what} at update (\d+); stopped, last good checkpoint "
                         rf"{re.escape(str(run_dir / 'checkpoint.pt'))} \(update (?P<saved>\d+)\)", errors[0])
    assert match, errors[0]
    assert json.loads((run_dir / "run.json").read_text())["status"] == "diverged"
    return int(match.group("saved"))


def assert_nothing_non_finite(run_dir, saved_update: int) -> pd.DataFrame:
    checkpoint = load_checkpoint(run_dir / "checkpoint.pt")
    assert checkpoint.extra["update"] == saved_update
    assert non_finite_state(checkpoint.model.state_dict(), checkpoint.extra["optimizer"]) is None
    assert all(torch.isfinite(t).all() for t in checkpoint.model.state_dict().values())  # independently
    curve = pd.read_csv(run_dir / "curve.csv")
    assert np.isfinite(curve["dev_nll"].to_numpy()).all() and curve["dev_nll"].notna().all()
    assert curve["step"].iloc[-1] == saved_update
    assert [row["step"] for row in checkpoint.extra["curve"]] == list(curve["step"])
    return curve


@pytest.mark.slow
def test_a_huge_learning_rate_stops_before_a_non_finite_value_is_written(prepared_data, tmp_path):
    """With --eval-every 1 --lr 1e3 every update writes a checkpoint; the bad gradients never reach one."""
    run_dir = tmp_path / "run"
    result = train_cli(prepared_data, run_dir, "--updates", "10", "--eval-every", "1", "--lr", "1e3")
    saved = diverged_update(result, run_dir, r"(training loss|gradient norm) is (nan|inf|-inf)")
    assert saved >= 1
    assert_nothing_non_finite(run_dir, saved)


@pytest.mark.slow
def test_non_finite_gradients_stop_the_update_that_made_them(prepared_data, tmp_path, monkeypatch):
    """A finite loss whose gradient is NaN (d/dx sqrt(x - x) at 0) at the third update."""
    calls = []
    original = train_module.next_token_loss

    def nan_gradient(model, batch):
        calls.append(1)
        loss = original(model, batch)
        if len(calls) == 3:
            weight = next(model.parameters())
            loss = loss + torch.sqrt(weight - weight).sum()
        return loss

    monkeypatch.setattr(train_module, "next_token_loss", nan_gradient)
    run_dir = tmp_path / "run"
    result = train_cli(prepared_data, run_dir, "--updates", "4", "--eval-every", "2")
    assert diverged_update(result, run_dir, "gradient norm is nan") == 2
    assert "at update 3;" in result.stderr
    assert list(assert_nothing_non_finite(run_dir, 2)["step"]) == [0, 2]


@pytest.mark.slow
def test_non_finite_weights_after_a_step_are_never_recorded(prepared_data, tmp_path, monkeypatch):
    """The optimizer step of update 4 (a curve update) leaves an infinite weight: no row 4, no checkpoint 4."""
    original = train_module.make_optimizer

    def poisoning(model, lr, device):
        optimizer = original(model, lr, device)
        step = optimizer.step
        steps = []

        def poisoned_step(*args, **kwargs):
            result = step(*args, **kwargs)
            steps.append(1)
            if len(steps) == 4:
                with torch.no_grad():
                    model.embed.weight[0, 0] = math.inf
            return result

        optimizer.step = poisoned_step
        return optimizer

    monkeypatch.setattr(train_module, "make_optimizer", poisoning)
    run_dir = tmp_path / "run"
    result = train_cli(prepared_data, run_dir, "--updates", "6", "--eval-every", "2")
    assert diverged_update(result, run_dir, r"embed\.weight holds non-finite values") == 2
    assert "at update 4;" in result.stderr
    assert list(assert_nothing_non_finite(run_dir, 2)["step"]) == [0, 2]


@pytest.mark.slow
def test_a_non_finite_development_nll_is_never_appended(prepared_data, tmp_path, monkeypatch):
    calls = []
    original = train_module.document_loss_sums

    def infinite_second_time(*args, **kwargs):
        calls.append(1)
        sums = original(*args, **kwargs)
        return sums * math.inf if len(calls) == 2 else sums

    monkeypatch.setattr(train_module, "document_loss_sums", infinite_second_time)
    run_dir = tmp_path / "run"
    result = train_cli(prepared_data, run_dir, "--updates", "4", "--eval-every", "2")
    assert diverged_update(result, run_dir, "development NLL is inf") == 0
    assert "at update 2;" in result.stderr
    assert list(assert_nothing_non_finite(run_dir, 0)["step"]) == [0]


def _as_before_checkpoints_were_recorded(run_dir) -> None:
    """A run whose run.json records no hash of its checkpoint (trained before they were), so that the checkpoint
    written here by hand is read as it is (else it is refused as damaged first)."""
    from gatedv_stats.io.runrecords import update_run_record

    update_run_record(run_dir, {}, drop=("checkpoint_sha256", "previous_checkpoint_sha256"))


@pytest.mark.slow
def test_resume_refuses_a_non_finite_checkpoint_in_one_line(prepared_data, tmp_path):
    run_dir = tmp_path / "run"
    assert train_cli(prepared_data, run_dir, "--updates", "4", "--eval-every", "2", "--stop-after", "2").exit_code == 0
    path = run_dir / "checkpoint.pt"
    payload = torch.load(path, weights_only=True)
    payload["model"]["embed.weight"][3, 5] = math.nan  # as a checkpoint written before these checks could be
    torch.save(payload, path)
    _as_before_checkpoints_were_recorded(run_dir)
    result = train_cli(prepared_data, run_dir, "--updates", "4", "--eval-every", "2", "--resume")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.strip() == (f"error: {path}: embed.weight holds non-finite values (update 2); a diverged "
                                     "run cannot be resumed, train it again")
    assert torch.load(path, weights_only=True)["update"] == 2  # left as it was


@pytest.mark.slow
def test_resume_also_checks_the_optimizer_state(prepared_data, tmp_path):
    run_dir = tmp_path / "run"
    assert train_cli(prepared_data, run_dir, "--updates", "4", "--eval-every", "2", "--stop-after", "2").exit_code == 0
    path = run_dir / "checkpoint.pt"
    payload = torch.load(path, weights_only=True)
    payload["optimizer"]["state"][0]["exp_avg_sq"].fill_(math.inf)
    torch.save(payload, path)
    _as_before_checkpoints_were_recorded(run_dir)
    result = train_cli(prepared_data, run_dir, "--updates", "4", "--eval-every", "2", "--resume")
    assert result.exit_code == 2
    assert "optimizer state 0.exp_avg_sq holds non-finite values (update 2)" in result.stderr


@pytest.mark.parametrize("tensors, expected", [
    ({"a": torch.ones(3), "b": torch.tensor([1.0, math.inf]), "c": torch.tensor([math.nan])}, "b"),
    ({"a": torch.ones(3), "steps": torch.tensor([2**40])}, None),  # integer tensors cannot hold NaN
    ({}, None),
])
def test_non_finite_state_names_the_first_bad_tensor(tensors, expected):
    assert non_finite_state(tensors, {}) == expected
    assert non_finite_state({}, {"state": {0: {"step": torch.tensor(1.0), "exp_avg": tensors.get("b", torch.ones(1))}},
                                 "param_groups": []}) == (None if expected is None else "optimizer state 0.exp_avg")
