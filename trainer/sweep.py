"""Grids of paired runs from a TOML experiment file, and learning-rate selection over a grid (docs/method.md §5).

An experiment names a data directory, a size, variants, seeds and learning rates (one list for every
variant, or a table of lists per variant). Each (variant, lr, seed) trains into
`OUT/<variant>/lr<lr>/seed<seed>/` and is evaluated on the experiment's sets; finished runs are skipped,
interrupted ones resumed, diverged ones recorded and left alone; a run that fails for a reason outside the inputs
(out of memory) does not stop the others, and the sweep ends by naming it. Paths in the file are relative to it.

    name = "small-confirmation"
    data = "../data/fineweb-edu-small"
    config = "small"
    variants = ["baseline", "gatedv"]
    seeds = [1, 2, 3, 4, 5]
    lrs = [0.0048]                       # or: [lrs] baseline = [0.0048]  gatedv = [0.0024]
    eval_sets = ["dev", "heldout"]       # optional; these are the defaults
    out = "runs/small-confirmation"
    # optional: updates, warmup, eval_every, batch_size (default: the size's recipe)

    [select]                             # optional, for `gatedv select-lr`
    seed = 20270201                      # the selection seed (default: the smallest seed of the grid)
    confirm_seeds = [20270211, 20270212, 20270213]
    confirm_out = "runs/medium-confirmation"

Variants of your own are tables instead of the `variants` list (TOML cannot hold both): every
`[variants.NAME]` table is a variant of the grid, in file order; an empty table is the preset NAME, a
table of knobs (`gatedv params --knobs`) a new variant, the baseline of the size plus those knobs.

    [variants.baseline]
    [variants.k-silu]
    key_act = "silu"
"""

from __future__ import annotations

import json
import math
import os
import tomllib
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import pandas as pd
import torch
from tqdm import tqdm

from gatedv_stats.errors import InputError, ParameterError, RunFailure
from gatedv_stats.io.atomic import write_text_atomic
from gatedv_stats.io.runrecords import read_run_record, run_record_path
from gatedv_stats.stats.lr_selection import LRSelection, select_lr
from gatedv_stats.stats.validation import check_rng_seed
from trainer import launch
from trainer.data import EVAL_SET_NAMES, PreparedData
from trainer.grid_run import (GridRun, RunOutcome, divergence_warning, final_dev_nll, grid_columns, lr_directory_name,
                              run_directory, run_one)
from trainer.knobs import resolve_variant
from trainer.model import model_config
from trainer.params import variant_parameters
from trainer.train import Runtime, RunSpec, spec_differences

_KEYS = {"name", "data", "config", "variants", "seeds", "lrs", "eval_sets", "out", "updates", "warmup",
         "eval_every", "batch_size", "select"}
_SELECT_KEYS = {"seed", "confirm_seeds", "confirm_out"}
_KIND_NAMES = {int: "an integer", float: "a number", str: "a string"}
LOST_WORKER = ("lost with the worker processes: one of them ended abruptly (killed, e.g. by the out-of-memory "
               "killer, or crashed)")


@dataclass(frozen=True)
class Experiment:
    """A grid of variants × learning rates × seeds (see the module docstring for the file format)."""

    name: str
    data: Path
    size: str
    variants: tuple[str, ...]
    seeds: tuple[int, ...]
    lrs: dict  # variant -> tuple of peak learning rates
    out: Path
    eval_sets: tuple[str, ...] = ("dev", "heldout")
    updates: int | None = None
    warmup: int | None = None
    eval_every: int | None = None
    batch_size: int | None = None
    selection_seed: int | None = None
    confirm_seeds: tuple[int, ...] = ()
    confirm_out: Path | None = None
    knobs: dict = field(default_factory=dict)  # new variant -> its knobs ([variants.NAME] tables)
    source: Path | None = None  # the TOML file it was read from, named by errors about its fields

    def runs(self) -> list[GridRun]:
        """Every run of the grid, variant-major, then learning rate, then seed."""
        return [GridRun(variant, lr, seed, run_directory(self.out, variant, lr, seed), self.spec(variant, lr, seed),
                        self.eval_sets)
                for variant in self.variants for lr in self.lrs[variant] for seed in self.seeds]

    def spec(self, variant: str, lr: float, seed: int) -> RunSpec:
        optional = {key: getattr(self, key) for key in ("updates", "warmup", "eval_every", "batch_size")
                    if getattr(self, key) is not None}
        return RunSpec.make(self.data, self.size, variant, seed, lr=lr, knobs=self.knobs.get(variant), **optional)

    def describe_variants(self) -> dict[str, dict]:
        """Per variant, its trainable parameters and the knobs that differ from the size's baseline."""
        described = {variant: variant_parameters(self.size, variant, self.knobs.get(variant))
                     for variant in self.variants}
        return {variant: {"parameters": count, "knobs": knobs} for variant, (count, knobs) in described.items()}

    def check_data(self) -> None:
        """The data directory is a prepared one (before any run starts); else an InputError naming the `data`
        field of the experiment file."""
        try:
            PreparedData.open(self.data)
        except InputError as error:
            raise InputError(f"{self.source or self.name}: data: {error}") from None


