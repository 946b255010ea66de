"""The commands over a grid of runs from an experiment file: `sweep` (here or as cluster jobs) and `select-lr`."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import typer

from gatedv_stats.core.errors import InputError, RunFailure

if TYPE_CHECKING:  # the trainer (torch, submitit) is imported by the commands that train, not by `gatedv --help`
    from gatedv_cli.until_decided import SequentialSettings
    from trainer.grid.cluster import ClusterOptions, ExperimentStatus
    from trainer.grid.experiment import Experiment
    from trainer.grid.sweep import SweepResult
    from trainer.run.recipe import Runtime

from gatedv_cli.options import (
    BF16,
    CHECKPOINT_ACTIVATIONS,
    DESIGN_ALPHA,
    DESIGN_POWER,
    DESIGN_SESOI,
    DEVICE,
    GRAD_ACCUM,
    JSON,
    LEDGER,
    MAX_SEEDS,
    NOISE_FLOOR,
    PROCEDURE,
    SIZE_KNOBS,
    SPENDING,
    TF32,
    emit,
    runtime,
    warn,
)


def sweep_command(
    experiment: str = typer.Argument(..., help="An experiment TOML file (see examples/)."),
    jobs: int = typer.Option(None, "--jobs", help="Runs at a time on this machine, each in its own process on its "
                             "own GPU(s) (default: one per visible GPU, else 1).", show_default=False),
    gpus_per_run: int = typer.Option(1, "--gpus-per-run", help="GPUs per run; K > 1 trains each run data parallel "
                                     "in K processes (torchrun here, K tasks of one job on a cluster; gloo on a CPU); "
                                     "0 with --executor slurm or local: CPU jobs, no GPU asked for."),
    executor: str = typer.Option("pool", "--executor", help="pool (processes on this machine), slurm (one job per "
                                 "unfinished run, as a job array) or local (the same jobs as local subprocesses)."),
    partition: str = typer.Option(None, "--partition", help="Slurm partition.", show_default=False),
    time_limit: str = typer.Option("24:00:00", "--time", help="Time limit of each job, as Slurm writes it "
                                   "(90, 12:00:00, 2-00:00:00); a longer run is requeued from its last checkpoint."),
    array_parallelism: int = typer.Option(None, "--array-parallelism", help="Slurm jobs of the array running at "
                                          "once (default: all).", show_default=False),
    slurm_options: list[str] = typer.Option(None, "--slurm-option", metavar="KEY=VALUE", help="Extra sbatch "
                                            "option, repeatable (e.g. account=ml, cpus-per-task=8, exclusive).",
                                            show_default=False),
    status: bool = typer.Option(False, "--status", help="Only show each run's state: not started, pending, "
                                "running, interrupted, failed (with its log), unknown, finished or diverged (with "
                                "--until-decided: each variant's sequential state)."),
    until_decided: bool = typer.Option(False, "--until-decided", help="Train seed pairs in rounds, one look per "
                                       "variant after each (group-sequential, design files in GRID-design/), and "
                                       "stop each variant once decided."),
    max_seeds: int = MAX_SEEDS,
    sesoi: float = DESIGN_SESOI,
    noise_floor: str = NOISE_FLOOR,
    alpha: float = DESIGN_ALPHA,
    power: float = DESIGN_POWER,
    spending: str = SPENDING,
    eval_set: str = typer.Option(None, "--eval-set", show_default=False, help="With --until-decided: the set the "
                                 "looks compare on (default: heldout)."),
    baseline_arm: str = typer.Option("baseline", "--baseline-arm", help="With --until-decided: the variant every "
                                     "other is compared with."),
    ledger: str = LEDGER,
    procedure: str = PROCEDURE,
    device: str = DEVICE,
    tf32: bool = TF32,
    bf16: bool = BF16,
    compile_model: bool = typer.Option(False, "--compile", help="torch.compile the models for training."),
    grad_accum: int = GRAD_ACCUM,
    checkpoint_activations: bool = CHECKPOINT_ACTIVATIONS,
    size_knobs: list[str] = SIZE_KNOBS,
    as_json: bool = JSON,
) -> None:
    """Train and evaluate a grid of variants x learning rates x seeds, here or as cluster jobs; finished runs are
    skipped, interrupted ones resumed from their checkpoint."""
    from gatedv_cli.until_decided import SequentialSettings, sweep_until_decided, until_decided_status
    from gatedv_stats.core.outputs import check_output_dir
    from trainer.grid.cluster import ClusterOptions, experiment_status, submit_experiment
    from trainer.grid.experiment import load_experiment
    from trainer.grid.sweep import check_executor_options
    from trainer.model.sizes import parse_size_knob_options

    grid = load_experiment(experiment, parse_size_knob_options(size_knobs or []))
    if not status:
        check_output_dir(grid.out, f"{experiment}: out")
    how = runtime(device, tf32, bf16, compile_model, grad_accum, checkpoint_activations)
    sequential = SequentialSettings(max_seeds, sesoi, alpha, power, spending, noise_floor, eval_set, baseline_arm,
                                    ledger, procedure)
    if not until_decided:
        _no_sequential_options(sequential)
    if status:
        emit(until_decided_status(grid, experiment, sequential) if until_decided else experiment_status(grid),
             as_json)
        return
    check_executor_options(executor, jobs=jobs, partition=partition, array_parallelism=array_parallelism,
                           slurm_options=slurm_options or ())
    options = ClusterOptions(executor, partition, time_limit, gpus_per_run, array_parallelism,
                             tuple(slurm_options or ()))
    if until_decided:
        emit(sweep_until_decided(grid, experiment, sequential, partial(_train, options, jobs, how, rounds=True)),
             as_json)
    elif executor != "pool":
        emit(submit_experiment(grid, options, how), as_json)
    else:
        emit(_train(options, jobs, how, grid), as_json)


def _train(options: ClusterOptions, jobs: int | None, how: Runtime, grid: Experiment, *,
           rounds: bool = False) -> SweepResult | ExperimentStatus:
    """Every run of `grid` brought to finished: here in a pool of processes, or as cluster jobs waited for. A run
    another process holds is left to it, except in a round of sequential looks, which need its loss files now."""
    from trainer.grid.cluster import finish_on_cluster
    from trainer.grid.sweep import run_experiment

    if options.executor != "pool":
        return finish_on_cluster(grid, options, how)
    result = run_experiment(grid, jobs=jobs, gpus_per_run=options.gpus_per_run, runtime=how)
    held = [outcome for outcome in result.outcomes if outcome.action == "held"]
    if rounds and held:
        raise RunFailure(f"{held[0].note}: the looks of this round need its loss files; run the same command again "
                         "once it has finished")
    warn(result.warnings)
    return result


def _no_sequential_options(settings: SequentialSettings) -> None:
    given = {"--max-seeds": settings.max_seeds, "--sesoi": settings.sesoi, "--noise-floor": settings.noise_floor,
             "--alpha": settings.alpha, "--power": settings.power, "--spending": settings.spending,
             "--eval-set": settings.eval_set, "--ledger": settings.ledger, "--procedure": settings.procedure}
    named = [flag for flag, value in given.items() if value is not None]
    if named or settings.baseline != "baseline":
        raise InputError(f"{', '.join(named or ['--baseline-arm'])}: only with --until-decided")


def select_lr_command(
    experiment: str = typer.Argument(..., help="The experiment TOML file of a finished learning-rate grid."),
    selection_seed: int = typer.Option(None, "--seed", help="Selection seed (default: [select] seed, else the "
                                       "smallest).", show_default=False),
    seeds: str = typer.Option(None, "--seeds", help="Confirmation seeds, comma-separated (default: [select] "
                              "confirm_seeds).", show_default=False),
    out: str = typer.Option(None, "--out", help="The confirmation grid TOML (default: EXPERIMENT-confirm.toml).",
                            show_default=False),
    as_json: bool = JSON,
) -> None:
    """Per variant, the grid rate with the lowest final development NLL (ties: lower rate); writes the confirmation grid."""  # noqa: E501 - one line in --help's list
    from gatedv_stats.io.jsonout import strict_json
    from gatedv_stats.stats.lr_selection import select_lr
    from trainer.grid.experiment import load_experiment, write_experiment
    from trainer.grid.lr_selection import (
        confirmation_experiment,
        confirmation_grid_path,
        parse_seeds,
        selection_table,
    )

    path = confirmation_grid_path(experiment, out)
    grid = load_experiment(experiment)
    confirm_seeds = parse_seeds(seeds)
    table, chosen_seed = selection_table(grid, selection_seed)
    selection = select_lr(table, selection_seed=chosen_seed)
    write_experiment(path, confirmation_experiment(grid, selection.selected, seeds=confirm_seeds))
    typer.echo(strict_json({**selection.to_dict(), "confirmation_grid": str(path)}) if as_json
               else f"{selection.summary()}\nwrote {path}")
