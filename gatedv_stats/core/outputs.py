"""Output locations, checked before a command does any work: one `InputError` naming the flag and the path.

A location fails when it is empty, when it exists as the wrong kind (a directory where a file goes, or the
reverse; a device, pipe or socket), when it is one of the command's inputs, when a part of its parent path is a
file, or when the directory that would receive it is not writable. Writability is `os.access` (through
`_writable`): the superuser passes it everywhere except on a read-only file system."""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

from gatedv_stats.core.errors import InputError

PREPARED_DATA_FILES = ("manifest.json", "tokenizer.json")  # what makes a directory one `gatedv prepare` wrote


def check_path_given(path: str | os.PathLike[str], flag: str) -> None:
    """`path` is not empty (an empty path would silently mean the current directory)."""
    if not os.fspath(path).strip():
        raise InputError(f"{flag}: the path is empty; give a file or directory path")


def check_output_file(path: str | os.PathLike[str], flag: str, suffix: str | None = None) -> None:
    """`path` can be written as a file (given by `flag`, e.g. "--out"), whose name ends in `suffix` when the
    file has one format."""
    check_path_given(path, flag)
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{flag}: {path} is a directory; give a file path")
    if path.exists() and not path.is_file():
        raise InputError(f"{flag}: {path} exists and is not a regular file (a device, pipe or socket); give a file "
                         "path")
    if suffix is not None and path.suffix.lower() != suffix:
        raise InputError(f"{flag}: {path}: the file is written as {suffix[1:].capitalize()}; name it *{suffix}")
    target = Path(os.path.realpath(path))  # a symbolic link is written through
    if all((target.parent / name).is_file() for name in PREPARED_DATA_FILES):
        raise InputError(f"{flag}: {path} is inside the prepared data directory {path.parent}, whose files every run "
                         "reads; write it elsewhere")
    _check_creatable(target, flag)


def check_not_an_input(path: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str]], flag: str) -> None:
    """`path` (given by `flag`) is none of the files the command reads: writing it would replace an input."""
    target = os.path.realpath(path)
    for given in inputs:
        if os.path.realpath(given) == target:
            named = "" if os.fspath(given) == os.fspath(path) else f" ({os.fspath(given)})"
            raise InputError(f"{flag}: {path} is one of the inputs{named}; write the output to another file")


def check_output_dir(path: str | os.PathLike[str], flag: str) -> None:
    """`path` is, or can be created as, a writable directory (given by `flag`)."""
    check_path_given(path, flag)
    path = Path(path)
    if os.path.lexists(path) and not path.is_dir():
        raise InputError(f"{flag}: {path} exists and is not a directory")
    if not path.is_dir():
        _check_creatable(path, flag)
    elif not _writable(path):
        raise InputError(f"{flag}: {path}: directory is not writable (permission denied)")


@contextlib.contextmanager
def cleaned_on_failure(directory: str | os.PathLike[str]) -> Iterator[Path]:
    """Create `directory` (and its missing parents); when the body fails, remove what it added: the directories
    created here, or else the entries that were not in `directory` before. Entries it rewrote stay."""
    directory = Path(directory)
    missing = list(itertools.takewhile(lambda path: not os.path.lexists(path), (directory, *directory.parents)))
    created = missing[-1] if missing else None  # the topmost directory created here
    before = set() if created is not None else set(directory.iterdir())
    directory.mkdir(parents=True, exist_ok=True)
    try:
        yield directory
    except BaseException:
        for path in [created] if created is not None else set(directory.iterdir()) - before:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        raise


def _check_creatable(path: Path, flag: str) -> None:
    """The nearest existing ancestor of `path` is a directory this process may write into."""
    ancestor = path.parent
    while not os.path.lexists(ancestor):
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise InputError(f"{flag}: cannot create {path}: {ancestor} is not a directory")
    if not _writable(ancestor):
        raise InputError(f"{flag}: cannot create {path}: directory {ancestor} is not writable (permission denied)")


def _writable(directory: Path) -> bool:
    return os.access(directory, os.W_OK | os.X_OK)
