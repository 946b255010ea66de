"""Atomic writes: the target is replaced whole or not at all, with the mode a plain open() gives."""

import os

import pytest

from gatedv_stats.io.atomic import atomic_path, write_text_atomic


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