@dataclass(frozen=True)
class SweepResult:
    experiment: str
    outcomes: tuple[RunOutcome, ...] = field(default_factory=tuple)
    variants: dict = field(default_factory=dict)  # variant -> {"parameters", "knobs"} (Experiment.describe_variants)
    warnings: tuple[str, ...] = ()  # one per diverged run (grid_run.divergence_warning)

    def to_dict(self) -> dict:
        return {"experiment": self.experiment, "variants": self.variants,
                "runs": [outcome.to_dict() for outcome in self.outcomes], "warnings": list(self.warnings)}

    def summary(self) -> str:
        lines = [f"{self.experiment}: {len(self.outcomes)} runs"]
        for variant, described in self.variants.items():
            knobs = ", ".join(f"{name}={value}" for name, value in described["knobs"].items())
            lines.append(f"  {variant}: {described['parameters']:,} parameters" + (f" ({knobs})" if knobs else ""))
        header, cells = grid_columns(o.seed for o in self.outcomes)
        lines.append(f"{header}  {'action':<10}{'dev NLL':>10}  run directory")
        lines += [f"{cells(o.variant, o.lr, o.seed)}  {o.action:<10}"
                  f"{('diverged' if o.status == 'diverged' else f'{o.dev_nll:.6f}'):>10}  {o.run_dir}"
                  for o in self.outcomes]
        return "\n".join(lines)


# --- reading and writing experiment files ---------------------------------------------------------------


