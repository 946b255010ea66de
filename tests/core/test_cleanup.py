"""What a failure leaves behind is cleaned: a killed write's `.NAME.*.tmp` goes with the next write of NAME or with
`--resume`, a temporary file a live writer holds stays, and a failed `prepare` removes what it created."""

from __future__ import annotations

import fcntl
import json
import os

import pytest
from typer.testing import CliRunner

import cli
from gatedv_stats.core.atomic import atomic_path, remove_stale_temp_files, write_text_atomic
from gatedv_stats.core.outputs import cleaned_on_failure


def stale(directory, name: str, size: int = 16):
    """A temporary file as a killed writer leaves it (nobody holds its lock)."""
    path = directory / f".{name}.k1ll3d00.tmp"
    path.write_bytes(b"\0" * size)
    return path


def test_the_next_write_of_a_target_removes_its_stale_temporary_files(tmp_path):
    leftover, other = stale(tmp_path, "run.json"), stale(tmp_path, "curve.csv")
    write_text_atomic(tmp_path / "run.json", "{}")
    assert not leftover.exists() and other.exists()  # only the target's own
    assert sorted(p.name for p in tmp_path.iterdir()) == [other.name, "run.json"]


def test_a_temporary_file_a_live_writer_holds_is_kept(tmp_path):
    with atomic_path(tmp_path / "checkpoint.pt") as held:
        held.write_bytes(b"half written")
        assert remove_stale_temp_files(tmp_path) == []  # our own write is in progress: its lock is held
        write_text_atomic(tmp_path / "checkpoint.pt", "another writer finishes first")
        assert held.exists()
    assert (tmp_path / "checkpoint.pt").read_bytes() == b"half written"
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]


def test_a_lock_held_through_another_descriptor_protects_the_file(tmp_path):
    leftover = stale(tmp_path, "x")
    fd = os.open(leftover, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert remove_stale_temp_files(tmp_path, "x") == [] and leftover.exists()
    finally:
        os.close(fd)
    assert remove_stale_temp_files(tmp_path, "x") == [leftover] and not leftover.exists()


@pytest.mark.slow
def test_resume_removes_the_partial_files_of_a_killed_write(prepared_data, tmp_path):
    run_dir = tmp_path / "run"
    args = ["train", "--data", str(prepared_data), "--config", "tiny", "--seed", "1", "--batch-size", "2",
            "--updates", "4", "--eval-every", "2", "--out", str(run_dir), "--device", "cpu"]
    assert CliRunner().invoke(cli.app, [*args, "--stop-after", "2"]).exit_code == 0
    partial = [stale(run_dir, "checkpoint.pt", 500_000), stale(run_dir, "curve.csv")]
    result = CliRunner().invoke(cli.app, [*args, "--resume", "--stop-after", "3"])  # writes checkpoint.pt only
    assert result.exit_code == 0, result.output
    assert not any(path.exists() for path in partial)
    assert not [p for p in run_dir.iterdir() if p.name.endswith(".tmp")]


@pytest.fixture
def short_corpus(tmp_path):
    """Documents of >= 257 bytes but, with the 8,192-entry tokenizer, fewer than 257 tokens: `prepare` fails
    after it has written the tokenizer."""
    path = tmp_path / "short.jsonl"
    path.write_text("".join(json.dumps({"text": "ab" * 200 + str(i), "url": f"https://h{i}.org/p"}) + "\n"
                            for i in range(40)))
    return path


def _prepare(corpus, out, prepared_data):
    return CliRunner().invoke(cli.app, ["prepare", str(corpus), "--out", str(out), "--tokenizer",
                                        str(prepared_data / "tokenizer.json"), "--eval-docs", "2"])


def _assert_failed(result) -> None:
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "fewer than 2 domain groups hold a document of at least 257 tokens" in result.stderr


def test_a_failed_prepare_into_an_existing_directory_removes_only_what_it_wrote(short_corpus, prepared_data, tmp_path):
    out = tmp_path / "data"
    out.mkdir()
    (out / "notes.txt").write_text("the user's")
    _assert_failed(_prepare(short_corpus, out, prepared_data))
    assert [p.name for p in out.iterdir()] == ["notes.txt"]  # the tokenizer it had written is gone


def test_a_failed_prepare_removes_the_directories_it_created(short_corpus, prepared_data, tmp_path):
    _assert_failed(_prepare(short_corpus, tmp_path / "new" / "deeper" / "data", prepared_data))
    assert not (tmp_path / "new").exists()


def test_cleaned_on_failure_keeps_everything_on_success(tmp_path):
    with cleaned_on_failure(tmp_path / "a" / "b") as made:
        (made / "file").write_text("kept")
    assert (tmp_path / "a" / "b" / "file").read_text() == "kept"
    with pytest.raises(KeyboardInterrupt):  # an interruption is cleaned like an error
        with cleaned_on_failure(tmp_path / "a") as made:
            (made / "new").mkdir()
            (made / "new" / "inner").write_text("x")
            raise KeyboardInterrupt
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["b"]


# --- killed (SIGKILL) at the points of a write where it matters ---

_KILLED = """
import os, signal, sys
import gatedv_stats.core.atomic as atomic
import gatedv_stats.io.curvefiles as curvefiles
import trainer.run.run_files as run_files
import cli

calls = {{}}

def nth(name, n):
    calls[name] = calls.get(name, 0) + 1
    return calls[name] == n

def recording(module):
    original = module.update_run_record
    def record(run_dir, fields, **kwargs):
        done = original(run_dir, fields, **kwargs)
        if {kill_after_record!r} in fields and nth("record", {nth}):
            os.kill(os.getpid(), signal.SIGKILL)  # recorded, not yet renamed into place
        return done
    module.update_run_record = record

recording(run_files)
recording(curvefiles)
write = atomic.HashingWriter.write
def writing(self, data):
    if {kill_while_writing!r} and {kill_while_writing!r} in self._handle.name:
        writers = calls.setdefault("writers", [])
        if self not in writers:
            writers.append(self)
        if len(writers) == {nth} and self.size:
            os.kill(os.getpid(), signal.SIGKILL)  # the n-th such file, half written
    return write(self, data)
atomic.HashingWriter.write = writing
sys.argv = ["gatedv", *{args!r}]
cli.app()
"""
KILLS = {  # where the kill falls: (after recording FIELD, or while writing NAME; at the n-th record or file)
    "checkpoint recorded, not renamed": ("checkpoint_sha256", None, 2),
    "checkpoint half written": (None, ".checkpoint.pt.", 2),
    "curve recorded, not renamed": ("curve_sha256", None, 2),
}


def _killed(args: list[str], kill_after_record, kill_while_writing, nth) -> None:
    import subprocess
    import sys
    from pathlib import Path

    script = _KILLED.format(kill_after_record=kill_after_record, kill_while_writing=kill_while_writing, nth=nth,
                            args=[str(arg) for arg in args])
    done = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).resolve().parents[2],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == -9, done.stderr


