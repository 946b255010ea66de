"""Worker pools end with the process that started them: a killed `gatedv sweep` (or a report's analysis) would
otherwise leave its workers finishing their runs and then waiting for work forever, holding memory and GPUs.
Interrupted (Ctrl-C), the process that started them stops them at once."""

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from gatedv_stats.core import workers
from trainer.grid import launch

HERE = Path(__file__).parent
POOLS = {
    "sweep": lambda: launch.worker_pool([{}, {}], threads=1),
    "statistics": lambda: workers.spawn_pool(2),
    "plain": lambda: ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")),
}

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads process states from /proc")


def _busy(directory: str) -> None:
    """A worker's long task: note this worker's pid, then wait on a command that notes its own and sleeps (as
    a worker waits on torchrun)."""
    Path(directory, "busy.pid").write_text(str(os.getpid()))
    child_pid = str(Path(directory, "child.pid"))
    script = f"import os, time; open({child_pid!r}, 'w').write(str(os.getpid())); time.sleep(600)"
    workers.run_child([sys.executable, "-c", script])


def _killed_parent(kind: str, directory: str) -> None:
    """The parent: a pool of two workers, one busy with `_busy` and one idle, whose pids it notes before it
    is killed (SIGKILL: no cleanup of any kind runs)."""
    pool = POOLS[kind]()
    pool.submit(_busy, directory)
    idle = pool.submit(os.getpid).result()
    pids = Path(directory, "busy.pid"), Path(directory, "child.pid")
    while not all(path.is_file() and path.read_text() for path in pids):
        time.sleep(0.05)
    Path(directory, "idle.pid").write_text(str(idle))
    os.kill(os.getpid(), signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")  # a zombie has ended; only its parent's wait is missing


def _orphans_after_killing_the_parent(kind: str, directory: Path, wait: float) -> list[int]:
    """Run `_killed_parent` in its own interpreter; the pids of its workers and of the busy worker's command
    still alive `wait` seconds after it died (at most)."""
    code = f"import test_workers; test_workers._killed_parent({kind!r}, {str(directory)!r})"
    # this module, the tests' helper modules and the project
    paths = [str(HERE), str(HERE.parent), str(HERE.parents[1]), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    with open(directory / "stderr.txt", "wb") as stderr:  # a file, not a pipe: orphans would hold a pipe open
        parent = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL, stderr=stderr,
                                timeout=120)
    assert parent.returncode == -signal.SIGKILL, (directory / "stderr.txt").read_text()
    pids = [int((directory / f"{name}.pid").read_text()) for name in ("busy", "idle", "child")]
    deadline = time.monotonic() + wait
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [pid for pid in pids if _alive(pid)]


@pytest.mark.parametrize("kind", ["sweep", "statistics"])
@pytest.mark.slow
def test_workers_and_their_commands_end_when_the_parent_is_killed(kind, tmp_path):
    left = _orphans_after_killing_the_parent(kind, tmp_path, wait=30)
    for pid in left:  # do not leave them behind when the test fails
        os.kill(pid, signal.SIGKILL)
    assert left == []


@pytest.mark.slow
def test_a_plain_pool_would_leave_its_workers_behind(tmp_path):
    """What the pools above prevent: the busy worker, its command and the idle worker all outlive the parent."""
    left = _orphans_after_killing_the_parent("plain", tmp_path, wait=2)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert len(left) == 3


def _note(path: str) -> None:
    Path(path).write_text("ran")


@pytest.mark.parametrize("kind", ["sweep", "statistics"])
@pytest.mark.slow
def test_an_interrupted_pool_stops_its_workers_and_their_commands_at_once(kind, tmp_path):
    slots = [tmp_path / "a", tmp_path / "b"]
    for slot in slots:
        slot.mkdir()
    pids = [slot / f"{name}.pid" for slot in slots for name in ("busy", "child")]
    began = None
    with pytest.raises(KeyboardInterrupt):
        with POOLS[kind]() as pool:
            for slot in slots:
                pool.submit(_busy, str(slot))
            queued = pool.submit(_note, str(tmp_path / "queued"))
            while not all(path.is_file() and path.read_text() for path in pids):
                time.sleep(0.05)
            busy = [int(path.read_text()) for path in pids]
            for worker in busy[::2]:  # Ctrl-C at a terminal reaches the workers too: they leave it to the parent
                os.kill(worker, signal.SIGINT)
            time.sleep(0.5)
            assert all(map(_alive, busy))
            began = time.monotonic()
            raise KeyboardInterrupt
    assert time.monotonic() - began < workers.CHILD_GRACE_SECONDS  # not the ten minutes the commands sleep
    deadline = time.monotonic() + 10
    while any(map(_alive, busy)) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in busy if _alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == []
    assert queued.done() and not (tmp_path / "queued").exists()  # queued, never started


def _stopping_at_points(directory: str, grace: float, polls: bool) -> None:
    """Deferred-stop work: note this worker's pid, then run until told to stop (if it `polls`), note that its
    stopping point was reached and return; without polling it would run ten minutes."""
    with workers.deferred_stop(grace) as deferred:
        Path(directory, "worker.pid").write_text(f"{os.getpid()} {deferred}")
        ends = time.monotonic() + 600
        while time.monotonic() < ends and not (polls and workers.stop_requested()):
            time.sleep(0.01)
        Path(directory, "reached").write_text("checkpoint")
    Path(directory, "after").write_text("the rest of the task")


@pytest.mark.parametrize("polls", [True, False], ids=["stopping-point", "cut-short"])
@pytest.mark.slow
def test_a_stopped_worker_lets_deferred_work_reach_its_stopping_point_within_the_grace(polls, tmp_path):
    grace = 5.0
    with pytest.raises(KeyboardInterrupt):
        with launch.worker_pool([{}], threads=1) as pool:
            pool.submit(_stopping_at_points, str(tmp_path), grace, polls)
            while not (tmp_path / "worker.pid").is_file():
                time.sleep(0.05)
            began = time.monotonic()
            raise KeyboardInterrupt
    stopped = time.monotonic() - began
    pid, deferred = (tmp_path / "worker.pid").read_text().split()
    assert deferred == "True" and not _alive(int(pid))
    assert (tmp_path / "reached").is_file() == polls  # the checkpoint written, or the work cut short
    assert not (tmp_path / "after").exists()  # nothing after the stopping point runs
    assert stopped < grace if polls else grace <= stopped < grace + 10


def test_deferred_stop_changes_nothing_outside_a_worker():
    with workers.deferred_stop() as deferred:
        assert deferred is False and not workers.stop_requested()


@pytest.mark.slow
def test_run_child_returns_the_exit_status():
    assert workers.run_child([sys.executable, "-c", "raise SystemExit(3)"]) == 3
    assert workers.exit_with_parent() is False  # the test process has no multiprocessing parent


def _progress_lock() -> str:
    from tqdm import tqdm

    tqdm(total=1, disable=True).close()  # as a run's bar does: makes the lock if there is none
    return type(tqdm.get_lock()).__name__


@pytest.mark.slow
def test_a_workers_progress_bars_take_no_lock_shared_across_processes():
    """tqdm's default lock is a named semaphore shared across processes: one a killed worker never released
    would make Python's resource tracker warn of a leak after the sweep's error line."""
    with workers.spawn_pool(1) as pool:
        assert pool.submit(_progress_lock).result() != "TqdmDefaultWriteLock"
