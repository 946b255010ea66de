"""Learning-rate selection over a finished grid (docs/method-statistics.md §5, `gatedv select-lr`): per variant the rate
with the lowest final development NLL on the selection seed, and the confirmation grid at the selected rates."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pandas as pd

from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.core.outputs import check_not_an_input, check_output_file
from gatedv_stats.core.validation import check_seed
from gatedv_stats.io.runrecords import read_run_record, run_record_path
from trainer.grid.experiment import Experiment
from trainer.grid.grid_run import final_dev_nll
from trainer.run.recipe import spec_differences


def development_table(experiment: Experiment, selection_seed: int) -> pd.DataFrame:
    """Final development NLL of every (variant, lr) on `selection_seed`; a diverged run counts as +inf."""
    rows = []
    for run in experiment.runs():
        if run.seed != selection_seed:
            continue
        record = read_run_record(run.run_dir) or {}
        status = record.get("status")
        if status not in ("finished", "diverged"):
            raise InputError(f"{run.run_dir}: run is {status or 'not started'}; finish the grid with `gatedv sweep` "
                             "first")
        differing = spec_differences(record, run.spec)
        if differing:
            raise InputError(f"{run_record_path(run.run_dir)}: records a different run than the experiment asks for "
                             f"here ({', '.join(differing)})")
        dev_nll = final_dev_nll(run.run_dir, run) if status == "finished" else math.inf
        rows.append({"arm": run.variant, "lr": run.lr, "seed": selection_seed, "dev_nll": dev_nll})
    return pd.DataFrame(rows)


def selection_table(experiment: Experiment, selection_seed: int | None = None) -> tuple[pd.DataFrame, int]:
    """The final development NLL of every (variant, rate) on the selection seed (None: the experiment's, else its
    smallest seed), from which `gatedv_stats.stats.lr_selection.select_lr` picks each variant's rate
    (docs/method-statistics.md §5), and that seed; a variant whose every rate diverged on it is an InputError."""
    if selection_seed is None:
        selection_seed = (experiment.selection_seed if experiment.selection_seed is not None
                          else min(experiment.seeds))
    if selection_seed not in experiment.seeds:
        raise InputError(f"--seed: {selection_seed} is not a seed of the grid "
                         f"({', '.join(map(str, experiment.seeds))})")
    table = development_table(experiment, selection_seed)
    diverged = [arm for arm, group in table.groupby("arm", sort=False) if group["dev_nll"].eq(math.inf).all()]
    if diverged:
        raise InputError(f"select-lr: every learning rate of {', '.join(diverged)} diverged on selection seed "
                         f"{selection_seed}; no rate to select (add lower rates to the grid)")
    return table, selection_seed


def confirmation_experiment(experiment: Experiment, selected: Mapping[str, float], *, seeds: tuple[int, ...] = (),
                            out: Path | None = None) -> Experiment:
    """The confirmation grid: every variant at its `selected` rate, on the confirmation seeds."""
    seeds = tuple(check_seed(seed, "seeds") for seed in seeds) or experiment.confirm_seeds
    if len(set(seeds)) != len(seeds):  # refused here, as the grid loader would refuse the file written
        raise ParameterError("seeds", "lists a value twice")
    if not seeds:
        raise InputError("select-lr: no confirmation seeds (give --seeds or [select] confirm_seeds)")
    out = out or experiment.confirm_out or experiment.out.with_name(experiment.out.name + "-confirm")
    return replace(experiment, name=f"{experiment.name}-confirm", seeds=seeds, out=out,
                   lrs={variant: (selected[variant],) for variant in experiment.variants},
                   selection_seed=None, confirm_seeds=(), confirm_out=None, source=None)


def confirmation_grid_path(experiment: str | Path, out: str | Path | None = None) -> Path:
    """Where the confirmation grid of the experiment file `experiment` is written: `out`, by default
    EXPERIMENT-confirm.toml beside it; checked before any work (a file that can be written, not the experiment)."""
    path = Path(experiment).with_name(Path(experiment).stem + "-confirm.toml") if out is None else out
    check_output_file(path, "--out")  # an empty --out is refused, not read as the default
    check_not_an_input(path, [experiment], "--out")
    return Path(path)


def parse_seeds(text: str | None) -> tuple[int, ...]:
    """Confirmation seeds written as comma-separated integers (empty or None: none given)."""
    try:
        return tuple(int(part) for part in text.split(",")) if text else ()
    except ValueError:
        raise ParameterError("seeds", f"expected comma-separated integers, got {text!r}") from None
