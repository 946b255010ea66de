"""The main job, end to end on the embedded default corpus: prepare the running Python's standard library,
train the `tiny` baseline and GatedV with paired seeds, evaluate per-document losses on the development and
held-out sets, run the paired document bootstrap, and write the report (HTML and Markdown); the wall time of
each stage is part of the result."""

from __future__ import annotations

import contextlib
import math
import os
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from gatedv_stats.analysis.comparison import Comparison
from gatedv_stats.analysis.experiment import AnalysisSettings, ExperimentAnalysis, analyze_experiment
from gatedv_stats.core.errors import InputError
from gatedv_stats.io.discovery import discover_inputs
from gatedv_stats.io.runrecords import read_run_record
from gatedv_stats.reporting import render_report
from gatedv_stats.reporting.build import build_report
from trainer.data.prepare import prepare
from trainer.data.prepared import EVAL_SET_NAMES, MANIFEST, PreparedData
from trainer.data.split import PrepareWarning
from trainer.grid.experiment import Experiment
from trainer.grid.sweep import run_experiment
from trainer.run.device import select_device
from trainer.run.recipe import RECIPES, Runtime

CORPUS = "builtin:python-stdlib"
SIZE = "tiny"
ARMS = ("baseline", "gatedv")
UPDATES = RECIPES[SIZE].updates
SEEDS = 3
MAX_SEEDS = 100  # two tiny runs per seed
CURVE_POINTS = 8
REPORT_FORMATS = {"html": "report.html", "md": "report.md"}


@dataclass(frozen=True)
class DemoResult:
    out: str
    corpus: str
    updates: int
    seeds: tuple[int, ...]
    eval_docs: dict  # set name -> documents
    comparisons: dict  # set name -> Comparison
    reports: tuple[str, ...]
    wall_seconds: float
    tokens_per_second: float  # training throughput of one run, mean over runs
    stage_seconds: dict  # prepare, training, evaluation, analysis, report -> wall seconds

    def to_dict(self) -> dict:
        return {**{key: value for key, value in self.__dict__.items() if key != "comparisons"},
                "comparisons": {name: comparison.to_dict() for name, comparison in self.comparisons.items()}}

    def summary(self) -> str:
        sets = ", ".join(f"{name} {count}" for name, count in self.eval_docs.items())
        lines = [
            f"gatedv demo: {SIZE} {ARMS[0]} vs {ARMS[1]}, {len(self.seeds)} paired seeds "
            f"({', '.join(map(str, self.seeds))}), {self.updates} updates each, corpus {self.corpus}",
            f"evaluation documents: {sets}. The evaluation sets on this corpus are small (one document per domain "
            "group of the standard library), so intervals are wide and a short run says little about the paper's "
            "claim; the demo shows the workflow.",
        ]
        for name, comparison in self.comparisons.items():
            lines += ["", f"== {name} set ==", comparison.summary()]
        stages = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.stage_seconds.items())
        lines += ["", *(f"report: {path}" for path in self.reports),
                  f"wall time {self.wall_seconds:.0f} s ({stages}); training {self.tokens_per_second:,.0f} tokens/s "
                  "per run"]
        return "\n".join(lines)


