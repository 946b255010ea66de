"""Two writers, as real processes: a second `gatedv sweep` over the same grid trains only the runs the first is not
holding (each run's directory is locked by whoever trains it), a lock left by a killed sweep is taken over, a second
`gatedv train` into a run being trained is refused in one line, and two `gatedv report`s of the same file write one
after the other."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments import write_runs
from gatedv_stats.core.locks import RUN_LOCK_NAME
from gatedv_stats.io.lossfiles import read_loss_file
from gatedv_stats.io.runrecords import read_run_record
from gatedv_stats.testing import ppls_with_moments
from trainer.grid.experiment import load_experiment
from trainer.run.checkpoint import load_checkpoint

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
GRID = """
name = "grid"
data = "{data}"
config = "tiny"
variants = ["baseline"]
seeds = {seeds}
lrs = [0.001]
updates = {updates}
eval_every = {updates}
batch_size = 2
out = "runs"
"""


HOLD_OUTPUT = """
import sys, time
from gatedv_stats.core.locks import output_lock
with output_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(15)
"""


def gatedv(*args: object, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ROOT / "cli.py"), *map(str, args)], cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for(path: Path, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def grid_file(tmp_path: Path, data: Path, seeds: list[int], updates: int) -> Path:
    path = tmp_path / "grid.toml"
    path.write_text(GRID.format(data=data, seeds=seeds, updates=updates))
    return path


def finished_and_verified(run_dir: Path) -> None:
    assert read_run_record(run_dir)["status"] == "finished"
    load_checkpoint(run_dir / "checkpoint.pt")  # verified against run.json
    read_loss_file(run_dir / "dev.parquet")  # verified against its content hash
    assert not (run_dir / RUN_LOCK_NAME).exists()


def test_a_second_sweep_trains_only_the_runs_the_first_is_not_holding(prepared_data, tmp_path):
    grid = grid_file(tmp_path, prepared_data, [1, 2], 100)
    first_run, second_run = load_experiment(grid).runs()
    first = gatedv("sweep", grid, "--device", "cpu", "--jobs", "1", "--json", cwd=tmp_path)
    wait_for(first_run.run_dir / "curve.csv")  # the first sweep is training the first run
    second = gatedv("sweep", grid, "--device", "cpu", "--jobs", "1", "--json", cwd=tmp_path)
    outputs = [process.communicate(timeout=600) for process in (first, second)]
    assert [process.returncode for process in (first, second)] == [0, 0], outputs
    actions = [{run["seed"]: run["action"] for run in json.loads(stdout)["runs"]} for stdout, _ in outputs]
    assert actions[1][1] == "held"  # the second sweep left the first run to the first sweep
    for seed in (1, 2):  # each run trained once, by one of them
        assert sorted(sweep[seed] for sweep in actions).count("trained") == 1, actions
    assert (f"warning: {first_run.run_dir}: is being trained or evaluated by pid {first.pid} on "
            f"{socket.gethostname()}") in outputs[1][1]
    for run in (first_run, second_run):
        finished_and_verified(run.run_dir)


def test_the_lock_of_a_killed_sweep_is_taken_over(prepared_data, tmp_path):
    grid = grid_file(tmp_path, prepared_data, [1], 40)
    (run,) = load_experiment(grid).runs()
    killed = gatedv("sweep", grid, "--device", "cpu", "--jobs", "1", cwd=tmp_path)
    wait_for(run.run_dir / "checkpoint.pt")
    killed.send_signal(signal.SIGKILL)
    killed.communicate(timeout=60)
    assert json.loads((run.run_dir / RUN_LOCK_NAME).read_text())["pid"] == killed.pid  # left behind
    again = gatedv("sweep", grid, "--device", "cpu", "--jobs", "1", "--json", cwd=tmp_path)
    stdout, stderr = again.communicate(timeout=600)
    assert again.returncode == 0, stderr
    assert json.loads(stdout)["runs"][0]["action"] == "resumed"
    assert (f"warning: {run.run_dir}: took over the lock of pid {killed.pid} on {socket.gethostname()} (since "
            in stderr)
    finished_and_verified(run.run_dir)


def test_a_second_train_into_a_run_being_trained_is_refused_in_one_line(prepared_data, tmp_path):
    run_dir = tmp_path / "run"
    args = ("train", "--data", prepared_data, "--config", "tiny", "--seed", "1", "--batch-size", "2", "--updates",
            "100000", "--eval-every", "100000", "--device", "cpu", "--out", run_dir)
    first = gatedv(*args, cwd=tmp_path)
    try:
        wait_for(run_dir / "checkpoint.pt")
        second = gatedv(*args, "--resume", cwd=tmp_path)
        _, stderr = second.communicate(timeout=300)
        assert second.returncode == 2
        (line,) = stderr.strip().splitlines()
        assert line.startswith(f"error: {run_dir}: is being trained or evaluated by pid {first.pid} on "
                               f"{socket.gethostname()} (since ")
        assert line.endswith("); wait for it to finish, or choose another --out")
    finally:
        first.terminate()  # SIGTERM: it checkpoints the update in progress and releases the lock
        first.communicate(timeout=120)
    assert first.returncode == 143 and not (run_dir / RUN_LOCK_NAME).exists()


def test_two_reports_of_the_same_file_write_one_after_the_other(tmp_path):
    studies = []
    for number, gain in enumerate((0.5, 2.0)):
        study = tmp_path / f"study{number}"
        write_runs(study, {"baseline": ppls_with_moments(59.1, 0.5, 3),
                           "gatedv": ppls_with_moments(59.1 - gain, 0.8, 3)}, eval_set="heldout", lr=0.001)
        studies.append(study)
    alone = []
    for number, study in enumerate(studies):  # each report written alone, for comparison
        out = tmp_path / f"alone{number}" / "report.md"
        done = subprocess.run([sys.executable, str(ROOT / "cli.py"), "report", study, "--out", out, "--samples",
                               "100"], cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        alone.append(out.read_text())
    out = tmp_path / "shared" / "report.md"
    out.parent.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLD_OUTPUT, str(out)], cwd=ROOT, stdout=subprocess.PIPE,
                              text=True)  # a third writer of the file, holding it for 15 s
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    reports = [gatedv("report", study, "--out", out, "--samples", "100", cwd=tmp_path) for study in studies]
    time.sleep(12)  # each report alone takes about 5 s here
    assert not out.exists() and all(report.poll() is None for report in reports)  # both wait for the holder
    holder.communicate(timeout=60)
    outputs = [report.communicate(timeout=600) for report in reports]
    assert [report.returncode for report in reports] == [0, 0], outputs
    assert out.read_text() in alone  # one whole report, of one of them
    assert sorted(path.name for path in out.parent.iterdir()) == ["report.md", "report_figures"]  # no lock left
