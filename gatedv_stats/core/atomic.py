"""Atomic writes: a temporary file in the target's directory, fsynced, then renamed over the target, so that
readers never see a half-written file and a crash leaves the previous one.

A writer holds an exclusive `flock` on its temporary file `.NAME.XXXXXXXX.tmp` until the rename, so a temporary
file nobody holds is the leftover of a killed write: the next successful write of NAME removes those
(`remove_stale_temp_files`), and `gatedv train --resume` removes every one in the run directory.

`atomic_file` hands out a binary file object that hashes what it writes (`HashingWriter`): the SHA-256 of a file is
known when it is written, without reading it again, for the records that let every reader verify it. A full disk
(`ENOSPC`, a quota's `EDQUOT`) while writing ends as one `NoSpaceError` naming the file and what is kept: the
previous file under the name, never a part of the new one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import hashlib
import io
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeGuard

from gatedv_stats.core.errors import InputError, NoSpaceError, RunFailure
from gatedv_stats.core.files import file_sha256

TEMP_SUFFIX = ".tmp"
NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


class HashingWriter(io.RawIOBase):
    """A write-only binary file object that keeps the SHA-256 and size of what it wrote, and its first `OSError`
    (`error`: writers that call it from C, torch.save, raise their own exception in its place)."""

    def __init__(self, handle: io.BufferedWriter) -> None:
        super().__init__()
        self._handle = handle
        self._digest = hashlib.sha256()
        self.size = 0
        self.error: OSError | None = None

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # bytes-like, as io.RawIOBase.write takes
        view = memoryview(data).cast("B")
        try:
            written = self._handle.write(view)
        except OSError as error:
            self.error = self.error or error
            raise
        self._digest.update(view[:written])
        self.size += written
        return written

    def flush(self) -> None:
        if not self.closed:
            self._handle.flush()

    @property
    def sha256(self) -> str:
        return self._digest.hexdigest()


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it replaces `path`, on failure it is removed. A symbolic
    link is written through (its target replaced); a directory, device, pipe or socket is not replaced."""
    target = _target(path)
    fd, tmp_path = _locked_temp_file(target)
    try:
        os.chmod(tmp_path, 0o666 & ~current_umask())  # mkstemp makes 0600; give the file the mode a plain open() would
        yield tmp_path
        with open(tmp_path, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp_path, target)
    except BaseException as error:
        tmp_path.unlink(missing_ok=True)
        _raise_no_space(error, target)
        raise
    finally:
        os.close(fd)  # releases the lock
    remove_stale_temp_files(target.parent, target.name)


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str], *, verify: bool = False,
                before_replace: Callable[[str], None] | None = None) -> Iterator[HashingWriter]:
    """`atomic_path` with a `HashingWriter` of the temporary file instead of its path; after the body, its
    `sha256` is that of the file written. `verify`: read the written file back and compare before it replaces
    `path` (a mismatch is a `RunFailure`; the previous file stays). `before_replace(sha256)` runs after that and
    before the rename (to record the new hash where readers find it while the previous file is still in place)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as handle, HashingWriter(handle) as writer:
        try:
            yield writer
            writer.flush()
        except BaseException as error:
            _raise_no_space(writer.error or error, _target(path))
            raise
        if verify and (found := file_sha256(tmp)) != writer.sha256:
            raise RunFailure(f"{path}: read back, the file written does not hold what was written (sha256 "
                             f"{found[:12]}… instead of {writer.sha256[:12]}…; a failing disk?); the previous "
                             f"{Path(path).name} is kept")
        if before_replace is not None:
            before_replace(writer.sha256)


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
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held by a live writer (EWOULDBLOCK), or no locks here: keep the file
            continue
        else:
            candidate.unlink(missing_ok=True)
            removed.append(candidate)
        finally:
            os.close(fd)
    return removed


def write_text_atomic(path: str | os.PathLike[str], text: str) -> str:
    """Write `text` (UTF-8) to `path` atomically; returns the SHA-256 of the bytes written."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes, *,
                       before_replace: Callable[[str], None] | None = None) -> str:
    """Write `data` to `path` atomically; returns the SHA-256 of the bytes written."""
    with atomic_file(path, before_replace=before_replace) as writer:
        writer.write(data)
    return writer.sha256


def is_no_space(error: BaseException) -> TypeGuard[OSError]:
    """Whether `error` is a file system that is full (`ENOSPC`) or a quota that is used up (`EDQUOT`)."""
    return isinstance(error, OSError) and error.errno in NO_SPACE_ERRNOS


def no_space_message(path: str | os.PathLike[str], error: OSError, *, existed: bool) -> str:
    """The one line of a write that ran out of space: what could not be written, what is kept, what to do."""
    kept = (f"the previous {Path(path).name} is kept as it was" if existed else
            "nothing is left under its name")
    return (f"{os.fspath(path)}: could not be written: {error.strerror or os.strerror(error.errno or 0)}; {kept} "
            "(no part of the new file): free space on its file system, then run the same command again")


def _raise_no_space(error: BaseException, target: Path) -> None:
    if is_no_space(error):
        raise NoSpaceError(no_space_message(target, error, existed=target.is_file()), str(target),
                           error.strerror or os.strerror(error.errno or 0)) from None


def _target(path: str | os.PathLike[str]) -> Path:
    """The file a write of `path` replaces (a link's target), its directory made; refused when not a file."""
    target = Path(os.path.realpath(path))
    if target.exists() and not target.is_file():
        raise InputError(f"{os.fspath(path)} exists and is not a regular file; it is not replaced")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        _raise_no_space(error, target)
        raise
    return target


def _locked_temp_file(target: Path) -> tuple[int, Path]:
    """A new temporary file beside `target` and an open descriptor holding its lock. A cleaner may remove the
    file between its creation and the lock; the inode check sees that and makes another."""
    while True:
        try:
            fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=TEMP_SUFFIX, dir=target.parent)
        except OSError as error:  # no inode left
            _raise_no_space(error, target)
            raise
        with contextlib.suppress(OSError):  # a file system without locks: write unlocked
            fcntl.flock(fd, fcntl.LOCK_EX)
        with contextlib.suppress(FileNotFoundError):
            if os.stat(name).st_ino == os.fstat(fd).st_ino:
                return fd, Path(name)
        os.close(fd)


def current_umask() -> int:
    """The process's umask (read by setting it and setting it back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask
