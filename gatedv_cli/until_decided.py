"""`gatedv sweep GRID --until-decided`: a grid trained in rounds of seed pairs, each variant stopped once its
group-sequential comparison with the baseline is decided.

A round trains the next seed of every undecided variant and of the baseline (through the sweep's executors: this
machine's pool, or cluster jobs waited for), then takes one look per undecided variant (`gv.sequential`), recorded
in the variant's design file in `GRID-design/` beside the grid; each variant's run directories record that design
(`sequential.json`), so that a research ledger asks for its stage-wise p-value. With `--ledger` every design runs at
the level the ledger gives its variant when the variant starts (the variants start in the grid's order and are
decided in parallel: the ledger's procedure is asynchronous), and a variant that stops is entered there. The design
is fixed at the first look: a rerun resumes it (finished runs are skipped, recorded looks are not taken again), and
a `--max-seeds`, `--sesoi`, `--alpha`, `--power`, `--spending`, `--noise-floor` or `--ledger` that differs from a
design's is refused before anything trains. This module composes the trainer and `gv`, which do not know each other
(docs/sequential-seeds.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import typer

from gatedv_stats.analysis.sequential_design import SequentialDesign
from gatedv_stats.core.errors import InputError, RunFailure
from gatedv_stats.io.designfiles import write_run_design
from gatedv_stats.io.runrecords import read_run_record
from trainer.grid.experiment import Experiment
from trainer.grid.grid_run import loss_file_path, run_directory


@dataclass(frozen=True)
class SequentialSettings:
    """The design's settings as given on the command line (None: the design's, or the default for a new one)."""

    max_seeds: int | None = None
    sesoi: float | None = None
    alpha: float | None = None
    power: float | None = None
    spending: str | None = None
    noise_floor: str | None = None
    eval_set: str | None = None
    baseline: str = "baseline"
    ledger: str | None = None
    procedure: str | None = None

    def design_settings(self) -> dict:
        return {"sesoi": self.sesoi, "alpha": self.alpha, "power": self.power, "spending": self.spending,
                "noise_floor": self.noise_floor, "ledger": self.ledger, "procedure": self.procedure}


@dataclass(frozen=True)
class VariantState:
    """Where one variant's sequential comparison stands."""

    variant: str
    design: str  # its design file
    looks: int
    n_pairs: int  # the seed pairs of its last look (0: none yet)
    decision: str  # "not started", "continue", "diverged" or the decision it stopped with
    line: str  # the last look's line
    alpha_spent: float | None  # per direction, at the last look
    ledger: dict | None = None  # with --ledger, at its stop: the entry's step, decision, level and p-value (e-value)

    @property
    def stopped(self) -> bool:
        return self.decision not in ("not started", "continue")

    def to_dict(self) -> dict:
        return {**self.__dict__, "stopped": self.stopped}


@dataclass(frozen=True)
class UntilDecidedResult:
    experiment: str
    baseline: str
    max_seeds: int
    eval_set: str
    variants: tuple[VariantState, ...]

    @property
    def runs_trained(self) -> int:
        """The runs the looks so far rest on: every variant's seed pairs, and the baseline's seeds they share."""
        return sum(state.n_pairs for state in self.variants) + max((state.n_pairs for state in self.variants),
                                                                   default=0)

    @property
    def fixed_runs(self) -> int:
        """The runs a fixed design of K seed pairs trains for the same variants."""
        return (len(self.variants) + 1) * self.max_seeds

    def to_dict(self) -> dict:
        return {"experiment": self.experiment, "baseline": self.baseline, "max_seeds": self.max_seeds,
                "eval_set": self.eval_set, "variants": [state.to_dict() for state in self.variants],
                "runs_trained": self.runs_trained, "fixed_runs": self.fixed_runs}

    def summary(self) -> str:
        lines = [f"{self.experiment}: sequential over up to {self.max_seeds} seed pairs against {self.baseline} "
                 f"({self.eval_set} set)",
                 f"{'variant':<14}{'looks':>6}{'pairs':>7}{'α spent':>9}  {'state':<26}design file"]
        for state in self.variants:
            spent = "-" if state.alpha_spent is None else f"{state.alpha_spent:.3g}"
            lines.append(f"{state.variant:<14}{state.looks:>6}{state.n_pairs:>7}{spent:>9}  {state.decision:<26}"
                         f"{state.design}")
            if state.line:
                lines.append(f"{'':<14}{state.line}")
            if state.ledger:
                lines.append(f"{'':<14}ledger step {state.ledger['step']}: {state.ledger['decision']} (level "
                             f"{state.ledger['level']:.3g})")
        saved = self.fixed_runs - self.runs_trained
        lines.append(f"runs the looks rest on: {self.runs_trained} of the {self.fixed_runs} a fixed design of "
                     f"{self.max_seeds} seed pairs trains" + (f" ({saved} saved)" if saved > 0 and all(
                         state.stopped for state in self.variants) else ""))
        return "\n".join(lines)