def load_experiment(path: str | Path) -> Experiment:
    """Read and check an experiment TOML file."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such experiment file")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        hint = "; [variants.NAME] tables replace the variants list" if "'variants'" in str(error) else ""
        raise InputError(f"{path}: invalid TOML ({error}){hint}") from None
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise InputError(f"{path}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(_KEYS))})")
    for key in ("data", "config", "variants", "seeds", "lrs", "out"):
        if key not in raw:
            raise InputError(f"{path}: missing key {key!r}")
    base = path.parent
    variants, knobs = _variants(raw["variants"], _typed(raw, "config", str, path), path)
    seeds = _rng_seeds(_list_of(raw, "seeds", int, path), "seeds", path)
    lrs = _learning_rates(raw["lrs"], variants, path)
    _check_rate_directories(lrs, isinstance(raw["lrs"], list), path)
    select = raw.get("select", {})
    if not isinstance(select, dict) or set(select) - _SELECT_KEYS:
        raise InputError(f"{path}: [select] may hold only {', '.join(sorted(_SELECT_KEYS))}")
    experiment = Experiment(
        name=_typed(raw, "name", str, path) if "name" in raw else path.stem,
        data=base / _typed(raw, "data", str, path),
        size=_typed(raw, "config", str, path),
        variants=variants,
        seeds=seeds,
        lrs=lrs,
        out=base / _typed(raw, "out", str, path),
        eval_sets=_eval_sets(raw, path) if "eval_sets" in raw else EVAL_SET_NAMES,
        **{key: _typed(raw, key, int, path) for key in ("updates", "warmup", "eval_every", "batch_size") if key in raw},
        selection_seed=(_rng_seeds([_typed(select, "seed", int, path, "select.")], "select.seed", path)[0]
                        if "seed" in select else None),
        confirm_seeds=(_rng_seeds(_list_of(select, "confirm_seeds", int, path, "select."), "select.confirm_seeds", path)
                       if "confirm_seeds" in select else ()),
        confirm_out=base / _typed(select, "confirm_out", str, path, "select.") if "confirm_out" in select else None,
        knobs=knobs,
        source=path,
    )
    for variant in variants:  # every spec checks size, variant, lr and lengths before anything trains
        for lr in lrs[variant]:
            try:
                experiment.spec(variant, lr, seeds[0])
            except ParameterError as error:  # named by the spec's field: the TOML key of the learning rate differs
                key = error.parameter
                if key == "lr":
                    key = "lrs" if isinstance(raw["lrs"], list) else f"lrs.{variant}"
                raise InputError(f"{path}: {key}: {error.detail}") from None
            except InputError as error:
                raise InputError(f"{path}: {error}") from None
    return experiment


def _typed(table: dict, key: str, kind: type, path: Path, prefix: str = ""):
    value = table[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InputError(f"{path}: {prefix}{key} must be {_KIND_NAMES[kind]}, got {value!r}")
    return value


def _rng_seeds(seeds: list[int], key: str, path: Path) -> tuple[int, ...]:
    """`seeds` checked as RNG seeds (0..2**63 - 1); a bad one is an InputError naming the file and `key`."""
    try:
        return tuple(check_rng_seed(seed, key) for seed in seeds)
    except ParameterError as error:
        raise InputError(f"{path}: {error}") from None


def _eval_sets(raw: dict, path: Path) -> tuple[str, ...]:
    """The evaluation sets of every run: names of the data directory's sets, `dev` among them."""
    eval_sets = tuple(_list_of(raw, "eval_sets", str, path))
    unknown = [name for name in eval_sets if name not in EVAL_SET_NAMES]
    if unknown:
        raise InputError(f"{path}: eval_sets: unknown evaluation set(s) {', '.join(map(repr, unknown))} "
                         f"(choose from {', '.join(EVAL_SET_NAMES)})")
    if "dev" not in eval_sets:
        raise InputError(f"{path}: eval_sets must include 'dev' (learning-rate selection reads it)")
    return eval_sets


def _list_of(table: dict, key: str, kind: type, path: Path, prefix: str = "") -> list:
    values = table[key]
    if not isinstance(values, list) or not values:
        raise InputError(f"{path}: {prefix}{key} must be a non-empty list")
    checked = [_typed({key: value}, key, kind, path, prefix) for value in values]
    if len(set(checked)) != len(checked):
        raise InputError(f"{path}: {prefix}{key} lists a value twice")
    return checked


def _variants(raw: object, size: str, path: Path) -> tuple[tuple[str, ...], dict]:
    """The variant names in order and the knobs of the new ones, checked at `size`, from a list of preset
    names or from [variants.NAME] tables of knobs."""
    try:
        model_config(size)
    except InputError as error:
        raise InputError(f"{path}: {error}") from None
    if isinstance(raw, list):
        tables = {name: {} for name in _list_of({"variants": raw}, "variants", str, path)}
    elif isinstance(raw, dict) and raw and all(isinstance(table, dict) for table in raw.values()):
        tables = raw
    else:
        raise InputError(f"{path}: variants must be a non-empty list of preset names or [variants.NAME] tables")
    knobs = {}
    for name, table in tables.items():
        try:
            knobs[name] = resolve_variant(size, name, table)[1]
        except ParameterError as error:
            where = f"[variants.{name}] variant" if raw is tables else "variants"
            raise InputError(f"{path}: {where}: {error.detail}") from None
        except InputError as error:
            raise InputError(f"{path}: {f'[variants.{name}] ' if raw is tables else ''}{error}") from None
    return tuple(tables), {name: checked for name, checked in knobs.items() if checked}


def _check_rate_directories(lrs: dict[str, tuple[float, ...]], shared_list: bool, path: Path) -> None:
    """No two rates of one variant train into one directory (`shared_list`: the rates are one `lrs` list)."""
    for variant, rates in lrs.items():
        directories: dict[str, float] = {}
        for lr in rates:
            other = directories.setdefault(lr_directory_name(lr), lr)
            if other != lr:
                key = "lrs" if shared_list else f"lrs.{variant}"
                raise InputError(f"{path}: {key}: {other!r} and {lr!r} share the run directory name "
                                 f"{lr_directory_name(lr)} (rates are named to six significant digits); give rates "
                                 "that differ there")


