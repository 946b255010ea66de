"""Fault injection over every file kind gatedv writes and reads back: a flipped byte, a truncation and a file
emptied to zero bytes each end the command that reads it as one `error:` line naming the file (and, where gatedv
wrote it, what to do), exit 2, before any statistic, evaluation or resume uses it: no verdict is printed, no report,
loss file or checkpoint written. The table of these cases is docs/failure-contract.md."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from experiments import write_bench, write_runs
from gatedv_stats.io.benchfiles import write_bench_result
from gatedv_stats.io.runrecords import JOB_FILE_NAME, write_job_record
from gatedv_stats.testing import ppls_with_moments
from helpers import invoke, tiny_grid
from item_runs import write_tasks
from trainer.grid.experiment import load_experiment

pytestmark = pytest.mark.slow

TRAIN = ("--config", "tiny", "--seed", "1", "--batch-size", "2", "--updates", "4", "--eval-every", "2",
         "--device", "cpu")
PAIR = ("--baseline-arm", "baseline", "--variant-arm", "gatedv")


def flip(path: Path) -> None:
    """The lowest bit of the middle byte flipped."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    """The second half cut off, as a copy or a write that stopped early leaves a file."""
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def empty(path: Path) -> None:
    path.write_bytes(b"")


DAMAGES = {"flipped byte": flip, "truncated": truncate, "zero length": empty}


@dataclass(frozen=True)
class Case:
    """A file kind: where it lies in the world, the command that reads it, and what the line must say."""

    file: str  # relative to the world's root
    command: Callable[[Path], tuple]  # the world's root -> the command's arguments
    says: tuple[str, ...]  # one of these: the line's account of the damage
    advice: tuple[str, ...] = ()  # one of these: what to do
    unchanged: tuple[str, ...] = ()  # outputs that must be as they were
    damages: tuple[str, ...] = tuple(DAMAGES)  # a flipped byte of the ledger: test_no_flipped_byte_of_the_ledger_…


DAMAGED = ("damaged",)
UNREADABLE = ("damaged", "cannot read", "empty file")
PREPARE = ("gatedv prepare",)
EVALUATE = ("evaluate the run again",)
CASES = {
    "loss file": Case("study/heldout-0.001-None/gatedv_2.parquet",
                      lambda root: ("bootstrap", root / "study", *PAIR, "--samples", "100"), UNREADABLE, EVALUATE),
    "item-score file": Case("items/arc_easy_gatedv_1.parquet",
                            lambda root: ("bootstrap", root / "items", *PAIR, "--metric", "acc"), UNREADABLE,
                            EVALUATE),
    "curve": Case("run/curve.csv", lambda root: ("report", root / "study", root / "run" / "curve.csv", "--out",
                                                 root / "report.md", "--samples", "100"),
                  DAMAGED, ("train the run again",)),
    "run.json": Case("run/run.json", lambda root: ("train", "--data", root / "data", *TRAIN, "--out", root / "run",
                                                   "--resume"),
                     ("damaged", "cannot read JSON"), ("train the run again",), ("run/checkpoint.pt",)),
    "checkpoint (resume)": Case("run/checkpoint.pt", lambda root: ("train", "--data", root / "data", *TRAIN,
                                                                   "--out", root / "run", "--resume"),
                                DAMAGED, ("train the run again",), ("run/run.json", "run/curve.csv")),
    "checkpoint (evaluate)": Case("run/checkpoint.pt", lambda root: ("evaluate", root / "run" / "checkpoint.pt",
                                                                     "--out", root / "run" / "dev.parquet",
                                                                     "--device", "cpu"),
                                  DAMAGED, ("train the run again",), ("run/dev.parquet",)),
    "token store": Case("data/train.bin", lambda root: ("train", "--data", root / "data", *TRAIN, "--out",
                                                        root / "new"), DAMAGED, PREPARE),
    "document offsets": Case("data/train_docs.npy", lambda root: ("train", "--data", root / "data", *TRAIN, "--out",
                                                                  root / "new"), DAMAGED, PREPARE),
    "tokenizer": Case("data/tokenizer.json", lambda root: ("train", "--data", root / "data", *TRAIN, "--out",
                                                           root / "new"), DAMAGED, PREPARE),
    "data manifest": Case("data/manifest.json", lambda root: ("train", "--data", root / "data", *TRAIN, "--out",
                                                              root / "new"), ("damaged", "invalid JSON"), PREPARE),
    "bench result": Case("study/bench.json", lambda root: ("report", root / "study", "--out", root / "report.md",
                                                           "--samples", "100"),
                         ("damaged", "cannot read JSON"), ("run gatedv bench again",)),
    "job record": Case(f"runs/baseline/lr0.001/seed1/{JOB_FILE_NAME}", lambda root: ("sweep", root / "grid.toml",
                                                                                     "--status"),
                       ("damaged", "cannot read JSON"), ("before submitting it again",)),
    "noise floor": Case("floor.json", lambda root: ("bootstrap", root / "study", *PAIR, "--samples", "100",
                                                    "--noise-floor", root / "floor.json"),
                        ("damaged", "cannot read JSON"), ("gatedv noise-floor",)),
    "sequential design": Case("design.json", lambda root: ("decide", root / "study", *PAIR, "--design",
                                                           root / "design.json"),
                              ("damaged", "cannot read JSON"), ("start a new design file",)),
    "research ledger": Case("study.ledger", lambda root: ("ledger", root / "study.ledger", "show"),
                            ("not a gatedv ledger", "altered", "damaged", "emptied"),
                            damages=("truncated", "zero length")),
    "evaluation set": Case("data/dev.parquet", lambda root: ("evaluate", root / "run" / "checkpoint.pt", "--data",
                                                             root / "data", "--out", root / "other.parquet",
                                                             "--device", "cpu"),
                           ("damaged", "not a readable evaluation set"), PREPARE),
}


@pytest.fixture(scope="module")
def world(prepared_data, tmp_path_factory) -> Path:
    """Every kind of file, written by gatedv: a data directory, a run stopped at update 2 of 4 with its dev loss
    file, loss files of a study with a bench result, item-score files, and the job record of a grid's run."""
    root = tmp_path_factory.mktemp("world")
    shutil.copytree(prepared_data, root / "data")
    run = root / "run"
    assert invoke("train", "--data", root / "data", *TRAIN, "--out", run, "--stop-after", "2").exit_code == 0
    assert invoke("evaluate", run / "checkpoint.pt", "--out", run / "dev.parquet", "--device", "cpu").exit_code == 0
    write_runs(root / "study", {"baseline": ppls_with_moments(59.1, 0.5, 3), "gatedv": ppls_with_moments(57.9, 0.8, 3)},
               eval_set="heldout", lr=0.001)
    write_tasks(root / "items", tasks={"arc_easy": 0.25})
    write_bench(root / "study" / "bench.json")
    write_bench_result(root / "study" / "bench.json", json.loads((root / "study" / "bench.json").read_text()))
    (root / "grid.toml").write_text(tiny_grid("data", updates=4, eval_every=2, batch_size=2))
    write_job_record(load_experiment(root / "grid.toml").runs()[0].run_dir,
                     {"executor": "local", "job_id": "999999999", "stderr": str(root / "job.err")})
    study = sorted((root / "study").rglob("*.parquet"))
    baseline = [path for path in study if "baseline" in path.name]
    variant = [path for path in study if "gatedv" in path.name]
    for command in (("noise-floor", *baseline, "--out", root / "floor.json"),
                    ("decide", root / "study", *PAIR, "--design", root / "design.json", "--max-seeds", "3"),
                    ("ledger", root / "study.ledger", "add", "--candidate", *variant, "--against", *baseline)):
        assert invoke(*command).exit_code == 0
    return root


