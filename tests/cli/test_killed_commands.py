"""`kill -9` of `gatedv import lm-eval` and `gatedv report` at a random point of their writing (a seeded delay after
the first write, drawn over the time the command takes to write everything): no file is left half written under its
final name, the outputs written before are intact, every file in place reads back verified, and the same command run
again completes with the same output, the killed write's temporary file and the killed report's lock file gone.

The same of `gatedv sweep` (plain and `--until-decided`) on a tiny grid: every run's file in place reads back
verified, the rerun takes over the killed run's lock and ends with the loss values (and the sequential designs and
looks) of a sweep never interrupted."""

from __future__ import annotations

import contextlib
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from experiments import write_runs
from gatedv_cli.until_decided import design_directory
from gatedv_stats.core.locks import RUN_LOCK_NAME
from gatedv_stats.io.curvefiles import CURVE_FILE_NAME, read_curve_file
from gatedv_stats.io.itemfiles import read_item_inputs
from gatedv_stats.io.lossfiles import read_loss_file
from gatedv_stats.io.runrecords import RUN_FILE_NAME, read_sealed_record
from gatedv_stats.testing import ppls_with_moments
from harness_logs import MC_LINES, many_tasks_run, write_log
from helpers import designs, final_files, invoke, invoke_json, sweep_json, tree
from trainer.run.checkpoint import CHECKPOINT_FILE_NAME, load_checkpoint

pytestmark = pytest.mark.slow  # each case starts the command as a new process

ROOT = Path(__file__).resolve().parents[2]
SEEDS = (1, 2)
TARGETS = ("new", "over earlier outputs")


def gatedv_process(*args: object) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ROOT / "cli.py"), *map(str, args)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def snapshot(out: Path) -> dict[Path, int]:
    """Every path under `out` but a lock file, with its modification time (a file renamed into place has its own)."""
    found = {}
    for path in out.rglob("*") if out.exists() else ():
        with contextlib.suppress(FileNotFoundError):  # a temporary file renamed into place meanwhile
            if not path.name.endswith(".lock"):
                found[path] = path.stat().st_mtime_ns
    return found


def wait_for_first_write(process: subprocess.Popen, out: Path) -> None:
    """Until the command changes anything under `out` (a temporary file made, a file renamed into place) or ends."""
    before = snapshot(out)
    while process.poll() is None and snapshot(out) == before:
        time.sleep(0.002)


def writing_time(args: tuple, out: Path) -> float:
    """Run `gatedv ARGS` to the end as a new process; the seconds from its first write under `out` to its end."""
    return writing_times(args, out)[0]


def writing_times(args: tuple, *watched: Path) -> list[float]:
    """Run `gatedv ARGS` to the end as a new process; for each of the `watched` paths, in the order the command
    first writes under them, the seconds from that first write to its end."""
    process = gatedv_process(*args)
    started = []
    for path in watched:
        wait_for_first_write(process, path)
        started.append(time.monotonic())
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr
    return [time.monotonic() - start for start in started]


def killed_while_writing(args: tuple, out: Path, span: float, seed: int,
                         while_running: Callable[[], object] = lambda: None) -> int:
    """`gatedv ARGS` as a new process, killed (SIGKILL) a delay drawn with `seed` from [0, span) after its first
    write under `out`: a random point of its writing; `while_running` is called over and over meanwhile (a reader
    of its outputs). Its exit status (-9, or 0 when it had finished first)."""
    process = gatedv_process(*args)
    wait_for_first_write(process, out)
    deadline = time.monotonic() + random.Random(seed).uniform(0.0, span)
    while (left := deadline - time.monotonic()) > 0:
        while_running()
        time.sleep(min(left, 0.02))
    process.send_signal(signal.SIGKILL)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode in (-signal.SIGKILL, 0), stderr
    return process.returncode


def assert_whole_and_earlier_intact(found: dict[str, str], expected: dict[str, str], earlier: dict[str, str]) -> None:
    """What a killed command leaves under final names: each file one that was written whole (`expected`'s bytes),
    the earlier outputs among them as they were."""
    assert earlier.items() <= found.items()
    assert {name: sha for name, sha in found.items() if name not in earlier}.items() <= expected.items()