def _learning_rates(raw: object, variants: tuple[str, ...], path: Path) -> dict:
    if isinstance(raw, list):
        rates = tuple(_list_of({"lrs": raw}, "lrs", float, path))
        return {variant: rates for variant in variants}
    if not isinstance(raw, dict):
        raise InputError(f"{path}: lrs must be a list or a table of lists per variant")
    missing = [variant for variant in variants if variant not in raw]
    extra = sorted(set(raw) - set(variants))
    if missing or extra:
        raise InputError(f"{path}: lrs must name exactly the variants (missing {missing}, not a variant {extra})")
    return {variant: tuple(_list_of(raw, variant, float, path, "lrs.")) for variant in variants}


def experiment_toml(experiment: Experiment, relative_to: Path) -> str:
    """The experiment as TOML text, with paths relative to the directory the file will live in."""
    def path(value: Path) -> str:
        return json.dumps(os.path.relpath(Path(value).resolve(), Path(relative_to).resolve()))

    def array(values) -> str:
        return "[" + ", ".join(json.dumps(value) for value in values) + "]"

    lines = [f"name = {json.dumps(experiment.name)}", f"data = {path(experiment.data)}",
             f"config = {json.dumps(experiment.size)}",
             *([] if experiment.knobs else [f"variants = {array(experiment.variants)}"]),
             f"seeds = {array(experiment.seeds)}", f"eval_sets = {array(experiment.eval_sets)}",
             f"out = {path(experiment.out)}"]
    lines += [f"{key} = {getattr(experiment, key)}" for key in ("updates", "warmup", "eval_every", "batch_size")
              if getattr(experiment, key) is not None]
    lines += ["", "[lrs]"] + [f"{json.dumps(variant)} = {array(experiment.lrs[variant])}"
                              for variant in experiment.variants]
    if experiment.knobs:  # new variants: every variant as a table, in order
        for variant in experiment.variants:
            knobs = experiment.knobs.get(variant, {})
            lines += ["", f"[variants.{json.dumps(variant)}]"] + [f"{name} = {json.dumps(value)}"
                                                                  for name, value in knobs.items()]
    return "\n".join(lines) + "\n"


# --- running a grid -------------------------------------------------------------------------------------


def run_experiment(experiment: Experiment, *, jobs: int | None = None, gpus_per_run: int = 1,
                   runtime: Runtime = Runtime()) -> SweepResult:
    """Train and evaluate every run of the grid that is not finished, `jobs` runs at a time (default: one per
    visible GPU, else 1), each worker process on its own `gpus_per_run` GPUs (see trainer.launch)."""
    launch.check_gpus_per_run(gpus_per_run)
    experiment.check_data()
    gpus = launch.visible_gpus(os.environ, torch.cuda.device_count()) if launch.uses_gpus(runtime.device) else []
    jobs = launch.default_jobs(gpus, gpus_per_run) if jobs is None else jobs
    environments = launch.gpu_assignment(gpus, jobs, gpus_per_run)
    runs = experiment.runs()
    bar = tqdm(total=len(runs), desc=experiment.name, unit="run", disable=not runtime.progress)
    if jobs == 1:
        with bar:
            outcomes, failed = _finish_each(
                runs, [partial(_run_in_worker, run, runtime, gpus_per_run, environments[0]) for run in runs], bar)
    else:  # one process per run slot; the CPU threads shared out between them, no inner progress bars
        threads = launch.threads_per_worker(os.cpu_count() or 1, jobs)
        quiet = replace(runtime, progress=False)
        with launch.worker_pool(environments, threads) as pool, bar:  # interrupted: the workers stop at once
            futures = [pool.submit(_run_in_worker, run, quiet, gpus_per_run) for run in runs]
            outcomes, failed = _finish_each(runs, [future.result for future in futures], bar)
    if failed:
        raise RunFailure(f"sweep {experiment.name}: {len(failed)} of {len(runs)} runs did not finish (first "
                         f"{failed[0]}); the finished ones are kept: run the same command again to go on from the "
                         "others' checkpoints")
    warnings = tuple(divergence_warning(outcome.run_dir) for outcome in outcomes if outcome.status == "diverged")
    return SweepResult(experiment.name, tuple(outcomes), experiment.describe_variants(), warnings)