def _hashes(root: Path, names: tuple[str, ...]) -> dict[str, str | None]:
    return {name: hashlib.sha256((root / name).read_bytes()).hexdigest() if (root / name).exists() else None
            for name in names}


def test_the_world_reads_whole(world, tmp_path):
    """Undamaged, every command of the table succeeds (so each failure below is the damage's)."""
    for number, (name, case) in enumerate(CASES.items()):
        root = tmp_path / f"world{number}"
        shutil.copytree(world, root)
        result = invoke(*case.command(root))
        assert result.exit_code == 0, (name, result.output)


@pytest.mark.parametrize("kind, damage", [(kind, damage) for kind, case in CASES.items() for damage in case.damages])
def test_a_damaged_file_is_one_line_and_nothing_is_computed_from_it(world, tmp_path, kind, damage):
    case = CASES[kind]
    root = tmp_path / "world"
    shutil.copytree(world, root)
    target = root / case.file
    DAMAGES[damage](target)
    outputs = ("report.md", "new/checkpoint.pt", "other.parquet", *case.unchanged)
    before = _hashes(root, outputs)
    result = invoke(*case.command(root))
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert [line for line in lines if line.startswith("error")] == lines[-1:] == [lines[-1]], result.stderr
    line = lines[-1]
    assert line.startswith(f"error: {target}: "), line  # the damaged file, named first
    detail = line.removeprefix(f"error: {target}: ")  # the test's own path holds "damaged"
    assert any(word in detail for word in case.says), line
    if case.advice:
        assert any(advice in detail for advice in case.advice), line
    assert "Traceback" not in result.output and result.stdout == ""  # no verdict, no summary
    assert _hashes(root, outputs) == before  # no report, loss file or checkpoint written or changed


