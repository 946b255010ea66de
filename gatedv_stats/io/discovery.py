"""Input discovery: every loss file, curve file, run record and bench result given or found under directories."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from gatedv_stats.core.errors import InputError
from gatedv_stats.core.files import each_once, file_sha256, paths_under
from gatedv_stats.io.benchfiles import BENCH_GLOB, read_bench_result
from gatedv_stats.io.curvefiles import CURVE_COLUMNS, CURVE_FILE_NAME, read_curve_inputs
from gatedv_stats.io.itemfiles import ItemRun, is_item_file, read_item_inputs
from gatedv_stats.io.lossfiles import LOSS_FILE_SUFFIXES, LossRun, SkippedFile, UnreadableFileError, read_loss_inputs
from gatedv_stats.io.runrecords import RUN_FILE_NAME, read_run_file


@dataclass(frozen=True)
class InputFile:
    """One file read for an experiment, for the provenance record."""

    path: str
    kind: str  # "loss file", "curve file", "run file", "bench results", "item-score file"
    sha256: str


@dataclass(frozen=True)
class ExperimentInputs:
    """What `discover_inputs` found: loss runs, curves, trainer run records, bench results, and the files."""

    runs: tuple[LossRun, ...]
    curves: pd.DataFrame  # arm, seed, lr, step, dev_nll
    run_infos: tuple[dict, ...]  # run.json contents
    bench: tuple[dict, ...]  # bench results, each with "source"
    files: tuple[InputFile, ...]
    skipped: tuple[SkippedFile, ...] = ()  # unreadable files passed over on request
    item_runs: tuple[ItemRun, ...] = ()  # downstream-task item scores (gatedv_stats.io.itemfiles)


# The files recognised by name, under a directory or given, by the kind the provenance record calls them.
_NAMED = {"curve file": lambda path: path.name == CURVE_FILE_NAME, "run file": lambda path: path.name == RUN_FILE_NAME,
          "bench results": lambda path: path.match(BENCH_GLOB)}


def discover_inputs(inputs: list[Path], *, skipped: list[SkippedFile] | None = None) -> ExperimentInputs:
    """Read every loss file, curve file, run.json and bench*.json given or found under the given directories.

    A file under a directory that looks like a loss file but cannot be read is an error; when a `skipped` list
    is given it is appended there instead, and listed in the result's `skipped`."""
    # The inputs by kind ("loss file": files and directories, for the loss-file reader, which reads each file once).
    found: dict[str, list[Path]] = {kind: [] for kind in ("loss file", *_NAMED, "item-score file")}
    for given in map(Path, inputs):
        if given.is_dir():
            found["loss file"].append(given)
            under = paths_under(given)
            found["item-score file"] += [path for path in under if found_item_file(path)]
            for kind, named in _NAMED.items():
                found[kind] += [path for path in under if named(path)]
        elif not given.exists():
            raise InputError(f"{given}: no such file or directory")
        elif by_name := next((kind for kind, named in _NAMED.items() if named(given)), None):
            found[by_name].append(given)
        elif is_item_file(given):
            found["item-score file"].append(given)
        elif given.suffix in LOSS_FILE_SUFFIXES:
            found["loss file"].append(given)
        else:
            raise InputError(f"{given}: not a loss file (.parquet / .csv), {CURVE_FILE_NAME}, {RUN_FILE_NAME} "
                             f"or {BENCH_GLOB}")
    found = {kind: paths if kind == "loss file" else each_once(paths) for kind, paths in found.items()}
    runs = read_loss_inputs(found["loss file"], skipped=skipped)
    if not runs:
        raise InputError("no loss files among the inputs: a report needs at least one evaluated run")
    files = {run.source.split("[", 1)[0]: InputFile(run.source.split("[", 1)[0], "loss file", run.sha256)
             for run in runs}
    files.update({str(path): InputFile(str(path), kind, file_sha256(path))
                  for kind, paths in found.items() if kind != "loss file" for path in paths})
    curves = (read_curve_inputs(found["curve file"]) if found["curve file"]
              else pd.DataFrame(columns=list(CURVE_COLUMNS)))
    return ExperimentInputs(
        runs=tuple(runs),
        curves=curves,
        run_infos=tuple(read_run_file(path) for path in found["run file"]),
        bench=tuple(read_bench_result(path) for path in found["bench results"]),
        files=tuple(files.values()),
        skipped=tuple(dict.fromkeys(skipped or ())),  # a directory named twice lists its files once
        item_runs=tuple(read_item_inputs(found["item-score file"])),
    )


def found_item_file(path: Path) -> bool:
    """An item-score file found under a directory; an unreadable file is left to the loss-file reader to report
    (or skip)."""
    try:
        return is_item_file(path)
    except UnreadableFileError:
        return False