def _finish_each(runs: list[GridRun], results: list[Callable[[], RunOutcome]],
                 bar: tqdm) -> tuple[list[RunOutcome], list[str]]:
    """The outcomes of the runs that finished, and why each other one did not ("RUN_DIR: reason"). A run that
    fails for a reason outside the inputs (out of memory, a launcher) does not stop the others; a worker
    process lost breaks the pool, and every run not finished by then goes with it."""
    outcomes: list[RunOutcome] = []
    failed: list[str] = []
    for run, result in zip(runs, results):
        try:
            outcomes.append(result())
        except RunFailure as error:
            failed.append(str(error))
        except BrokenProcessPool:
            failed.append(f"{run.run_dir}: {LOST_WORKER}")
        else:
            bar.update()
    return outcomes, failed


def _run_in_worker(run: GridRun, runtime: Runtime, gpus_per_run: int, environment: dict | None = None) -> RunOutcome:
    """One run here, or over `gpus_per_run` torchrun processes (on the GPUs `environment` names, if given)."""
    if gpus_per_run > 1:
        return launch.run_distributed(run, runtime, gpus_per_run, environment)
    return run_one(run, runtime)


# --- learning-rate selection ----------------------------------------------------------------------------


def development_table(experiment: Experiment, seed: int) -> pd.DataFrame:
    """Final development NLL of every (variant, lr) on `seed`; a diverged run counts as +inf."""
    rows = []
    for run in experiment.runs():
        if run.seed != seed:
            continue
        record = read_run_record(run.run_dir)
        status = record.get("status") if record else None
        if status not in ("finished", "diverged"):
            raise InputError(f"{run.run_dir}: run is {status or 'not started'}; finish the grid with `gatedv sweep` first")
        differing = spec_differences(record, run.spec)
        if differing:
            raise InputError(f"{run_record_path(run.run_dir)}: records a different run than the experiment asks for "
                             f"here ({', '.join(differing)})")
        dev_nll = final_dev_nll(run.run_dir, run) if status == "finished" else math.inf
        rows.append({"arm": run.variant, "lr": run.lr, "seed": seed, "dev_nll": dev_nll})
    return pd.DataFrame(rows)


def select_learning_rates(experiment: Experiment, seed: int | None = None) -> LRSelection:
    """Per variant, the grid rate with the lowest final development NLL on the selection seed (docs/method.md §5);
    a variant whose every rate diverged on that seed is an InputError."""
    if seed is None:
        seed = experiment.selection_seed if experiment.selection_seed is not None else min(experiment.seeds)
    if seed not in experiment.seeds:
        raise InputError(f"--seed: {seed} is not a seed of the grid ({', '.join(map(str, experiment.seeds))})")
    table = development_table(experiment, seed)
    diverged = [arm for arm, group in table.groupby("arm", sort=False) if group["dev_nll"].eq(math.inf).all()]
    if diverged:
        raise InputError(f"select-lr: every learning rate of {', '.join(diverged)} diverged on selection seed {seed}; "
                         "no rate to select (add lower rates to the grid)")
    return select_lr(table, selection_seed=seed)


def confirmation_experiment(experiment: Experiment, selection: LRSelection, *, seeds: tuple[int, ...] = (),
                            out: Path | None = None) -> Experiment:
    """The confirmation grid: every variant at its selected rate, on the confirmation seeds."""
    seeds = tuple(check_rng_seed(seed, "seeds") for seed in seeds) or experiment.confirm_seeds
    if len(set(seeds)) != len(seeds):  # refused here, as the grid loader would refuse the file written
        raise ParameterError("seeds", "lists a value twice")
    if not seeds:
        raise InputError("select-lr: no confirmation seeds (give --seeds or [select] confirm_seeds)")
    out = out or experiment.confirm_out or experiment.out.with_name(experiment.out.name + "-confirm")
    return replace(experiment, name=f"{experiment.name}-confirm", seeds=seeds, out=out,
                   lrs={variant: (selection.selected[variant],) for variant in experiment.variants},
                   selection_seed=None, confirm_seeds=(), confirm_out=None, source=None)


def write_experiment(path: str | Path, experiment: Experiment) -> None:
    write_text_atomic(path, experiment_toml(experiment, Path(path).parent))