def design_directory(experiment_path: str | Path) -> Path:
    """`GRID-design/` beside the grid file: one design file per variant."""
    path = Path(experiment_path)
    return path.with_name(f"{path.stem}-design")


def sweep_until_decided(grid: Experiment, experiment_path: str | Path, settings: SequentialSettings,
                        train_round: Callable[[Experiment], object]) -> UntilDecidedResult:
    """Rounds of seed pairs until every variant's comparison with the baseline stops (or reaches K): `train_round`
    brings a restricted grid's runs to finished; each look's line goes to stderr."""
    result = until_decided_status(grid, experiment_path, settings)
    states = {state.variant: state for state in result.variants}
    first_look = 1 if settings.noise_floor is not None else 2
    round_index = 0
    while todo := {state.variant: max(state.n_pairs + 1, first_look) for state in states.values()
                   if not state.stopped}:
        round_index += 1
        for n_pairs in sorted(set(todo.values())):
            group = [variant for variant, n in todo.items() if n == n_pairs]
            train_round(grid.restricted([settings.baseline, *group], grid.seeds[:n_pairs]))
        for variant, n_pairs in todo.items():
            states[variant] = _look(grid, settings, states[variant], n_pairs, result.max_seeds, result.eval_set)
            typer.echo(f"round {round_index}: {variant}: {states[variant].line}", err=True)
    return replace(result, variants=tuple(states.values()))


def until_decided_status(grid: Experiment, experiment_path: str | Path,
                         settings: SequentialSettings) -> UntilDecidedResult:
    """Each variant's state from its design file, without training or looking; every design is checked against
    the settings given (a changed design is refused before anything trains)."""
    from gatedv_stats.api import read_design

    eval_set = _checked(grid, settings)
    designs = {variant: design_directory(experiment_path) / f"{variant}.json" for variant in grid.variants
               if variant != settings.baseline}
    made = {variant: read_design(path, max_seeds=settings.max_seeds, **settings.design_settings())
            for variant, path in designs.items() if path.exists()}
    budgets = {design.max_seeds for design in made.values()}
    if settings.max_seeds is None and len(budgets) > 1:
        raise InputError(f"{design_directory(experiment_path)}: its designs have budgets of "
                         f"{', '.join(map(str, sorted(budgets)))} seed pairs; name one with --max-seeds")
    max_seeds = settings.max_seeds or (budgets.pop() if budgets else len(grid.seeds))
    if not 1 <= max_seeds <= len(grid.seeds):
        raise InputError(f"--max-seeds: {grid.source or grid.name} lists {len(grid.seeds)} seeds, the budget of seed "
                         f"pairs must be 1 to {len(grid.seeds)}, got {max_seeds}")
    states = tuple(_state(variant, path, made[variant]) if variant in made
                   else VariantState(variant, str(path), 0, 0, "not started", "", None)
                   for variant, path in designs.items())
    return UntilDecidedResult(grid.name, settings.baseline, max_seeds, eval_set, states)


# --- the parts ---


