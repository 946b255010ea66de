"""Worker processes that end with the process that started them.

A worker of a spawned `ProcessPoolExecutor` holds both ends of its task queue, so when the process that started
it is killed (`kill -9`, the OOM killer, a crash) the queue never closes for it: it finishes the task in hand,
which may be hours of training on a GPU, and then waits for work forever, holding its memory and its GPU. The
workers started here watch their parent instead and exit as soon as it is gone, after stopping the commands
they run (`run_child`); a run cut short this way resumes from its last checkpoint.

Ctrl-C reaches every process of the terminal's process group. The workers ignore it and leave the decision to
the process that started them: when that one leaves the pool's `with` block by an exception (KeyboardInterrupt
included), the pool stops its workers at once (SIGTERM, on which a worker stops its commands and exits) instead
of letting them finish their tasks and then start the queued ones. Work that can stop cleanly at points of its
own (a training loop at the end of an update, with a checkpoint of it) runs inside `deferred_stop()`: a worker
told to stop then lets it reach the next such point first, for up to `STOP_GRACE_SECONDS`.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import cast

from tqdm import tqdm

PARENT_GONE_EXIT = 75  # EX_TEMPFAIL: the work was cut short, not wrong; nobody is left to read it
CHILD_GRACE_SECONDS = 10.0  # a stopped command's time to exit after SIGTERM before SIGKILL
STOP_GRACE_SECONDS = 60.0  # a stopped worker's time to reach the next stopping point of `deferred_stop` work

_children: set[subprocess.Popen] = set()
_children_lock = threading.Lock()
_watched = False  # this process exits with its parent (`exit_with_parent`)
_stop_requested = threading.Event()  # this worker has been told to stop, or its parent is gone
_stop_reached = threading.Event()  # deferred_stop work has returned from its stopping point
_stop_grace: float | None = None  # while deferred_stop work runs: how long a stop waits for it


class WorkerPool(ProcessPoolExecutor):
    """Spawned worker processes that end when the process that started them ends, however it ends, and at once
    when its `with` block is left by an exception."""

    def __exit__(self, exc_type, exc_value, traceback):
        if exc_type is not None:
            self.stop()
        return super().__exit__(exc_type, exc_value, traceback)

    def stop(self) -> None:
        """Cancel the tasks not started and end the workers now; the tasks they were running are lost."""
        # shutdown() forgets the processes and the thread that manages them, so they are taken first (Python
        # 3.14's terminate_workers() does the same).
        processes = list((self._processes or {}).values())
        # The manager thread, or None before the first task (typeshed mistypes the attribute as _ThreadWakeup).
        manager = cast("threading.Thread | None", self._executor_manager_thread)
        self.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            if process.is_alive():
                process.terminate()
        if manager is not None:
            manager.join()


def spawn_pool(workers: int, initializer: Callable[..., None] | None = None, initargs: tuple = ()) -> WorkerPool:
    """A pool of `workers` spawned interpreters, each running `initializer(*initargs)` at start."""
    return WorkerPool(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker,
                      initargs=(initializer, initargs))


def exit_with_parent() -> bool:
    """In a spawned process: exit as soon as its parent ends (status PARENT_GONE_EXIT) or it is sent SIGTERM
    (128 + SIGTERM), stopping its `run_child` commands first. False (nothing watched) without such a parent."""
    parent = multiprocessing.parent_process()
    if parent is None or parent.sentinel is None:
        return False
    # The handler only wakes the watcher: stopping the commands in the handler itself would wait on a command
    # the interrupted main thread may be waiting on already (subprocess's wait lock is not re-entrant).
    global _watched
    stop_read, stop_write = os.pipe()
    signal.signal(signal.SIGTERM, lambda signum, frame: os.write(stop_write, b"\0"))
    threading.Thread(target=_exit_when_told, args=(parent.sentinel, stop_read), name="exit-with-parent",
                     daemon=True).start()
    _watched = True
    return True


def stop_requested() -> bool:
    """Whether this worker has been told to stop (or its parent has ended): `deferred_stop` work polls it."""
    return _stop_requested.is_set()


@contextlib.contextmanager
def deferred_stop(grace: float = STOP_GRACE_SECONDS) -> Iterator[bool]:
    """In a worker started here: a stop (SIGTERM, or the parent gone) waits up to `grace` seconds for the body,
    which polls `stop_requested()` and returns from its first stopping point after the stop; the process then
    ends as the stop would have ended it. Yields whether stops are deferred (False in any other process)."""
    global _stop_grace
    if not _watched:
        yield False
        return
    _stop_grace = grace
    try:
        yield True
    finally:
        _stop_grace = None
        if _stop_requested.is_set():  # the watcher ends the process now
            _stop_reached.set()
            threading.Event().wait()


def run_child(command: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    """Run `command` (its stdout discarded, its stderr shared) to its end and return its exit status; it is
    stopped (SIGTERM, then SIGKILL after a grace period) if this process is interrupted or stopped, or if this
    worker's parent ends."""
    with _children_lock:
        process = subprocess.Popen(list(command), env=None if env is None else dict(env), stdout=subprocess.DEVNULL)
        _children.add(process)
    try:
        return process.wait()
    except BaseException:
        process.terminate()
        _await_or_kill(process)
        raise
    finally:
        with _children_lock:
            _children.discard(process)


def _start_worker(initializer: Callable[..., None] | None, initargs: tuple) -> None:
    exit_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A worker's progress bars are its own. tqdm's default lock is a named semaphore shared across processes,
    # which a worker killed mid-run would leak (Python's resource tracker then warns at exit).
    tqdm.set_lock(threading.RLock())
    if initializer is not None:
        initializer(*initargs)


def _exit_when_told(sentinel: int, stop_read: int) -> None:
    ready = multiprocessing.connection.wait([sentinel, stop_read])
    _stop_requested.set()
    grace = _stop_grace
    if grace is not None:
        _stop_reached.wait(grace)
    _children_lock.acquire()  # held to the end: no command starts after this point
    for child in _children:
        child.terminate()
    for child in _children:
        _await_or_kill(child)
    os._exit(PARENT_GONE_EXIT if sentinel in ready else 128 + signal.SIGTERM)


def _await_or_kill(process: subprocess.Popen) -> None:
    """Wait for a command sent SIGTERM (torchrun passes it on to its processes); SIGKILL after the grace period."""
    try:
        process.wait(timeout=CHILD_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
