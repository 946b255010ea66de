"""Failures outside the inputs — a device out of memory, a worker process killed, a launcher that fails — end as
one `error:` line and exit 4, keep what was finished, and a sweep goes on past a run that failed."""

import os
import random
import signal
import sys
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import cli
import trainer.hf.evaluate as hf_evaluate
import trainer.run.evaluate as evaluate_module
import trainer.run.train as train_module
from gatedv_stats.core.errors import RunFailure
from gatedv_stats.core.files import file_sha256
from gatedv_stats.io.curvefiles import read_curve_file
from gatedv_stats.io.lossfiles import read_loss_file
from gatedv_stats.io.runrecords import read_run_record
from interrupting import KILL_9, STOPS, stop_signal, stop_while_training
from tiny_hf import save_byte_gpt2
from trainer.grid import grid_run, launch, sweep
from trainer.grid.experiment import load_experiment
from trainer.run.checkpoint import load_checkpoint
from trainer.run.device import out_of_memory_as
from trainer.run.evaluate import evaluate_checkpoint
from trainer.run.recipe import RunSpec, Runtime
from trainer.run.train import train

GRID = """
name = "grid"
data = "{data}"
config = "tiny"
variants = ["baseline"]
seeds = [1, 2]
lrs = [0.001]
updates = 2
eval_every = 2
batch_size = 2
out = "runs"
"""
ROOT = Path(__file__).resolve().parents[2]
OUT_OF_MEMORY = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which "
                 "1.20 GiB is free.\nOf the allocated memory ...")


def _gpu_out_of_memory():
    raise torch.OutOfMemoryError(OUT_OF_MEMORY)


def _host_out_of_memory():
    torch.empty(1 << 58, dtype=torch.uint8)  # 256 PiB, beyond any address space: torch's CPU allocator refuses


RUNNING_OUT = pytest.mark.parametrize("run_out, cause", [
    (_gpu_out_of_memory, "CUDA out of memory. Tried to allocate 2.00 GiB"),
    (_host_out_of_memory, "can't allocate memory: tried to allocate 256.00 PiB"),
], ids=["gpu", "host"])


def _one_error_line(result, exit_code: int) -> str:
    assert result.exit_code == exit_code, result.output
    lines = result.stderr.strip().splitlines()  # progress bars first, then the error
    assert [line for line in lines if line.startswith("error")] == lines[-1:], result.stderr
    assert "Traceback" not in result.output
    return lines[-1]


