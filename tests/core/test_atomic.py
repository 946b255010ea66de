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


def test_a_write_is_hashed_as_it_is_written_and_recorded_before_it_replaces_the_file(tmp_path):
    import hashlib

    from gatedv_stats.core.atomic import atomic_file, write_bytes_atomic

    target = tmp_path / "file.bin"
    write_bytes_atomic(target, b"old")
    seen = []
    with atomic_file(target, verify=True, before_replace=lambda sha: seen.append((sha, target.read_bytes()))) as out:
        out.write(b"new ")
        out.write(memoryview(b"bytes"))
    assert out.sha256 == hashlib.sha256(b"new bytes").hexdigest() == seen[0][0]
    assert seen[0][1] == b"old" and target.read_bytes() == b"new bytes"  # recorded while the old file was in place
    def failing(sha256: str) -> None:
        raise RuntimeError("record failed")

    with pytest.raises(RuntimeError, match="record failed"):
        with atomic_file(target, before_replace=failing) as out:
            out.write(b"never")
    assert target.read_bytes() == b"new bytes" and [p.name for p in tmp_path.iterdir()] == ["file.bin"]


def test_a_full_disk_is_one_no_space_error_naming_the_file_and_what_is_kept(tmp_path, full_disk):
    import numpy as np
    import pandas as pd

    from gatedv_stats.core.errors import NoSpaceError
    from gatedv_stats.io.lossfiles import read_loss_file, write_loss_file

    docs = pd.DataFrame({"doc_id": ["a", "b"], "n_targets": [3, 4], "loss_sum": [1.5, 2.5]})
    write_loss_file(tmp_path / "dev.parquet", docs, {"arm": "a", "seed": 1})
    full_disk(after=100)
    with pytest.raises(NoSpaceError, match=rf"^{tmp_path / 'dev.parquet'}: could not be written: No space left on "
                                           "device; the previous dev.parquet is kept as it was"):
        write_loss_file(tmp_path / "dev.parquet", docs.assign(loss_sum=[9.0, 9.0]), {"arm": "a", "seed": 1})
    with pytest.raises(NoSpaceError, match=rf"^{tmp_path / 'new.txt'}: could not be written: .*; nothing is left under "
                                           "its name"):
        write_text_atomic(tmp_path / "new.txt", "x" * 1000)
    np.testing.assert_array_equal(read_loss_file(tmp_path / "dev.parquet").docs["loss_sum"], [1.5, 2.5])
    assert [p.name for p in tmp_path.iterdir()] == ["dev.parquet"]


def test_a_full_disk_under_torch_save_is_no_space_not_torchs_own_error(tmp_path, full_disk):
    from gatedv_stats.core.errors import NoSpaceError
    from helpers import SMALL_VOCAB
    from trainer.model.transformer import build_model, model_config
    from trainer.run.checkpoint import save_checkpoint

    model = build_model(model_config("tiny", **SMALL_VOCAB), seed=0)
    save_checkpoint(tmp_path / "checkpoint.pt", model, extra={"update": 0})
    before = (tmp_path / "checkpoint.pt").read_bytes()
    full_disk(after=4096)
    with pytest.raises(NoSpaceError, match="checkpoint.pt: could not be written: No space left on device; the prev"):
        save_checkpoint(tmp_path / "checkpoint.pt", model, extra={"update": 1})
    assert (tmp_path / "checkpoint.pt").read_bytes() == before and len(list(tmp_path.iterdir())) == 1
