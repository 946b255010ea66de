"""Worker processes that end with the process that started them.

A worker of a spawned `ProcessPoolExecutor` holds both ends of its task queue, so when the process that started
it is killed (`kill PID`, the OOM killer, a crash) the queue never closes for it: it finishes the task in hand,
which may be hours of training on a GPU, and then waits for work forever, holding its memory and its GPU. The
workers started here watch their parent instead and exit as soon as it is gone, after stopping the commands
they run (`run_child`); a run cut short this way resumes from its last checkpoint.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor

from tqdm import tqdm

PARENT_GONE_EXIT = 75  # EX_TEMPFAIL: the work was cut short, not wrong; nobody is left to read it
CHILD_GRACE_SECONDS = 10.0  # a stopped command's time to exit after SIGTERM before SIGKILL

_children: set[subprocess.Popen] = set()
_children_lock = threading.Lock()


def spawn_pool(workers: int, initializer: Callable[..., None] | None = None,
               initargs: tuple = ()) -> ProcessPoolExecutor:
    """A pool of `workers` spawned interpreters, each running `initializer(*initargs)` at start, that end when
    this process ends, however it ends."""
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker,
                               initargs=(initializer, initargs))


def exit_with_parent() -> bool:
    """In a spawned process: exit (status PARENT_GONE_EXIT) as soon as the process that started it ends,
    stopping the commands started with `run_child` first. False (nothing watched) in a process without a
    multiprocessing parent."""
    parent = multiprocessing.parent_process()
    if parent is None or parent.sentinel is None:
        return False
    threading.Thread(target=_exit_when_gone, args=(parent.sentinel,), name="exit-with-parent", daemon=True).start()
    return True


def run_child(command: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    """Run `command` (its stdout discarded, its stderr shared) to its end and return its exit status; it is
    killed if this process is interrupted, and stopped (SIGTERM) if this worker's parent ends."""
    with _children_lock:
        process = subprocess.Popen(list(command), env=None if env is None else dict(env), stdout=subprocess.DEVNULL)
        _children.add(process)
    try:
        return process.wait()
    except BaseException:
        process.kill()
        process.wait()
        raise
    finally:
        with _children_lock:
            _children.discard(process)


def _start_worker(initializer: Callable[..., None] | None, initargs: tuple) -> None:
    exit_with_parent()
    # A worker's progress bars are its own. tqdm's default lock is a named semaphore shared across processes,
    # which a worker killed mid-run would leak (Python's resource tracker then warns at exit).
    tqdm.set_lock(threading.RLock())
    if initializer is not None:
        initializer(*initargs)


def _exit_when_gone(sentinel: int) -> None:
    multiprocessing.connection.wait([sentinel])
    _children_lock.acquire()  # held to the end: no command starts after this point
    for child in _children:
        child.terminate()
    for child in _children:
        try:
            child.wait(timeout=CHILD_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            child.kill()
    os._exit(PARENT_GONE_EXIT)
