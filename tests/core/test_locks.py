"""One writer at a time: a lock file under `flock`, recording its holder; a second process is told who holds it (or
waits for it), a lock of a killed process is taken over, and a process re-enters a lock it holds."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gatedv_stats.core.locks import RUN_LOCK_NAME, LockBusy, file_lock, output_lock, run_lock

ROOT = Path(__file__).resolve().parents[2]
HOLD = """
import sys, time
from gatedv_stats.core.locks import {kind}
with {kind}(sys.argv[1]):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def hold(kind: str, path: Path, seconds: float) -> subprocess.Popen:
    """Another process holding `kind(path)` for `seconds`, once it has printed that it holds it."""
    process = subprocess.Popen([sys.executable, "-c", HOLD.format(kind=kind), str(path), str(seconds)],
                               cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    return process


def test_a_lock_is_re_entered_by_its_process_and_removed_when_released(tmp_path):
    with run_lock(tmp_path) as outer:
        record = json.loads((tmp_path / RUN_LOCK_NAME).read_text())
        assert record["pid"] == os.getpid() and record["host"] == socket.gethostname() and outer.stale is None
        with run_lock(tmp_path):
            pass
        assert (tmp_path / RUN_LOCK_NAME).exists()  # still held by the outer one
    assert not (tmp_path / RUN_LOCK_NAME).exists()


@pytest.mark.slow
def test_another_process_is_named_and_its_lock_taken_over_once_it_is_killed(tmp_path):
    holder = hold("run_lock", tmp_path, 600)
    try:
        with pytest.raises(LockBusy, match=rf"^{tmp_path}: is being trained or evaluated by pid {holder.pid} on "
                                           rf"{socket.gethostname()} \(since .*\); wait for it to finish"):
            with run_lock(tmp_path):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.communicate()
    assert json.loads((tmp_path / RUN_LOCK_NAME).read_text())["pid"] == holder.pid  # left behind: stale
    with run_lock(tmp_path) as lock:
        assert lock.stale is not None and lock.stale["pid"] == holder.pid
        assert json.loads((tmp_path / RUN_LOCK_NAME).read_text())["pid"] == os.getpid()
    assert not (tmp_path / RUN_LOCK_NAME).exists()


@pytest.mark.slow
def test_an_output_lock_is_waited_for(tmp_path):
    out = tmp_path / "report.md"
    holder = hold("output_lock", out, 2)
    began = time.monotonic()
    with output_lock(out):
        waited = time.monotonic() - began
    holder.communicate()
    assert waited > 1.0  # until the holder let go
    assert sorted(path.name for path in tmp_path.iterdir()) == []


def test_a_busy_lock_crosses_process_boundaries(tmp_path):
    import pickle

    busy = LockBusy("x: held", str(tmp_path), {"pid": 1, "host": "h"})
    again = pickle.loads(pickle.dumps(busy))
    assert (str(again), again.path, again.holder) == ("x: held", str(tmp_path), {"pid": 1, "host": "h"})
    with file_lock(tmp_path / "a.lock", wait=False, busy="{holder}") as lock:
        assert lock.path == tmp_path / "a.lock"
