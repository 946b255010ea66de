"""Data parallel under torchrun: two gloo processes, each with half of the same global batch, give the
single-process curve and weights within float tolerance; a run that rank 0 refuses ends every rank at once."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from interrupting import STOPS, stop_while_training
from trainer.run.checkpoint import load_checkpoint
from trainer.run.recipe import RunSpec, Runtime
from trainer.run.train import train

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_two_gloo_processes_match_one_process(prepared_data, tmp_path):
    args = dict(lr=0.01, updates=4, eval_every=2, batch_size=2)
    single = tmp_path / "single"
    train(RunSpec.make(prepared_data, "tiny", "gatedv", 5, **args), single,
          runtime=Runtime(device="cpu", progress=False))

    parallel = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
               f"--log-dir={tmp_path / 'torchrun'}", str(ROOT / "cli.py"), "train", "--data", str(prepared_data),
               "--config", "tiny", "--variant", "gatedv",
               "--seed", "5", "--lr", "0.01", "--updates", "4", "--eval-every", "2", "--batch-size", "2",
               "--device", "cpu", "--out", str(parallel), "--json"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count('"status": "finished"') == 1  # only rank 0 reports

    one, two = pd.read_csv(single / "curve.csv"), pd.read_csv(parallel / "curve.csv")
    assert list(one["step"]) == list(two["step"]) == [0, 2, 4]
    pd.testing.assert_series_equal(one["dev_nll"], two["dev_nll"], rtol=1e-5, atol=0)
    pd.testing.assert_series_equal(one["train_loss"], two["train_loss"], rtol=1e-5, atol=0)
    a, b = load_checkpoint(single / "checkpoint.pt").model, load_checkpoint(parallel / "checkpoint.pt").model
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        # Adam divides by sqrt(v): where a gradient is near zero, reduction-order rounding can move an element
        # by up to lr per update. So nearly every element must agree closely, and none by more than lr × updates.
        close = torch.isclose(x, y, rtol=1e-4, atol=1e-5)
        assert close.float().mean() > 0.9999, (name, int((~close).sum()))
        assert (x - y).abs().max() <= args["lr"] * args["updates"], name
    assert two["dev_nll"].iloc[-1] < two["dev_nll"].iloc[0]  # the processes did train


def _torchrun_train(prepared_data, out, log_dir, *options) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
            f"--log-dir={log_dir}", str(ROOT / "cli.py"), "train", "--data", str(prepared_data), "--config", "tiny",
            "--variant", "gatedv", "--seed", "6", "--batch-size", "2", "--updates", "100000", "--eval-every",
            "100000", "--device", "cpu", "--out", str(out), *options]


@pytest.mark.parametrize("stop", STOPS)
def test_an_interrupted_data_parallel_run_stops_every_rank_after_the_same_update_and_resumes_bit_for_bit(
        prepared_data, tmp_path, stop):
    """Ctrl-C reaches torchrun and its ranks (and torchrun passes it on again); `kill` reaches torchrun, which
    passes SIGTERM on. The ranks agree on the update to stop after, and rank 0 writes its checkpoint first."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    interrupted = tmp_path / "interrupted"
    process, stderr, _ = stop_while_training(_torchrun_train(prepared_data, interrupted, tmp_path / "logs1"),
                                             [interrupted], stop, settle=1.5, cwd=ROOT, env=env)
    assert process.returncode != 0, stderr[-2000:]
    update = load_checkpoint(interrupted / "checkpoint.pt").extra["update"]
    assert update > 0, stderr[-2000:]  # the update in progress, not the checkpoint of update 0

    target = ["--stop-after", str(update + 2)]
    resumed = subprocess.run(_torchrun_train(prepared_data, interrupted, tmp_path / "logs2", "--resume", *target),
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    straight = tmp_path / "straight"
    done = subprocess.run(_torchrun_train(prepared_data, straight, tmp_path / "logs3", *target), cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    one, two = load_checkpoint(interrupted / "checkpoint.pt"), load_checkpoint(straight / "checkpoint.pt")
    assert one.extra["update"] == two.extra["update"] == update + 2
    for (name, x), y in zip(one.model.state_dict().items(), two.model.state_dict().values()):
        assert torch.equal(x, y), name


SCHEDULER_RANK = """
import os, signal, sys
from pathlib import Path
from trainer.run.checkpoint import load_checkpoint

run_dir, rank = Path(sys.argv[1]), int(os.environ["RANK"])


def save_and_requeue(signum, frame):  # as submitit's handler: rank 0 requeues the job and exits, the others return
    (run_dir.parent / f"seen{rank}").write_text(str(load_checkpoint(run_dir / "checkpoint.pt").extra["update"]))
    if rank == 0:
        raise SystemExit(3)


signal.signal(signal.SIGUSR1, save_and_requeue)
(run_dir.parent / f"pid{rank}").write_text(str(os.getpid()))
sys.argv = ["gatedv", *sys.argv[2:]]
import cli
cli.app()
"""


def test_a_schedulers_save_signal_finds_a_checkpoint_of_the_update_in_progress_on_every_rank(prepared_data, tmp_path):
    """A cluster's "save and requeue" signal reaches each task of a data-parallel job; the ranks agree to
    checkpoint the update in progress before any handler runs, so rank 0's requeue keeps it."""
    script = tmp_path / "scheduler_rank.py"
    script.write_text(SCHEDULER_RANK)
    run_dir = tmp_path / "runs" / "run"
    run_dir.parent.mkdir()
    command = _torchrun_train(prepared_data, run_dir, tmp_path / "logs")
    at = command.index(str(ROOT / "cli.py"))
    command[at : at + 1] = [str(script), str(run_dir)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    pids = [run_dir.parent / f"pid{rank}" for rank in (0, 1)]
    deadline = time.monotonic() + 120
    while not ((run_dir / "curve.csv").is_file() and all(p.is_file() for p in pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.5)
    for pid in pids:
        os.kill(int(pid.read_text()), signal.SIGUSR1)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode != 0, stderr[-2000:]  # rank 0 left, as a requeued job does

    update = load_checkpoint(run_dir / "checkpoint.pt").extra["update"]
    assert update > 0, stderr[-2000:]  # the update in progress, not the checkpoint of update 0
    assert int((run_dir.parent / "seen0").read_text()) == update
    # rank 1's signal may have come one update before rank 0's: then both checkpointed that update first
    assert update - 1 <= int((run_dir.parent / "seen1").read_text()) <= update


LAUNCH = """
import json, sys
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.run import parse_args, run
try:
    run(parse_args(sys.argv[1:]))
except ChildFailedError as failed:  # each rank's exit code as torchrun saw it (a signal's: minus its number)
    print(json.dumps({rank: failure.exitcode for rank, failure in failed.failures.items()}))
else:
    print("{}")
"""

HOLD_RUN = """
import sys, time
from gatedv_stats.core.locks import run_lock
with run_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(600)
"""


@pytest.mark.parametrize("refusal", ["held by another writer", "already holding a run"])
def test_a_run_refused_before_training_ends_every_rank_within_seconds_in_one_line_and_one_code(
        prepared_data, tmp_path, refusal):
    """Rank 0 alone holds the run's lock; when another process holds it, every rank learns so from rank 0 and ends
    as it does, instead of waiting for it in a collective. A run refused by every rank's own check ends alike."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    holder = None
    if refusal == "held by another writer":
        holder = subprocess.Popen([sys.executable, "-c", HOLD_RUN, str(run_dir)], cwd=ROOT, stdout=subprocess.PIPE,
                                  text=True)
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        message = f"error: {run_dir}: is being trained or evaluated by pid {holder.pid} on "
    else:
        (run_dir / "checkpoint.pt").write_bytes(b"")  # refused before it is read
        message = f"error: {run_dir}: already holds a run; pass --resume"
    before = sorted(path.name for path in run_dir.iterdir())
    command = _torchrun_train(prepared_data, run_dir, tmp_path / "logs")
    command[1:3] = ["-c", LAUNCH]  # torchrun itself, reporting each rank's exit code
    try:
        began = time.monotonic()
        done = subprocess.run(command, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True,
                              text=True, timeout=300)
        seconds = time.monotonic() - began
    finally:
        if holder is not None:
            holder.kill()
            holder.communicate()
    assert json.loads(done.stdout.splitlines()[-1]) == {"0": 2, "1": 2}, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 2 and lines[0] == lines[1] and lines[0].startswith(message), lines
    assert seconds < 20  # torchrun and its two ranks started and ended; before, rank 1 waited 30 s for SIGKILL
    assert sorted(path.name for path in run_dir.iterdir()) == before  # nothing of the run touched
