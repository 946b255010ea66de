"""N updates straight equal N/2 + resume + N/2, bit for bit on the CPU (weights, optimizer, curve)."""

import pytest
import torch
from typer.testing import CliRunner

import cli
from trainer.run.checkpoint import load_checkpoint
from trainer.run.recipe import RunSpec, Runtime
from trainer.run.train import train

pytestmark = pytest.mark.slow

QUIET = Runtime(device="cpu", progress=False)


def _spec(data, **changes):
    return RunSpec.make(data, "tiny", "gatedv", 3, lr=0.01, updates=6, eval_every=2, batch_size=2, **changes)


@pytest.fixture(scope="module")
def straight_and_resumed(prepared_data, tmp_path_factory):
    straight = tmp_path_factory.mktemp("straight")
    train(_spec(prepared_data), straight, runtime=QUIET)
    resumed = tmp_path_factory.mktemp("resumed")
    # Stop after update 3, between two curve rows, so the window of training losses is carried over too.
    first = train(_spec(prepared_data), resumed, runtime=QUIET, stop_after=3)
    assert first.status == "stopped" and first.update == 3
    assert load_checkpoint(resumed / "checkpoint.pt").extra["update"] == 3
    second = train(_spec(prepared_data), resumed, runtime=QUIET, resume=True)
    assert second.status == "finished" and second.update == 6
    return straight, resumed


def test_resumed_run_equals_the_straight_run_bit_for_bit(straight_and_resumed):
    straight, resumed = straight_and_resumed
    a, b = load_checkpoint(straight / "checkpoint.pt"), load_checkpoint(resumed / "checkpoint.pt")
    for name, tensor in a.model.state_dict().items():
        assert torch.equal(tensor, b.model.state_dict()[name]), name
    for key, state in a.extra["optimizer"]["state"].items():
        for field, value in state.items():
            assert torch.equal(value, b.extra["optimizer"]["state"][key][field]), (key, field)
    assert (straight / "curve.csv").read_bytes() == (resumed / "curve.csv").read_bytes()
    assert a.extra["update"] == b.extra["update"] == 6


def test_resume_refuses_a_different_run(straight_and_resumed, prepared_data):
    _, resumed = straight_and_resumed
    result = CliRunner().invoke(cli.app, ["train", "--data", str(prepared_data), "--config", "tiny", "--variant",
                                          "gatedv", "--seed", "3", "--lr", "0.02", "--updates", "6", "--eval-every",
                                          "2", "--batch-size", "2", "--out", str(resumed), "--resume"])
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"error: {resumed / 'checkpoint.pt'}: the checkpoint's run differs "
                                     "(lr 0.01 != 0.02)")


def test_a_run_resumes_only_in_the_precision_it_was_trained_in(prepared_data, tmp_path):
    """bf16 autocast changes the numbers: half a run in bf16 and half in FP32 would be neither."""
    from trainer.run.device import Precision

    bf16 = Runtime(device="cpu", progress=False, precision=Precision(bf16=True))
    assert train(_spec(prepared_data), tmp_path, runtime=bf16, stop_after=2).update == 2
    assert load_checkpoint(tmp_path / "checkpoint.pt").extra["precision"] == {"tf32": False, "bf16": True}
    result = CliRunner().invoke(cli.app, ["train", "--data", str(prepared_data), "--config", "tiny", "--variant",
                                          "gatedv", "--seed", "3", "--lr", "0.01", "--updates", "6", "--eval-every",
                                          "2", "--batch-size", "2", "--device", "cpu", "--out", str(tmp_path),
                                          "--resume"])
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"error: {tmp_path / 'checkpoint.pt'}: trained in bf16 autocast, resumed in "
                                     "FP32; resume with the precision it was trained with (--bf16, --tf32 as before) "
                                     "so that one run is not two")
    assert train(_spec(prepared_data), tmp_path, runtime=bf16, resume=True).status == "finished"


def test_a_moved_copy_of_the_data_directory_resumes_the_run(prepared_data, tmp_path):
    """The data a run trained on is identified by its manifest, not by its path."""
    import shutil

    run = tmp_path / "run"
    assert train(_spec(prepared_data), run, runtime=QUIET, stop_after=3).update == 3
    moved = shutil.copytree(prepared_data, tmp_path / "moved-data")
    resumed = train(_spec(moved), run, runtime=QUIET, resume=True)
    assert resumed.status == "finished" and load_checkpoint(run / "checkpoint.pt").extra["run"]["data"] == str(moved)
