"""Atomic writes: the target is replaced whole or not at all, with the mode a plain open() gives."""

import os

import pytest

from gatedv_stats.core.atomic import atomic_path, write_text_atomic
from gatedv_stats.core.errors import InputError


def test_write_replaces_target_and_uses_umask_mode(tmp_path):
    target = tmp_path / "out" / "file.txt"
    write_text_atomic(target, "first")
    write_text_atomic(target, "second")
    assert target.read_text() == "second"
    mask = os.umask(0)
    os.umask(mask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~mask
    assert [p.name for p in target.parent.iterdir()] == ["file.txt"]


def test_failed_write_keeps_previous_version_and_leaves_no_temp(tmp_path):
    target = tmp_path / "file.txt"
    write_text_atomic(target, "saved")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("crash while writing")
    assert target.read_text() == "saved"
    assert [p.name for p in tmp_path.iterdir()] == ["file.txt"]


def test_a_link_is_written_through_and_a_pipe_is_not_replaced(tmp_path):
    target = tmp_path / "elsewhere" / "report.md"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "report.md"
    link.symlink_to(target)
    write_text_atomic(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["elsewhere", "report.md"]  # no stray temp file

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    with pytest.raises(InputError, match="pipe exists and is not a regular file; it is not replaced"):
        write_text_atomic(pipe, "text")
    assert pipe.is_fifo()
