"""Input discovery: every loss file, curve file, run record and bench result given or found under directories."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from gatedv_stats.core.errors import InputError
from gatedv_stats.core.files import file_sha256, paths_under
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


@dataclass
class _Found:
    loss: list[Path]
    curve: list[Path]
    run: list[Path]
    bench: list[Path]
    items: list[Path]


def _sort_inputs(inputs: list[Path]) -> _Found:
    found = _Found([], [], [], [], [])
    for given in map(Path, inputs):
        if given.is_dir():
            found.loss.append(given)
            under = paths_under(given)
            found.items += [path for path in under if found_item_file(path)]
            found.curve += [path for path in under if path.name == CURVE_FILE_NAME]
            found.run += [path for path in under if path.name == RUN_FILE_NAME]
            found.bench += [path for path in under if path.match(BENCH_GLOB)]
        elif not given.exists():
            raise InputError(f"{given}: no such file or directory")
        elif given.name == CURVE_FILE_NAME:
            found.curve.append(given)
        elif given.name == RUN_FILE_NAME:
            found.run.append(given)
        elif given.match(BENCH_GLOB):
            found.bench.append(given)
        elif is_item_file(given):
            found.items.append(given)
        elif given.suffix in LOSS_FILE_SUFFIXES:
            found.loss.append(given)
        else:
            raise InputError(f"{given}: not a loss file (.parquet / .csv), {CURVE_FILE_NAME}, {RUN_FILE_NAME} "
                             f"or {BENCH_GLOB}")
    found.curve, found.run, found.bench, found.items = (_once(paths) for paths in (found.curve, found.run, found.bench,
                                                                                   found.items))
    return found


def found_item_file(path: Path) -> bool:
    """An item-score file found under a directory; an unreadable file is left to the loss-file reader to report
    (or skip)."""
    try:
        return is_item_file(path)
    except UnreadableFileError:
        return False


def _once(paths: list[Path]) -> list[Path]:
    """Each file once, in the order first named, however many ways it was named (itself, through a directory)."""
    first: dict[Path, Path] = {}
    for path in paths:
        first.setdefault(path.resolve(), path)
    return list(first.values())


def discover_inputs(inputs: list[Path], *, skipped: list[SkippedFile] | None = None) -> ExperimentInputs:
    """Read every loss file, curve file, run.json and bench*.json given or found under the given directories.

    A file under a directory that looks like a loss file but cannot be read is an error; when a `skipped` list
    is given it is appended there instead, and listed in the result's `skipped`."""
    found = _sort_inputs(inputs)
    # A file named twice (itself and through its directory) counts once.
    read = read_loss_inputs(found.loss, skipped=skipped) if found.loss else []
    runs = list({run.source: run for run in read}.values())
    if not runs:
        raise InputError("no loss files among the inputs: a report needs at least one evaluated run")
    files = {run.source.split("[", 1)[0]: InputFile(run.source.split("[", 1)[0], "loss file", run.sha256)
             for run in runs}
    for paths, kind in ((found.curve, "curve file"), (found.run, "run file"), (found.bench, "bench results"),
                        (found.items, "item-score file")):
        for path in paths:
            files[str(path)] = InputFile(str(path), kind, file_sha256(path))
    curves = read_curve_inputs(found.curve) if found.curve else pd.DataFrame(columns=list(CURVE_COLUMNS))
    return ExperimentInputs(
        runs=tuple(runs),
        curves=curves,
        run_infos=tuple(read_run_file(path) for path in found.run),
        bench=tuple(read_bench_result(path) for path in found.bench),
        files=tuple(files.values()),
        skipped=tuple(dict.fromkeys(skipped or ())),  # a directory named twice lists its files once
        item_runs=tuple(read_item_inputs(found.items)) if found.items else (),
    )