def _checked(grid: Experiment, settings: SequentialSettings) -> str:
    """The evaluation set the looks read, once the grid suits a sequential sweep: the baseline among its variants
    and one learning rate per variant."""
    where = grid.source or grid.name
    if settings.baseline not in grid.variants:
        raise InputError(f"{where}: --until-decided compares every variant with the baseline {settings.baseline!r}, "
                         f"which is not among its variants ({', '.join(grid.variants)}); name it with --baseline-arm")
    if len(grid.variants) < 2:
        raise InputError(f"{where}: --until-decided needs a variant beside the baseline")
    several = [variant for variant in grid.variants if len(grid.lrs[variant]) > 1]
    if several:
        raise InputError(f"{where}: {several[0]} has {len(grid.lrs[several[0]])} learning rates; a sequential sweep "
                         "compares one run per variant and seed: select the rate first (gatedv select-lr)")
    eval_set = settings.eval_set or ("heldout" if "heldout" in grid.eval_sets else grid.eval_sets[0])
    if eval_set not in grid.eval_sets:
        raise InputError(f"--eval-set: {where} evaluates on {', '.join(grid.eval_sets)}, not {eval_set}")
    return eval_set


def _state(variant: str, path: Path, design: SequentialDesign) -> VariantState:
    from gatedv_stats.analysis.sequential import ledger_entry_of

    last = design.looks[-1]
    entry = ledger_entry_of(design)
    return VariantState(variant, str(path), len(design.looks), last.n_pairs, last.decision if last.stop else "continue",
                        last.line, last.alpha_spent, None if entry is None else {
                            key: entry.row[key] for key in ("step", "decision", "level", "p_value", "e_value")})


def _look(grid: Experiment, settings: SequentialSettings, state: VariantState, n_pairs: int, max_seeds: int,
          eval_set: str) -> VariantState:
    """The look at `n_pairs` seed pairs of the variant, recorded in its design file; a diverged run stops the
    variant (there is no loss file to compare), a diverged baseline the sweep."""
    import gatedv_stats as gv

    variant, path = state.variant, Path(state.design)
    seeds = grid.seeds[:n_pairs]
    for arm in (settings.baseline, variant):
        diverged = _diverged(grid, arm, seeds)
        if diverged is not None and arm == settings.baseline:
            raise RunFailure(f"{diverged}: the baseline diverged; the sequential comparisons need its loss files: "
                             "lower its learning rate or drop the seed from the grid, and start new designs")
        if diverged is not None:
            _withdraw(path, f"{variant} diverged ({diverged})")
            return VariantState(variant, state.design, state.looks, n_pairs, "diverged", f"stop: diverged ({diverged})",
                                state.alpha_spent)
    result = gv.sequential(baseline=_loss_files(grid, settings.baseline, seeds, eval_set),
                           variant=_loss_files(grid, variant, seeds, eval_set), design=path, max_seeds=max_seeds,
                           note=f"variant {variant} of {Path(grid.source).name if grid.source else grid.name}",
                           **settings.design_settings())
    for seed in seeds:
        write_run_design(run_directory(grid.out, variant, grid.lrs[variant][0], seed), path, result.design.sha256)
    for warning in result.warnings:
        typer.echo(f"warning: {variant}: {warning}", err=True)
    return _state(variant, path, result.design)


def _withdraw(path: Path, reason: str) -> None:
    """A diverged variant's design started in a ledger: its test finishes as a discard (p = 1)."""
    from gatedv_stats.analysis.ledger_entries import withdraw_design
    from gatedv_stats.analysis.sequential import load_design

    if path.exists():
        design = load_design(path)
        if design.ledger is not None:
            withdraw_design(design, reason)


def _loss_files(grid: Experiment, arm: str, seeds: tuple[int, ...], eval_set: str) -> list[str]:
    return [str(loss_file_path(run_directory(grid.out, arm, grid.lrs[arm][0], seed), eval_set)) for seed in seeds]


def _diverged(grid: Experiment, arm: str, seeds: tuple[int, ...]) -> str | None:
    """The first of these runs of `arm` that diverged, or None."""
    for seed in seeds:
        run_dir = run_directory(grid.out, arm, grid.lrs[arm][0], seed)
        if (read_run_record(run_dir) or {}).get("status") == "diverged":
            return str(run_dir)
    return None