def _content(run, seal: str | None = None) -> tuple:
    """What a reader takes from a loss or item-score run: its rows and its metadata, less the seal (`seal`, which,
    its key's name damaged, is one more key of no meaning)."""
    meta = {key: value for key, value in run.meta.items() if key != "content_sha256" and value != seal}
    rows = run.docs if hasattr(run, "docs") else run.units
    return rows.to_dict("list"), meta


@pytest.mark.parametrize("kind", ["loss file", "item-score file"])
def test_no_flipped_bit_of_a_parquet_file_changes_what_is_read(tmp_path, kind):
    """Every byte of a small file flipped in turn: the read is refused in one `InputError`, or what it reads is
    exactly what was written (the byte was one no reader uses: column statistics, the writer's name, a spare copy
    of the schema's types). Never other numbers, ids or metadata."""
    import numpy as np
    import pandas as pd

    from gatedv_stats.core.errors import InputError
    from gatedv_stats.io.itemfiles import read_item_file, write_item_file
    from gatedv_stats.io.lossfiles import read_loss_file, write_loss_file

    path = tmp_path / "file.parquet"
    rng = np.random.default_rng(0)
    if kind == "loss file":
        docs = pd.DataFrame({"doc_id": [f"d{i}" for i in range(6)], "n_targets": rng.integers(100, 257, 6),
                             "loss_sum": rng.uniform(300, 900, 6), "domain": ["a", "b"] * 3})
        write_loss_file(path, docs, {"arm": "a", "seed": 1, "eval_set": "dev"})
        read = read_loss_file
    else:
        write_item_file(path, pd.DataFrame({"doc_id": [str(i) for i in range(6)], "acc": [1.0, 0.0] * 3,
                                            "subtask": ["x"] * 6}), {"arm": "a", "seed": 1, "task": "t"})
        read = lambda where: read_item_file(where)[0]  # noqa: E731
    seal = read(path).meta["content_sha256"]
    written, expected = path.read_bytes(), _content(read(path), seal)
    outcomes = {"refused": 0, "as written": 0}
    for offset in range(len(written)):
        damaged = bytearray(written)
        damaged[offset] ^= 0x01
        path.write_bytes(bytes(damaged))
        try:
            content = _content(read(path), seal)
        except InputError:
            outcomes["refused"] += 1
            continue
        assert content == expected, f"byte {offset} of {len(written)}: read as other content"
        outcomes["as written"] += 1
    assert outcomes["refused"] > len(written) / 2, outcomes


def test_no_flipped_byte_of_the_ledger_changes_its_history(world, tmp_path):
    """The ledger (SQLite) has free space inside its pages, where a flipped byte changes nothing read: a byte flipped
    at each of 48 places across the file is refused in one line naming the ledger, or the history shown is exactly
    the undamaged one's. Never another history."""
    ledger = tmp_path / "study.ledger"
    shutil.copy(world / "study.ledger", ledger)
    whole = ledger.read_bytes()
    shown = invoke("ledger", ledger, "show", "--json").stdout
    refused = 0
    for offset in np.linspace(0, len(whole) - 1, 48).astype(int):
        ledger.write_bytes(whole[:offset] + bytes([whole[offset] ^ 0x10]) + whole[offset + 1:])
        result = invoke("ledger", ledger, "show", "--json")
        if result.exit_code == 0:
            assert result.stdout == shown, offset
        else:
            refused += 1
            assert result.exit_code == 2 and result.stderr.startswith(f"error: {ledger}: "), (offset, result.stderr)
            assert len(result.stderr.strip().splitlines()) == 1
    assert refused > 0  # some flips land on what the ledger holds