def demo_experiment(out: Path, *, updates: int, seeds: int) -> Experiment:
    """The demo's grid: tiny baseline and GatedV at one learning rate, seeds 1..`seeds`."""
    if updates < 1:
        raise InputError(f"--updates: must be at least 1, got {updates}")
    if seeds < 2:
        raise InputError(f"--seeds: a paired comparison needs at least 2 seeds, got {seeds}")
    if seeds > MAX_SEEDS:
        raise InputError(f"--seeds: the demo runs at most {MAX_SEEDS} seeds, got {seeds}")
    return Experiment(name="demo", data=out / "data", size=SIZE, variants=ARMS, seeds=tuple(range(1, seeds + 1)),
                      lrs={arm: (RECIPES[SIZE].lr,) for arm in ARMS}, out=out / "runs", eval_sets=EVAL_SET_NAMES,
                      updates=updates, eval_every=max(1, updates // CURVE_POINTS))


def run_demo(out: str | Path = "gatedv-demo", *, updates: int | None = None, seeds: int = SEEDS, device: str = "auto",
             jobs: int | None = None, corpus: str = CORPUS, progress: bool = True) -> DemoResult:
    """Run the demo into `out` (data, runs, report); `out/data` is prepared from `corpus` unless it already
    holds a prepared data directory, and finished runs are reused.

    On a CPU the runs go two at a time in separate processes (one thread each), which suits small models.
    Every run is trained first, then the loss files are written, so that each stage has its own wall time.
    """
    began = time.perf_counter()
    out = Path(out)
    updates = UPDATES if updates is None else updates
    experiment = demo_experiment(out, updates=updates, seeds=seeds)
    if jobs is None:
        jobs = 2 if select_device(device).type == "cpu" and (os.cpu_count() or 1) >= 2 else 1
    elif jobs < 1:
        raise InputError(f"--jobs: must be at least 1, got {jobs}")
    runtime = Runtime(device=device, progress=progress)
    stages: dict[str, float] = {}
    with _stage(stages, "prepare"):
        manifest = _prepared_manifest(experiment.data, corpus, progress)
    with _stage(stages, "training"):  # with each run's development curve
        run_experiment(replace(experiment, eval_sets=()), jobs=jobs, runtime=runtime)
    with _stage(stages, "evaluation"):  # the dev and held-out loss files of every run
        run_experiment(experiment, jobs=jobs, runtime=runtime)
    with _stage(stages, "analysis"):
        # the grid's own runs only: OUT may also hold the runs of an earlier demo with more seeds
        analysis = analyze_experiment(discover_inputs([Path(run.run_dir) for run in experiment.runs()]),
                                      AnalysisSettings(reference=ARMS[0]))
        comparisons = {name: _demo_comparison(analysis, name) for name in EVAL_SET_NAMES}
    with _stage(stages, "report"):
        report = build_report(analysis)
        reports = tuple(str(render_report(report, out / file, fmt)) for fmt, file in REPORT_FORMATS.items())
    rates = [(read_run_record(run.run_dir) or {}).get("tokens_per_second", math.nan) for run in experiment.runs()]
    return DemoResult(out=str(out), corpus=manifest["corpus"]["spec"], updates=updates,
                      seeds=experiment.seeds,
                      eval_docs={name: manifest["eval_sets"][name]["documents"] for name in EVAL_SET_NAMES},
                      comparisons=comparisons, reports=reports, wall_seconds=time.perf_counter() - began,
                      tokens_per_second=sum(rates) / len(rates), stage_seconds=stages)


@contextlib.contextmanager
def _stage(seconds: dict[str, float], name: str) -> Iterator[None]:
    """Record the wall seconds of the block under `name`."""
    began = time.perf_counter()
    yield
    seconds[name] = time.perf_counter() - began


def _prepared_manifest(data: Path, corpus: str, progress: bool) -> dict:
    """The manifest of `data`, prepared from `corpus` first unless a data directory is already there (used as
    it is)."""
    if (data / MANIFEST).is_file():
        return PreparedData.open(data).manifest
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrepareWarning)  # small evaluation sets: said in the summary instead
        return prepare(corpus, data, progress=progress).manifest


def _demo_comparison(analysis: ExperimentAnalysis, eval_set: str) -> Comparison:
    """GatedV against the baseline on one evaluation set, from the analysis the report shows."""
    for group in analysis.groups:
        if group.group.eval_set == eval_set and group.pairs:
            return group.pairs[0].analysis.comparison
        if group.group.eval_set == eval_set and group.left_out:
            raise InputError(f"demo: {eval_set}: {group.left_out[0][1]}")
    raise InputError(f"demo: no paired {ARMS[1]} and {ARMS[0]} runs on the {eval_set} set")
