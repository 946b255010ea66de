"""One writer at a time: an exclusive `flock` on a lock file that records its holder (pid, host, since when).

`run_lock(RUN_DIR)` is held by whatever trains or evaluates a run (`gatedv train`, each run of a sweep), so that a
second sweep over the same grid leaves the runs another process holds to it; `output_lock(FILE)` by a command
writing FILE and the files that go with it (a report and its figures), so that two of them write one after the
other. The kernel releases a lock with its process, however it ends: a lock file left by a killed process holds a
stale record and is taken over (`HeldLock.stale` says whose it was). On a file system without locks the record
decides: a holder on this host whose process is gone is stale, any other holds the lock.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gatedv_stats.core.errors import InputError

RUN_LOCK_NAME = ".run.lock"  # inside a run directory
# A process that holds a run's lock for child processes it starts (torchrun's ranks) names the run here.
HELD_FOR_CHILDREN = "GATEDV_RUN_LOCK_HELD"
_NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)
_held: dict[str, int] = {}  # this process's locks (real path -> depth): taken again, a lock is re-entered


class LockBusy(InputError):
    """Another process holds the lock: `path` the lock file, `holder` its record (pid, host, since)."""

    def __init__(self, message: str, path: str, holder: dict | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.holder = holder or {}

    def __reduce__(self):  # rebuilt from every argument when it crosses a process boundary
        return type(self), (str(self), self.path, self.holder)


@dataclass(frozen=True)
class HeldLock:
    path: Path
    stale: dict | None = None  # the record of a holder that ended without releasing the lock, taken over


def describe(holder: dict | None) -> str:
    """'pid 123 on host-a (since 2025-01-01 12:00:00)', or 'another process' without a record."""
    if not holder or "pid" not in holder:
        return "another process"
    since = f" (since {holder['since']})" if holder.get("since") else ""
    return f"pid {holder['pid']} on {holder.get('host', '?')}{since}"


@contextlib.contextmanager
def file_lock(path: str | os.PathLike[str], *, wait: bool, busy: str) -> Iterator[HeldLock]:
    """Hold the lock file `path` (created, and removed on release). Held elsewhere: wait for it (`wait`), else a
    `LockBusy` whose message is `busy` formatted with `holder` (`describe`)."""
    path = Path(os.path.realpath(path))
    if _held.get(str(path)):
        _held[str(path)] += 1
        try:
            yield HeldLock(path)
        finally:
            _held[str(path)] -= 1
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, stale = _acquire(path, wait, busy)
    _held[str(path)] = 1
    try:
        # Who holds the lock, for the message of another process that finds it held (on a full disk it goes
        # without: the lock itself needs no space).
        record = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%d %H:%M:%S")}
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(record).encode("utf-8"), 0)
        yield HeldLock(path, stale)
    finally:
        _held.pop(str(path), None)
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                path.unlink()  # before the lock goes: a waiter finds the file gone and locks a new one
        os.close(fd)


def run_lock(run_dir: str | os.PathLike[str]) -> contextlib.AbstractContextManager[HeldLock]:
    """The lock of a run directory, not waited for (`LockBusy`); a process the holder started for this run
    (`HELD_FOR_CHILDREN`) enters it without locking."""
    run_dir = Path(run_dir)
    if os.environ.get(HELD_FOR_CHILDREN) == str(run_dir.resolve()):
        return contextlib.nullcontext(HeldLock(run_dir / RUN_LOCK_NAME))
    return file_lock(run_dir / RUN_LOCK_NAME, wait=False,
                     busy=f"{run_dir}: is being trained or evaluated by {{holder}}; wait for it to finish, or "
                          "choose another --out")


def output_lock(path: str | os.PathLike[str]) -> contextlib.AbstractContextManager[HeldLock]:
    """The lock of an output file (`.NAME.lock` beside it), waited for: the last writer's files are left whole."""
    path = Path(os.path.realpath(path))
    if not path.parent.is_dir():  # nothing there yet to write over (a path the command refuses is refused by it)
        return contextlib.nullcontext(HeldLock(path))
    return file_lock(path.with_name(f".{path.name}.lock"), wait=True, busy=f"{path}: being written by {{holder}}")


def _acquire(path: Path, wait: bool, busy: str) -> tuple[int, dict | None]:
    """An open descriptor of the lock file `path` holding its lock, and the stale record found in it."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except OSError as error:
            held = isinstance(error, BlockingIOError)  # by another process (only when not waiting)
            if not held and error.errno not in _NO_LOCKS:
                os.close(fd)
                raise
            holder = _read_record(fd)  # held, or no locks here: then the record decides
            if held or (holder and not _gone(holder) and holder.get("pid") != os.getpid()):
                os.close(fd)
                if wait:
                    time.sleep(1.0)
                    continue
                raise LockBusy(busy.format(holder=describe(holder)), str(path), holder) from None
            return fd, holder or None
        with contextlib.suppress(FileNotFoundError):  # released (removed) between our open and our lock
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd, _read_record(fd) or None
        os.close(fd)


def _read_record(fd: int) -> dict:
    try:
        record = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _gone(holder: dict) -> bool:
    """Whether the process a record names has ended (known only on this host)."""
    if holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
        return False
    try:
        with contextlib.suppress(PermissionError):  # alive, another user's
            os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return True
    return False