@pytest.mark.parametrize("kill", KILLS)
@pytest.mark.slow
def test_a_run_killed_inside_a_write_leaves_files_its_record_vouches_for(prepared_data, tmp_path, kill):
    """Killed after run.json records a new checkpoint (or curve) but before it takes its name, or half way through
    writing it: the file in place is the previous one, which the record still names (as the previous), so it is
    verified and the run resumes from it, its half-written temporary file removed."""
    from gatedv_stats.io.curvefiles import read_curve_file
    from gatedv_stats.io.runrecords import read_run_record
    from trainer.run.checkpoint import load_checkpoint

    run_dir = tmp_path / "run"
    args = ["train", "--data", prepared_data, "--config", "tiny", "--seed", "1", "--batch-size", "2", "--updates",
            "4", "--eval-every", "2", "--device", "cpu", "--out", run_dir]
    _killed(args, *KILLS[kill])
    record = read_run_record(run_dir)
    assert load_checkpoint(run_dir / "checkpoint.pt").extra["update"] == 0  # the previous, verified
    assert read_curve_file(run_dir / "curve.csv")["step"].max() in (0, 2)  # verified against the record
    if kill == "checkpoint recorded, not renamed":
        assert record["checkpoint_sha256"] != record["previous_checkpoint_sha256"]  # names the new one already
    assert [p for p in run_dir.iterdir() if p.name.endswith(".tmp")]  # the killed write's
    result = CliRunner().invoke(cli.app, [str(arg) for arg in (*args, "--resume")])
    assert result.exit_code == 0, result.output
    assert read_run_record(run_dir)["status"] == "finished"
    assert load_checkpoint(run_dir / "checkpoint.pt").extra["update"] == 4
    assert not [p for p in run_dir.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.slow
def test_an_evaluation_killed_while_writing_keeps_the_loss_file_written_before(prepared_data, tmp_path):
    import hashlib

    from gatedv_stats.io.lossfiles import read_loss_file

    run_dir = tmp_path / "run"
    train = ["train", "--data", str(prepared_data), "--config", "tiny", "--seed", "1", "--batch-size", "2",
             "--updates", "2", "--eval-every", "2", "--device", "cpu", "--out", str(run_dir)]
    assert CliRunner().invoke(cli.app, train).exit_code == 0
    evaluate = ["evaluate", str(run_dir / "checkpoint.pt"), "--out", str(run_dir / "dev.parquet"), "--device", "cpu"]
    assert CliRunner().invoke(cli.app, evaluate).exit_code == 0
    before = hashlib.sha256((run_dir / "dev.parquet").read_bytes()).hexdigest()
    _killed(evaluate, None, ".dev.parquet.", 1)
    assert hashlib.sha256((run_dir / "dev.parquet").read_bytes()).hexdigest() == before
    read_loss_file(run_dir / "dev.parquet")  # whole, and verified against its recorded content hash
    leftover = [p for p in run_dir.iterdir() if p.name.startswith(".dev.parquet.")]
    assert len(leftover) == 1
    assert CliRunner().invoke(cli.app, evaluate).exit_code == 0  # the next write of the loss file removes it
    assert not leftover[0].exists()