@pytest.fixture(scope="module")
def harness_import(tmp_path_factory):
    """A harness run of 60 tasks (an import writing 60 files), an earlier import of another log, and the reference:
    the import run to the end in a new process, and the seconds it spent writing."""
    root = tmp_path_factory.mktemp("import")
    command = ("import", "lm-eval", many_tasks_run(root / "harness", n_tasks=60, n_items=100), "--arm", "a", "--out")
    earlier = root / "earlier"
    assert invoke("import", "lm-eval", write_log(root / "mc.jsonl", MC_LINES), "--arm", "a", "--out",
                  earlier / "earlier.parquet").exit_code == 0
    span = writing_time((*command, root / "reference"), root / "reference")
    return command, earlier, tree(root / "reference"), span


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("seed", SEEDS)
def test_an_import_killed_at_a_random_point_leaves_whole_files_and_completes_when_run_again(
        harness_import, tmp_path, target, seed):
    command, earlier, reference, span = harness_import
    out = tmp_path / "imported"
    shutil.copytree(earlier, out)
    if target == TARGETS[1]:
        assert invoke(*command, out).exit_code == 0
    before = final_files(out)
    killed_while_writing((*command, out), out, span, seed)
    assert_whole_and_earlier_intact(final_files(out), reference, before)
    assert len(read_item_inputs([out])) == len(final_files(out))  # every file in place reads back verified
    assert invoke(*command, out).exit_code == 0
    assert tree(out) == {**tree(earlier), **reference}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """Loss files of a study, its report run to the end in a new process (the earlier outputs of the killed
    reports), and the seconds it spent writing."""
    root = tmp_path_factory.mktemp("study")
    write_runs(root / "runs", {"baseline": ppls_with_moments(59.1, 0.5, 3), "gatedv": ppls_with_moments(57.9, 0.8, 3)},
               eval_set="heldout", lr=0.001)
    command = ("report", root / "runs", "--samples", "100", "--out")
    span = writing_time((*command, root / "reference" / "report.md"), root / "reference")
    return command, root / "reference", span


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("seed", SEEDS)
def test_a_report_killed_at_a_random_point_leaves_whole_files_and_completes_when_run_again(
        study, tmp_path, target, seed):
    command, reference, span = study
    out = tmp_path / "report"
    if target == TARGETS[1]:
        shutil.copytree(reference, out)
    before = final_files(out) if out.exists() else {}
    killed_while_writing((*command, out / "report.md"), out, span, seed)
    found = final_files(out) if out.exists() else {}
    assert_whole_and_earlier_intact(found, tree(reference), before)
    assert invoke(*command, out / "report.md").exit_code == 0
    assert tree(out) == tree(reference)


# --- sweeps: a tiny grid, killed while it trains, evaluates or looks ---

GRID = """
name = "killed"
data = "{data}"
config = "tiny"
variants = ["baseline", "gatedv"]
seeds = {seeds}
lrs = [0.003]
updates = {updates}
eval_every = 1
batch_size = 2
out = "runs"
"""
# A plain sweep: 2 variants x 2 seeds, a checkpoint at update 1 that a killed run resumes from.
SWEPT = {"seeds": [1, 2], "updates": 2}
SWEPT_RUNS = 2 * len(SWEPT["seeds"])
# A sequential sweep: its first look at 2 seed pairs, a second at 3 unless the first stops.
DECIDED = {"seeds": [1, 2, 3], "updates": 1}
UNTIL_DECIDED = ("--until-decided", "--sesoi", "0.01")
# Timing on shared cores varies from run to run (by a quarter or more): the delay is drawn over the first 70% of the
# reference's writing so that the kill lands before the end, which each test checks (and otherwise kills a new run
# sooner).
LANDS_BEFORE_END = 0.7
READERS = {RUN_FILE_NAME: read_sealed_record, CURVE_FILE_NAME: read_curve_file, CHECKPOINT_FILE_NAME: load_checkpoint,
           "dev.parquet": read_loss_file, "heldout.parquet": read_loss_file}  # each verifies what it reads
LOSS_COLUMNS = ("doc_id", "n_targets", "loss_sum")


def write_grid(directory: Path, data: Path, shape: dict) -> Path:
    grid = directory / "grid.toml"
    grid.write_text(GRID.format(data=data, **shape))
    return grid


def sweep_args(grid: Path, *options: str) -> tuple:
    return ("sweep", grid, "--device", "cpu", *options)


def killed_before_its_end(args: tuple, grid: Path, watched: Path, span: float, seed: int,
                          finished: Callable[[], bool], while_running: Callable[[], object] = lambda: None) -> None:
    """`killed_while_writing` of `gatedv ARGS` (which writes beside `grid`), after its first write under `watched`
    and within LANDS_BEFORE_END of `span`; when it finished first (the command, or every output `finished`
    checks), everything but the grid is removed and a new run is killed within half the time."""
    for attempt in range(3):
        status = killed_while_writing(args, watched, LANDS_BEFORE_END * span / 2**attempt, seed, while_running)
        if status == -signal.SIGKILL and not finished():
            return
        for path in grid.parent.iterdir():
            if path != grid:
                shutil.rmtree(path)
    pytest.fail(f"gatedv {' '.join(map(str, args))} finished before each of 3 kills")


def verified_runs(runs: Path) -> dict[Path, set[str]]:
    """Each run directory under `runs` and the final files in it, every one read back with its verifying reader."""
    found: dict[Path, set[str]] = {}
    for name in final_files(runs):
        path = runs / name
        assert path.name in READERS, f"{path}: not a file a run holds"
        READERS[path.name](path)
        found.setdefault(path.parent, set()).add(path.name)
    return found


def assert_only_allowed_leftovers(root: Path, names: Iterable[str], locks: Iterable[str]) -> None:
    """Every hidden file under `root` is one a killed command may leave: a killed write's temporary file
    `.NAME.XXXXXXXX.tmp` of a file `names` lists, or one of the lock files `locks`, its holder gone."""
    temporary = rf"\.({'|'.join(map(re.escape, names))})\.\w+\.tmp"
    for name in set(tree(root)) - set(final_files(root)):
        assert re.fullmatch(temporary, Path(name).name) or Path(name).name in locks, name


