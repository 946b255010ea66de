"""Atomic writes: a temporary file in the target's directory, fsynced, then renamed over the target.

A writer holds an exclusive `flock` on its temporary file `.NAME.XXXXXXXX.tmp` until the rename, so a temporary
file nobody holds is the leftover of a killed write: the next successful write of NAME removes those
(`remove_stale_temp_files`), and `gatedv train --resume` removes every one in the run directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from gatedv_stats.core.errors import InputError

TEMP_SUFFIX = ".tmp"


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it replaces `path`, on failure it is removed.

    Readers never see a half-written file and a previous version survives a crash. A symbolic link is written
    through (its target is replaced, the link stays); a directory, device, pipe or socket is not replaced.
    """
    target = Path(os.path.realpath(path))
    if target.exists() and not target.is_file():
        raise InputError(f"{os.fspath(path)} exists and is not a regular file; it is not replaced")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_path = _locked_temp_file(target)
    try:
        os.chmod(tmp_path, 0o666 & ~current_umask())  # mkstemp makes 0600; give the file the mode a plain open() would
        yield tmp_path
        with open(tmp_path, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp_path, target)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)  # releases the lock
    remove_stale_temp_files(target.parent, target.name)


def remove_stale_temp_files(directory: str | os.PathLike[str], name: str | None = None) -> list[Path]:
    """Remove the temporary files of `name` (None: of every target) in `directory` that no live writer holds;
    returns the paths removed."""
    pattern = f".{glob.escape(name)}.*{TEMP_SUFFIX}" if name is not None else f".*{TEMP_SUFFIX}"
    removed = []
    for candidate in sorted(Path(directory).glob(pattern)):
        try:
            fd = os.open(candidate, os.O_RDONLY)
        except OSError:  # renamed into place or removed meanwhile
            continue
        try:
            if _try_lock(fd):
                candidate.unlink(missing_ok=True)
                removed.append(candidate)
        finally:
            os.close(fd)
    return removed


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` (UTF-8) to `path` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write `data` to `path` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def _locked_temp_file(target: Path) -> tuple[int, Path]:
    """A new temporary file beside `target` and an open descriptor holding its lock. A cleaner may remove the
    file between its creation and the lock; the inode check sees that and makes another."""
    while True:
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=TEMP_SUFFIX, dir=target.parent)
        with contextlib.suppress(OSError):  # a file system without locks: write unlocked
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.stat(name).st_ino == os.fstat(fd).st_ino:
                return fd, Path(name)
        except FileNotFoundError:
            pass
        os.close(fd)


def _try_lock(fd: int) -> bool:
    """Whether no other process holds the file's lock (False also where locks are unsupported)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held (EWOULDBLOCK), or no locks here: keep the file
        return False
    return True


def current_umask() -> int:
    """The process's umask (read by setting it and setting it back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask
