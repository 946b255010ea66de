"""A real full file system: a tiny tmpfs (`.ci/run` runs as root, so the tests mount one) filled by what gatedv
writes. Every command ends as one `error:` line and exit 4 naming what could not be written and what is kept; the
earlier files stay whole and verifiable, nothing half written is left, and once there is room the work goes on.
Skipped with the reason where this process is not root or the mount is refused; failed instead under
GATEDV_REQUIRE_SYSTEM_TOOLS=1 (as CI runs), like the tests that need chromium or pdflatex."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import REQUIRE_SYSTEM_TOOLS
from experiments import write_runs
from gatedv_stats.core.atomic import write_bytes_atomic
from gatedv_stats.core.errors import NoSpaceError
from gatedv_stats.io.runrecords import read_run_record
from gatedv_stats.testing import ppls_with_moments
from helpers import full_disk_line, invoke
from trainer.run.checkpoint import load_checkpoint

pytestmark = pytest.mark.slow

TRAIN = ("--config", "tiny", "--seed", "1", "--batch-size", "2", "--updates", "4", "--eval-every", "2",
         "--device", "cpu")


def _unavailable(reason: str) -> None:
    if os.environ.get(REQUIRE_SYSTEM_TOOLS) == "1":
        pytest.fail(f"{reason}; {REQUIRE_SYSTEM_TOOLS}=1 requires a tmpfs mount", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def small_filesystem(tmp_path):
    """`mount(size)`: a tmpfs of `size` (e.g. "12m") mounted at a new directory, unmounted after the test;
    `mount.resize(size)` frees space (remounts it larger)."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        if os.geteuid() != 0:
            _unavailable("mounting a tmpfs needs root (.ci/run runs as root)")
        point = tmp_path / f"fs{len(mounted)}"
        point.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            _unavailable(f"mount -t tmpfs was refused: {done.stderr.strip() or done.returncode}")
        mounted.append(point)
        return point

    def resize(point: Path, size: str) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(point)], check=True)

    mount.resize = resize  # type: ignore[attr-defined]
    yield mount
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], check=False)


def _no_temporary_files(root: Path) -> None:
    assert not [path for path in root.rglob("*") if path.name.endswith(".tmp")]


def test_an_atomic_write_that_does_not_fit_keeps_the_previous_file(small_filesystem):
    disk = small_filesystem("2m")
    write_bytes_atomic(disk / "kept.bin", b"x" * 700_000)
    with pytest.raises(NoSpaceError, match=rf"^{disk / 'kept.bin'}: could not be written: No space left on device; "
                                           "the previous kept.bin is kept as it was"):
        write_bytes_atomic(disk / "kept.bin", b"y" * 3_000_000)
    assert (disk / "kept.bin").read_bytes() == b"x" * 700_000
    _no_temporary_files(disk)


def test_training_on_a_full_disk_keeps_its_checkpoint_and_resumes_once_there_is_room(small_filesystem, prepared_data):
    # One checkpoint of the tiny model with its optimizer state (7.6 MB; 2.5 MB at update 0, before the optimizer
    # has any) fits, a second one beside it does not.
    disk = small_filesystem("12m")
    run_dir = disk / "run"
    line = full_disk_line(invoke("train", "--data", prepared_data, *TRAIN, "--out", run_dir))
    assert line.startswith(f"error: {run_dir}: no space left on the device writing {run_dir / 'checkpoint.pt'} "
                           "after update 4") and "its checkpoint of update 2 is kept" in line
    assert load_checkpoint(run_dir / "checkpoint.pt").extra["update"] == 2  # verified against run.json
    _no_temporary_files(disk)
    small_filesystem.resize(disk, "40m")
    assert invoke("train", "--data", prepared_data, *TRAIN, "--out", run_dir, "--resume").exit_code == 0
    assert read_run_record(run_dir)["status"] == "finished"
    assert load_checkpoint(run_dir / "checkpoint.pt").extra["update"] == 4


def test_evaluate_report_and_export_on_a_full_disk(small_filesystem, prepared_data, tmp_path):
    run_dir = tmp_path / "run"
    assert invoke("train", "--data", prepared_data, *TRAIN, "--out", run_dir, "--stop-after", "2").exit_code == 0
    runs = tmp_path / "runs"
    write_runs(runs, {"baseline": ppls_with_moments(59.1, 0.5, 3), "gatedv": ppls_with_moments(57.9, 0.8, 3)},
               eval_set="heldout", lr=0.001)
    disk = small_filesystem("1m")
    report = disk / "report.md"
    assert invoke("report", runs, "--out", report, "--samples", "100").exit_code == 0
    before = report.read_bytes()
    _fill(disk)
    line = full_disk_line(invoke("report", runs, "--out", report, "--samples", "100"))
    assert f"{disk}/report" in line and "could not be written" in line  # the report or one of its figures
    assert report.read_bytes() == before
    out = disk / "dev.parquet"
    assert f"{out}: could not be written" in full_disk_line(invoke("evaluate", run_dir / "checkpoint.pt", "--out",
                                                                   out, "--device", "cpu"))
    assert not out.exists()
    assert f"{disk / 'hf'}: could not be written" in full_disk_line(invoke("export-hf", run_dir / "checkpoint.pt",
                                                                           disk / "hf"))
    assert sorted(path.name for path in disk.iterdir()) == ["filler", "report.md", "report_figures"]


def _fill(disk: Path) -> None:
    """Fill the file system but for a few blocks."""
    with open(disk / "filler", "ab") as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()
        except OSError:
            pass


def test_a_ledger_whose_first_entry_does_not_fit_leaves_no_file(small_filesystem, tmp_path):
    runs = tmp_path / "runs"
    write_runs(runs, {"baseline": ppls_with_moments(59.1, 0.5, 3), "gatedv": ppls_with_moments(57.9, 0.8, 3)},
               eval_set="heldout", lr=0.001)
    disk = small_filesystem("1m")
    ledger = disk / "study.ledger"
    files = sorted(str(path) for path in runs.rglob("*.parquet"))
    add = ("ledger", ledger, "add", "--candidate", *[path for path in files if "gatedv" in path], "--against",
           *[path for path in files if "baseline" in path])
    _fill(disk)
    line = full_disk_line(invoke(*add, "--note", "a long note " * 4000))
    assert f"{ledger}: could not be written" in line
    assert sorted(path.name for path in disk.iterdir()) == ["filler"]  # no ledger, no scratch or journal file
    (disk / "filler").unlink()
    assert invoke(*add).exit_code == 0
    assert sorted(path.name for path in disk.iterdir()) == ["study.ledger"]