@pytest.fixture
def grid(prepared_data, tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text(GRID.format(data=prepared_data))
    return path


def _die(run, runtime, gpus_per_run, environment=None):
    """A worker killed in the middle of a run, as the out-of-memory killer would."""
    os.kill(os.getpid(), signal.SIGKILL)


def _fail_seed_1(run, runtime, gpus_per_run, environment=None):
    """Seed 1 fails as a device out of memory would; the other runs train."""
    if run.seed == 1:
        raise RunFailure(f"{run.run_dir}: out of memory on cuda:0 after update 1 (CUDA out of memory)")
    return grid_run.run_one(run, runtime)


@pytest.mark.slow
def test_a_killed_worker_ends_the_sweep_in_one_line(grid, monkeypatch):
    monkeypatch.setattr(sweep, "_run_in_worker", _die)
    result = CliRunner().invoke(cli.app, ["sweep", str(grid), "--device", "cpu", "--jobs", "2"])
    line = _one_error_line(result, 4)
    assert line.startswith("error: sweep grid: 2 of 2 runs did not finish (first ")
    assert "lost with the worker processes: one of them ended abruptly" in line
    assert "run the same command again" in line


@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.slow
def test_a_failed_run_does_not_stop_the_others(grid, monkeypatch, jobs):
    monkeypatch.setattr(sweep, "_run_in_worker", _fail_seed_1)
    experiment = load_experiment(grid)
    with pytest.raises(RunFailure) as failure:
        sweep.run_experiment(experiment, jobs=jobs, runtime=Runtime(device="cpu", progress=False))
    first, second = experiment.runs()
    assert str(failure.value).startswith(f"sweep grid: 1 of 2 runs did not finish (first {first.run_dir}: out of "
                                         "memory on cuda:0")
    assert "the finished ones are kept" in str(failure.value)
    assert read_run_record(second.run_dir)["status"] == "finished"
    assert (second.run_dir / "dev.parquet").is_file()


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads process states from /proc")
@pytest.mark.parametrize("stop", STOPS)
@pytest.mark.slow
def test_an_interrupted_sweep_stops_its_workers_at_once(prepared_data, tmp_path, stop):
    """Ctrl-C reaches the terminal's whole process group; `kill PID` (SIGTERM) the sweep's process alone. Each
    worker writes a checkpoint of the update in progress before it ends."""
    grid = tmp_path / "long.toml"
    grid.write_text(GRID.format(data=prepared_data).replace("updates = 2", "updates = 100000")
                    .replace("eval_every = 2", "eval_every = 100000"))  # no periodic checkpoint after update 0
    sweep_command = [sys.executable, str(ROOT / "cli.py"), "sweep", str(grid), "--device", "cpu", "--jobs", "2"]
    runs = load_experiment(grid).runs()
    process, stderr, seconds = stop_while_training(sweep_command, [run.run_dir for run in runs], stop, settle=1,
                                                   cwd=tmp_path)
    assert seconds < 30  # not the 100,000 updates of the runs in progress
    signal_number = stop_signal(stop)
    assert process.returncode == 128 + signal_number, stderr
    assert stderr.strip().splitlines()[-1] == f"error: interrupted ({signal_number.name}); {cli.INTERRUPTED}"
    assert "Traceback" not in stderr
    deadline = time.monotonic() + 10
    while _group_alive(process.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _group_alive(process.pid)  # no worker left behind
    assert [read_run_record(run.run_dir)["status"] for run in runs] == ["running", "running"]  # as a kill leaves it
    updates = [load_checkpoint(run.run_dir / "checkpoint.pt").extra["update"] for run in runs]
    assert min(updates) > 0
    status = CliRunner().invoke(cli.app, ["sweep", str(grid), "--status"])
    assert "2 runs (2 interrupted)" in status.stdout, status.output
    for update in updates:  # the update of each run's checkpoint, not of its last curve row (update 0)
        assert f" {update}/100000 " in status.stdout, status.output


def _group_alive(group: int) -> bool:
    """Whether a process of the group still runs; a zombie has ended (only its parent's wait is missing)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _, process_group = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue  # ended while being read
        if int(process_group) == group and state not in ("Z", "X"):
            return True
    return False


@pytest.mark.slow
def test_a_failed_torchrun_is_a_run_failure(grid, monkeypatch):
    monkeypatch.setattr(launch, "torchrun_command",
                        lambda job_file, outcome_file, nproc, log_dir: [sys.executable, "-c", "raise SystemExit(3)"])
    run = load_experiment(grid).runs()[0]
    with pytest.raises(RunFailure, match=r"torchrun with 2 processes exited with 3 \(its stderr is above\)"):
        launch.run_distributed(run, Runtime(device="cpu", progress=False), 2)


@pytest.mark.parametrize("stop, settle", [(stop, 1.5) for stop in STOPS] + [
    (KILL_9, round(random.Random(seed).uniform(0.0, 2.5), 2)) for seed in (1, 2, 3)])  # a random point of the run
@pytest.mark.slow
def test_an_interrupted_run_keeps_the_update_in_progress_and_resumes_bit_for_bit(prepared_data, tmp_path, stop,
                                                                                  settle):
    """Ctrl-C and `kill` checkpoint the update in progress; `kill -9`, at any point (a checkpoint every update, so
    often in the middle of a write), leaves the files of the last one written, each verified against run.json."""
    every = "1" if stop == KILL_9 else "100000"
    args = ["--data", str(prepared_data), "--config", "tiny", "--variant", "gatedv", "--seed", "3",
            "--batch-size", "2", "--updates", "100000", "--eval-every", every, "--device", "cpu"]
    interrupted = tmp_path / "interrupted"
    process, stderr, _ = stop_while_training([sys.executable, str(ROOT / "cli.py"), "train", *args, "--out",
                                              str(interrupted)], [interrupted], stop, settle=settle)
    signal_number = stop_signal(stop)
    if stop == KILL_9:
        assert process.returncode == -signal_number, stderr
        assert read_run_record(interrupted)["status"] == "running"  # sealed, and checked against its seal
        update = load_checkpoint(interrupted / "checkpoint.pt").extra["update"]  # verified against run.json
        assert int(read_curve_file(interrupted / "curve.csv")["step"].max()) in (update, update + 1)
        assert {path.name for path in interrupted.iterdir() if not path.name.endswith(".tmp")} == {
            "run.json", "checkpoint.pt", "curve.csv", ".run.lock"}  # the killed process's lock: taken over
    else:
        assert process.returncode == 128 + signal_number, stderr
        assert stderr.strip().splitlines()[-1] == f"error: interrupted ({signal_number.name}); {cli.INTERRUPTED}"
        update = load_checkpoint(interrupted / "checkpoint.pt").extra["update"]
        assert update > 0  # not the periodic checkpoint of update 0: the update in progress when the signal came

    resumed = CliRunner().invoke(cli.app, ["train", *args, "--out", str(interrupted), "--resume",
                                           "--stop-after", str(update + 2)])
    assert resumed.exit_code == 0, resumed.output
    assert not [path for path in interrupted.iterdir() if path.name.endswith(".tmp")]  # a killed write's, removed
    straight = tmp_path / "straight"
    done = CliRunner().invoke(cli.app, ["train", *args, "--out", str(straight), "--stop-after", str(update + 2)])
    assert done.exit_code == 0, done.output
    one, two = load_checkpoint(interrupted / "checkpoint.pt"), load_checkpoint(straight / "checkpoint.pt")
    assert one.extra["update"] == two.extra["update"] == update + 2
    for (name, x), y in zip(one.model.state_dict().items(), two.model.state_dict().values()):
        assert torch.equal(x, y), name


@RUNNING_OUT
@pytest.mark.slow
def test_out_of_memory_in_training_is_one_line_and_the_run_resumes(prepared_data, tmp_path, monkeypatch, run_out,
                                                                   cause):
    run_dir = tmp_path / "run"
    args = ["train", "--data", str(prepared_data), "--config", "tiny", "--seed", "1", "--batch-size", "2",
            "--updates", "4", "--eval-every", "2", "--out", str(run_dir), "--device", "cpu"]
    calls = []
    original = train_module.next_token_loss

    def out_of_memory_at_update_3(model, batch):
        calls.append(1)
        if len(calls) == 3:
            run_out()
        return original(model, batch)

    monkeypatch.setattr(train_module, "next_token_loss", out_of_memory_at_update_3)
    line = _one_error_line(CliRunner().invoke(cli.app, args), 4)
    assert line == (f"error: {run_dir}: out of memory on cpu after update 2 ({cause}); its checkpoint of update 2 "
                    "is kept: free the device's memory and resume (gatedv train --resume, or the same sweep again)")
    resumed = CliRunner().invoke(cli.app, [*args, "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert read_run_record(run_dir)["status"] == "finished" and read_run_record(run_dir)["update"] == 4


@pytest.mark.slow  # trains
@pytest.mark.parametrize("error, cause", [
    (torch.OutOfMemoryError(OUT_OF_MEMORY), "CUDA out of memory. Tried to allocate 2.00 GiB"),
    (MemoryError("Unable to allocate 7.63 TiB for an array"), "host memory: Unable to allocate 7.63 TiB for an array"),
], ids=["gpu", "host"])
def test_out_of_memory_leaves_run_json_failed_with_the_reason(prepared_data, tmp_path, monkeypatch, error, cause):
    """run.json says `failed` and why, not `running` as a killed process leaves it; resuming clears the reason."""
    spec = RunSpec.make(prepared_data, "tiny", "baseline", 1, updates=4, eval_every=2, batch_size=2)
    run_dir = tmp_path / "run"
    step = train_module._Loop._step

    def out_of_memory_after_update_3(self, *args):
        if self.update == 3:
            raise error
        return step(self, *args)

    monkeypatch.setattr(train_module._Loop, "_step", out_of_memory_after_update_3)
    with pytest.raises(RunFailure, match=r"out of memory on cpu after update 3 \("):
        train(spec, run_dir, runtime=Runtime(device="cpu", progress=False))
    record = read_run_record(run_dir)
    assert (record["status"], record["update"], record["checkpoint_update"]) == ("failed", 3, 2)
    assert record["reason"] == f"out of memory on cpu after update 3 ({cause})"
    assert not list(run_dir.glob(".*.tmp"))  # written atomically, as every status
    monkeypatch.undo()
    resumed = train(spec, run_dir, runtime=Runtime(device="cpu", progress=False), resume=True)
    record = read_run_record(run_dir)
    assert (resumed.status, record["status"], record["update"]) == ("finished", "finished", 4)
    assert "reason" not in record


def test_a_model_too_big_for_memory_is_one_line(prepared_data, tmp_path):
    """Its first weight matrix (64 × 2⁴⁹ floats, 2⁵⁷ bytes) is beyond any address space: refused on every machine."""
    run_dir = tmp_path / "run"
    result = CliRunner().invoke(cli.app, [
        "train", "--data", str(prepared_data), "--config", "tiny", "--variant", "wide", "--knob",
        "d_ff=281474976710656", "--seed", "1", "--updates", "2", "--out", str(run_dir), "--device", "cpu"])
    line = _one_error_line(result, 4)
    assert line.startswith(f"error: {run_dir}: out of memory on cpu building the model (can't allocate memory: "
                           "tried to allocate ")
    assert line.endswith("); no checkpoint was written yet: free the device's memory and start it again")


@RUNNING_OUT
@pytest.mark.slow
def test_out_of_memory_in_evaluation_is_one_line(prepared_data, tmp_path, monkeypatch, run_out, cause):
    run_dir = tmp_path / "run"
    trained = CliRunner().invoke(cli.app, ["train", "--data", str(prepared_data), "--config", "tiny", "--seed", "1",
                                           "--batch-size", "2", "--updates", "2", "--out", str(run_dir),
                                           "--device", "cpu"])
    assert trained.exit_code == 0, trained.output

    monkeypatch.setattr(evaluate_module, "document_loss_sums", lambda *args, **kwargs: run_out())
    out = tmp_path / "dev.parquet"
    result = CliRunner().invoke(cli.app, ["evaluate", str(run_dir / "checkpoint.pt"), "--out", str(out),
                                          "--device", "cpu", "--batch-size", "16"])
    line = _one_error_line(result, 4)
    assert line.endswith(f"out of memory on cpu evaluating the dev set ({cause}); free the device's memory or lower "
                         "--batch-size (16)")
    assert not out.exists()


@RUNNING_OUT
def test_out_of_memory_scoring_a_transformers_model_is_one_line(prepared_data, tmp_path, monkeypatch, run_out, cause):
    model = save_byte_gpt2(tmp_path / "bytes", n_positions=64)
    monkeypatch.setattr(hf_evaluate, "_score_batch", lambda *args, **kwargs: run_out())
    out = tmp_path / "dev.parquet"
    result = CliRunner().invoke(cli.app, ["evaluate", "--hf", str(model), "--data", str(prepared_data), "--out",
                                          str(out), "--device", "cpu", "--batch-size", "4"])
    line = _one_error_line(result, 4)
    assert line == (f"error: {model}: out of memory on cpu ({cause}); free the device's memory or lower --batch-size "
                    "(4) or --context, or load it with --dtype bfloat16")
    assert not out.exists()


def test_other_errors_are_not_taken_for_running_out_of_memory():
    for error in (RuntimeError("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"), ValueError("bad value")):
        with pytest.raises(type(error), match=str(error).split(" (")[0]):
            with out_of_memory_as(lambda cause: RunFailure(cause)):
                raise error


def _signal_self_after_update(monkeypatch, update: int, signum: int) -> None:
    """The training loop sends `signum` to this process at the end of `update`."""
    step = train_module._Loop._step

    def signalling_step(self, *args):
        done = step(self, *args)
        if self.update == update:
            os.kill(os.getpid(), signum)
        return done

    monkeypatch.setattr(train_module._Loop, "_step", signalling_step)


@pytest.mark.slow
def test_a_stop_whose_handler_returns_leaves_the_run_unfinished_and_it_resumes(prepared_data, tmp_path, monkeypatch):
    """A cluster job's own SIGTERM handler (submitit's logs the signal and returns) must not let a stopped run pass
    for finished: no loss files of the half-trained model, and the run resumes to the end later."""
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID.format(data=prepared_data).replace("updates = 2", "updates = 6")
                    .replace("eval_every = 2", "eval_every = 6"))
    run = load_experiment(grid).runs()[0]
    _signal_self_after_update(monkeypatch, 2, signal.SIGTERM)
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        with pytest.raises(RunFailure) as stopped:
            grid_run.run_one(run, Runtime(device="cpu", progress=False))
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert str(stopped.value) == (f"{run.run_dir}: training stopped by SIGTERM after update 2 (its checkpoint is "
                                  "kept); run the same command again to resume it")
    assert not list(run.run_dir.glob("*.parquet"))
    assert load_checkpoint(run.run_dir / "checkpoint.pt").extra["update"] == 2
    # A loss file of the half-trained model, as such a stop once left, is evaluated again once the run finishes.
    early = grid_run.loss_file_path(run.run_dir, "dev")
    evaluate_checkpoint(run.run_dir / "checkpoint.pt", "dev", early, device="cpu", progress=False)
    early_sha256 = read_loss_file(early).meta["checkpoint_sha256"]
    monkeypatch.undo()
    outcome = grid_run.run_one(run, Runtime(device="cpu", progress=False))
    assert (outcome.action, outcome.status) == ("resumed", "finished")
    assert load_checkpoint(run.run_dir / "checkpoint.pt").extra["update"] == 6
    final_sha256 = file_sha256(run.run_dir / "checkpoint.pt")
    assert early_sha256 != final_sha256
    assert read_loss_file(early).meta["checkpoint_sha256"] == final_sha256


@pytest.mark.skipif(not hasattr(signal, "SIGUSR2"), reason="POSIX user signals")
@pytest.mark.parametrize("handler_ends_the_job", [True, False], ids=["requeue-and-exit", "returns"])
@pytest.mark.slow
def test_a_schedulers_save_signal_reaches_its_handler_after_a_checkpoint_of_the_update(prepared_data, tmp_path,
                                                                                        monkeypatch,
                                                                                        handler_ends_the_job):
    """submitit's handler of USR2 (sent before a job's time limit) requeues the job and exits: it must find a
    checkpoint of the update in progress, not of the last curve point. A handler that returns lets training
    go on."""
    spec = RunSpec.make(prepared_data, "tiny", "baseline", 7, updates=6, eval_every=6, batch_size=2)
    run_dir = tmp_path / "run"
    seen = []

    def scheduler_handler(signum, frame):
        seen.append(load_checkpoint(run_dir / "checkpoint.pt").extra["update"])
        if handler_ends_the_job:
            raise SystemExit(-1)

    _signal_self_after_update(monkeypatch, 2, signal.SIGUSR2)
    previous = signal.signal(signal.SIGUSR2, scheduler_handler)
    try:
        if handler_ends_the_job:
            with pytest.raises(SystemExit):
                train(spec, run_dir, runtime=Runtime(device="cpu", progress=False))
        else:
            assert train(spec, run_dir, runtime=Runtime(device="cpu", progress=False)).status == "finished"
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert seen == [2]
    assert signal.getsignal(signal.SIGUSR2) is previous
    if handler_ends_the_job:  # the requeued job goes on from there
        monkeypatch.undo()
        resumed = train(spec, run_dir, runtime=Runtime(device="cpu", progress=False), resume=True)
        assert (resumed.status, resumed.update) == ("finished", 6)


def test_a_batch_too_large_for_the_hosts_memory_is_a_run_failure(prepared_data, tmp_path):
    """NumPy refuses the sampler's index array (terabytes) before torch sees a tensor: one line, exit 4."""
    result = CliRunner().invoke(cli.app, ["train", "--data", str(prepared_data), "--config", "tiny", "--seed", "1",
                                          "--updates", "4", "--batch-size", str(10**12), "--device", "cpu", "--out",
                                          str(tmp_path / "run")])
    assert result.exit_code == 4, result.output
    error = result.stderr.splitlines()[-1]  # after the progress bar
    assert error.startswith(f"error: {tmp_path / 'run'}: out of memory on cpu after update 0 (host memory: Unable to "
                            "allocate ")
    assert "Traceback" not in result.stderr
