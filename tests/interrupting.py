"""Stopping a training command mid-run as a terminal's Ctrl-C or `kill` would, for the interruption tests."""

import os
import signal
import subprocess
import time
from pathlib import Path

STOPS = ["ctrl-c", "kill"]
KILL_9 = "kill -9"  # SIGKILL: no handler runs, the process ends wherever it is (in the middle of a write too)


def stop_signal(stop: str) -> signal.Signals:
    return {"ctrl-c": signal.SIGINT, "kill": signal.SIGTERM, KILL_9: signal.SIGKILL}[stop]


def stop_while_training(command: list[str], run_dirs: list[Path], stop: str, settle: float,
                        **popen_options) -> tuple[subprocess.Popen, str, float]:
    """Start `command` in its own session (as at a terminal), wait until every run of `run_dirs` has recorded
    update 0 and then `settle` seconds, and stop it: Ctrl-C reaches the whole session ("ctrl-c"), `kill`
    (SIGTERM) or `kill -9` (SIGKILL) the command alone. Returns the ended process, its stderr and the seconds it
    took to end."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, **popen_options)
    deadline = time.monotonic() + 120
    while not all((Path(run_dir) / "curve.csv").is_file() for run_dir in run_dirs) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(settle)
    if stop == "ctrl-c":
        os.killpg(process.pid, stop_signal(stop))
    else:
        process.send_signal(stop_signal(stop))
    stopped = time.monotonic()
    _, stderr = process.communicate(timeout=120)
    return process, stderr, time.monotonic() - stopped