def loss_columns(runs: Path) -> dict[str, pd.DataFrame]:
    """The per-document loss columns of every loss file under `runs`, by its path there (read verified)."""
    return {str(path.relative_to(runs)): read_loss_file(path).docs.loc[:, LOSS_COLUMNS]
            for path in sorted(runs.rglob("*.parquet"))}


def assert_same_losses(found: dict[str, pd.DataFrame], expected: dict[str, pd.DataFrame]) -> None:
    assert found.keys() == expected.keys()
    for name, columns in expected.items():
        for column in LOSS_COLUMNS:
            assert np.array_equal(found[name][column].to_numpy(), columns[column].to_numpy()), (name, column)


@pytest.fixture(scope="module")
def swept(prepared_data, tmp_path_factory):
    """The tiny grid swept to the end in a new process: its loss columns, and the seconds it spent writing."""
    grid = write_grid(tmp_path_factory.mktemp("swept"), prepared_data, SWEPT)
    span = writing_time(sweep_args(grid), grid.parent)
    return loss_columns(grid.parent / "runs"), span


@pytest.mark.parametrize("seed", SEEDS)
def test_a_sweep_killed_at_a_random_point_leaves_verified_files_and_its_rerun_matches_an_uninterrupted_one(
        swept, prepared_data, tmp_path, seed):
    reference, span = swept
    grid = write_grid(tmp_path, prepared_data, SWEPT)
    runs = tmp_path / "runs"

    def every_run_finished() -> bool:
        return sum(len(files) == len(READERS) for files in verified_runs(runs).values()) == SWEPT_RUNS

    killed_before_its_end(sweep_args(grid), grid, tmp_path, span, seed, every_run_finished)
    assert_only_allowed_leftovers(runs, READERS, [RUN_LOCK_NAME])
    # a lock killed before its holder wrote its record (a few microseconds) is taken over without a word
    stale_locks = {lock.parent for lock in runs.rglob(RUN_LOCK_NAME) if lock.read_bytes()}

    rerun = sweep_json(grid, "--device", "cpu")
    assert {run["action"] for run in rerun["runs"]} - {"skipped"}  # the rerun had something left to do
    # each run the kill left locked is taken over, and said so
    took_over = {Path(warning.split(": took over the lock")[0]) for warning in rerun["warnings"]}
    assert took_over == stale_locks
    assert tree(runs) == final_files(runs)  # no temporary file or lock left
    assert all(len(files) == len(READERS) for files in verified_runs(runs).values())
    assert_same_losses(loss_columns(runs), reference)


# Where the random point is drawn from: the whole sweep, or its last round (anchored at the first look, whose design
# file the rerun resumes: the rounds take times that vary too much on shared cores to reach it by time alone).
PHASES = ("from its first write", "from its first look")


@pytest.fixture(scope="module")
def decided(prepared_data, tmp_path_factory):
    """The tiny grid's sequential sweep run to the end in a new process: its designs, and the seconds it spent
    writing from its first write and from its first look (what remains of it then: the last round)."""
    grid = write_grid(tmp_path_factory.mktemp("decided"), prepared_data, DECIDED)
    spans = writing_times(sweep_args(grid, *UNTIL_DECIDED), grid.parent, design_directory(grid))
    return designs(grid), dict(zip(PHASES, spans))


@pytest.mark.parametrize(("phase", "seed"), list(zip(PHASES, SEEDS)))
def test_a_sequential_sweep_killed_at_a_random_point_resumes_to_the_designs_of_an_uninterrupted_one(
        decided, prepared_data, tmp_path, phase, seed):
    reference, spans = decided
    assert reference and all(content["looks"][-1]["stop"] for content in reference.values())
    grid = write_grid(tmp_path, prepared_data, DECIDED)
    watched = tmp_path if phase == PHASES[0] else design_directory(grid)

    # a design file read while the sweep writes it, over and over, is always whole and sealed
    killed_before_its_end(sweep_args(grid, *UNTIL_DECIDED), grid, watched, spans[phase], seed,
                          lambda: designs(grid) == reference, while_running=lambda: designs(grid))
    at_kill = designs(grid)
    assert at_kill or phase == PHASES[0]
    for name, content in at_kill.items():  # what was recorded is the start of the uninterrupted sweep's
        assert content["design"] == reference[name]["design"]
        assert content["looks"] == reference[name]["looks"][:len(content["looks"])]
    if design_directory(grid).exists():
        assert_only_allowed_leftovers(design_directory(grid), reference, [f".{name}.lock" for name in reference])

    rerun = invoke_json(*sweep_args(grid, *UNTIL_DECIDED))
    assert all(state["stopped"] for state in rerun["variants"])
    assert designs(grid) == reference
    assert tree(design_directory(grid)) == final_files(design_directory(grid))  # no temporary file or lock left
