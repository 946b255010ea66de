"""Input discovery: every loss file, item-score file, score table, curve file, run record and bench result given
or found under directories."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from gatedv_stats.core.errors import InputError
from gatedv_stats.core.files import each_once, file_sha256, paths_under
from gatedv_stats.io.benchfiles import BENCH_GLOB, read_bench_result
from gatedv_stats.io.curvefiles import CURVE_COLUMNS, CURVE_FILE_NAME, read_curve_inputs
from gatedv_stats.io.itemfiles import ITEMS
from gatedv_stats.io.lossfiles import LOSS
from gatedv_stats.io.runfiles import RUN_FILE_SUFFIXES, Run, RunSchema, SkippedFile, file_runs, read_runs, recognised
from gatedv_stats.io.runrecords import RUN_FILE_NAME, read_run_file


@dataclass(frozen=True)
class InputFile:
    """One file read for an experiment, for the provenance record."""

    path: str
    kind: str  # "loss file", "curve file", "run file", "bench results", "item-score file", "score table"
    sha256: str


@dataclass(frozen=True)
class ExperimentInputs:
    """What `discover_inputs` found: loss runs, curves, trainer run records, bench results, and the files."""

    runs: tuple[Run, ...]
    curves: pd.DataFrame  # arm, seed, lr, step, dev_nll
    run_infos: tuple[dict, ...]  # run.json contents
    bench: tuple[dict, ...]  # bench results, each with "source"
    files: tuple[InputFile, ...]
    skipped: tuple[SkippedFile, ...] = ()  # unreadable files passed over on request
    metric_runs: tuple[Run, ...] = ()  # runs of item-score files (downstream tasks) and score tables


# The files recognised by name, under a directory or given, by the kind the provenance record calls them.
_NAMED = {"curve file": lambda path: path.name == CURVE_FILE_NAME, "run file": lambda path: path.name == RUN_FILE_NAME,
          "bench results": lambda path: path.match(BENCH_GLOB)}


def discover_inputs(inputs: list[Path], *, skipped: list[SkippedFile] | None = None,
                    scores: RunSchema | None = None) -> ExperimentInputs:
    """Read every loss file, item-score file, curve file, run.json and bench*.json given or found under the given
    directories, and the score tables of `scores` (a score table's schema, for its metric).

    A file under a directory that looks like a loss file but cannot be read is an error; when a `skipped` list
    is given it is appended there instead, and listed in the result's `skipped`."""
    schemas = {"item-score file": ITEMS, **({} if scores is None else {"score table": scores})}
    belongs = {**_NAMED, **{kind: schema.belongs for kind, schema in schemas.items()}}  # by name first
    # The inputs by kind ("loss file": files and directories, for the loss-file reader, which reads each file once).
    found: dict[str, list[Path]] = {kind: [] for kind in ("loss file", *belongs)}
    for given in map(Path, inputs):
        if given.is_dir():
            found["loss file"].append(given)
            under = paths_under(given)
            for kind, named in belongs.items():
                found[kind] += [path for path in under if recognised(named, path)]
        elif not given.exists():
            raise InputError(f"{given}: no such file or directory")
        elif of_kind := next((kind for kind, named in belongs.items() if named(given)), None):
            found[of_kind].append(given)
        elif given.suffix in RUN_FILE_SUFFIXES:
            found["loss file"].append(given)
        else:
            raise InputError(f"{given}: not a loss file (.parquet / .csv), {CURVE_FILE_NAME}, {RUN_FILE_NAME} "
                             f"or {BENCH_GLOB}")
    found = {kind: paths if kind == "loss file" else each_once(paths) for kind, paths in found.items()}
    metric_runs = tuple(run for kind, schema in schemas.items() for path in found[kind]
                        for run in file_runs(path, schema))
    # with item scores or score tables, a directory may hold no loss file
    runs = read_runs(found["loss file"], (LOSS,), skipped=skipped, require=not metric_runs)
    if not runs and not metric_runs:
        raise InputError("no loss files among the inputs: a report needs at least one evaluated run")
    files = {run.source.split("[", 1)[0]: InputFile(run.source.split("[", 1)[0], "loss file", run.sha256)
             for run in runs}
    files.update({str(path): InputFile(str(path), kind, file_sha256(path))
                  for kind, paths in found.items() if kind != "loss file" for path in paths})
    return ExperimentInputs(
        runs=tuple(runs),
        curves=read_curve_inputs(found["curve file"]) if found["curve file"] else pd.DataFrame(columns=CURVE_COLUMNS),
        run_infos=tuple(read_run_file(path) for path in found["run file"]),
        bench=tuple(read_bench_result(path) for path in found["bench results"]),
        files=tuple(files.values()),
        skipped=tuple(dict.fromkeys(skipped or ())),  # a directory named twice lists its files once
        metric_runs=metric_runs,
    )
