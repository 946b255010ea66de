"""Evaluated runs: selecting them and grouping them into the comparisons an experiment holds.

A group is the native-activation runs of one evaluation set at one learning rate, by arm; runs evaluated with
a swapped value activation (the inference-time swap) are kept apart. The reference arm is the one every
other arm is compared with.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.core.formatting import eval_set_name, format_lr
from gatedv_stats.io.runfiles import Run

GATEDV = "gatedv"
DEFAULT_REFERENCE = "baseline"
EVAL_SET_ORDER: dict[str | None, int] = {"heldout": 0, "dev": 1}
NATIVE_VALUE_ACT = {"baseline": "linear", "gatedv": "silu"}


def select_runs(runs: list[Run], *, arm: str | None = None, eval_set: str | None = None,
                what: str = "inputs") -> list[Run]:
    """Keep the runs of one arm and/or one evaluation set; an empty selection is an error naming what exists."""
    selected = [run for run in runs
                if (arm is None or run.arm == arm) and (eval_set is None or run.eval_set == eval_set)]
    if not selected:
        arms = sorted({run.arm for run in runs})
        sets = sorted({str(run.eval_set) for run in runs})
        wanted = ", ".join(f"{key} {value!r}" for key, value in (("arm", arm), ("eval_set", eval_set))
                           if value is not None)
        raise InputError(f"{what}: no run with {wanted or 'any metadata'} (arms found: {', '.join(arms) or 'none'}; "
                         f"eval sets found: {', '.join(sets) or 'none'})")
    return selected


def arm_sides(read: Callable[[Sequence], list[Run]], files: str, *, tables: Sequence | None,
              baseline: Sequence | None, variant: Sequence | None, baseline_arm: str | None,
              variant_arm: str | None) -> tuple[list[Run], list[Run]]:
    """The runs that hold each arm, read with `read`: `tables` holding both arms (which `baseline_arm` and
    `variant_arm` must then name), or the `baseline` and `variant` inputs; any other combination is refused naming
    the parameter (`files`: what the inputs are, "loss" or "item-score")."""
    if tables and (baseline or variant):
        raise ParameterError("baseline", "give either long tables / directories holding both arms, or {baseline} and "
                             "{variant} files", ("variant",), leading=False)
    if tables:
        runs = read(tables)
        missing = [name for name, arm in (("baseline_arm", baseline_arm), ("variant_arm", variant_arm)) if arm is None]
        if missing:
            arms = ", ".join(sorted({run.arm for run in runs}, key=natural_key))
            named = " and ".join("{" + name + "}" for name in missing)
            raise ParameterError(missing[0], f"name the arms to compare with {named} (arms found: {arms})",
                                 tuple(missing[1:]), leading=False)
        return runs, runs
    if baseline and variant:
        return read(baseline), read(variant)
    raise ParameterError("baseline", f"give {{baseline}} and {{variant}} {files} files, or a long table with "
                         "{baseline_arm} and {variant_arm}", ("variant", "baseline_arm", "variant_arm"), leading=False)


@dataclass(frozen=True)
class EvalGroup:
    """The native-activation runs of one evaluation set at one learning rate, by arm."""

    eval_set: str | None
    lr: float | None
    arms: dict[str, list[Run]]  # by arm

    @property
    def label(self) -> str:
        return f"{eval_set_name(self.eval_set)}; LR = {format_lr(self.lr)}"

    @property
    def runs(self) -> list[Run]:
        return [run for runs in self.arms.values() for run in runs]


def eval_set_sort_key(eval_set: object) -> tuple:
    """Held-out first, then development, then named sets, then unnamed."""
    return (EVAL_SET_ORDER.get(str(eval_set), 2) if eval_set is not None else 3, str(eval_set or ""))


def group_sort_key(eval_set: str | None, lr: float | None) -> tuple:
    return (eval_set_sort_key(eval_set), -1.0 if lr is None else lr)


def lr_of(run: Run) -> float | None:
    """The run's peak learning rate from its metadata (None when unrecorded)."""
    lr = run.meta.get("lr")
    if lr is None:
        return None
    try:
        return float(lr)
    except (TypeError, ValueError):
        raise InputError(f"{run.source}: lr {lr!r} is not a number") from None


def native_act(arm: str, meta: dict) -> str | None:
    """The value activation the run was trained with (metadata, else the arm's canonical one)."""
    return meta.get("trained_value_act") or NATIVE_VALUE_ACT.get(arm)


def is_override(run: Run) -> bool:
    """True for an inference-time swap: evaluated with a value activation other than its training one."""
    act = run.meta.get("value_act")
    return act is not None and act != native_act(run.arm, run.meta)


def add_unique(runs: list[Run], run: Run, what: str) -> None:
    """Append `run` unless a run of the same seed is there already, which is an error naming both files."""
    twin = next((other for other in runs if other.seed == run.seed), None)
    if twin is not None:
        raise InputError(f"arm {run.arm} seed {run.seed} {what} appears twice: {twin.source} and {run.source}")
    runs.append(run)


def eval_groups(runs: tuple[Run, ...]) -> list[EvalGroup]:
    """Native runs grouped by evaluation set and learning rate (held-out first, then development, then others)."""
    grouped: dict = defaultdict(lambda: defaultdict(list))
    for run in runs:
        if not is_override(run):
            add_unique(grouped[(run.eval_set, lr_of(run))][run.arm], run,
                       f"on eval set {run.eval_set} at LR {format_lr(lr_of(run))}")
    keys = sorted(grouped, key=lambda key: group_sort_key(*key))
    return [EvalGroup(eval_set, lr, dict(grouped[(eval_set, lr)])) for eval_set, lr in keys]


def mixed_eval_set(runs: list[Run]) -> str | None:
    """Why these runs are not one evaluation set (differing `eval_set_sha256`), else None."""
    hashes = sorted({str(run.meta["eval_set_sha256"]) for run in runs if run.meta.get("eval_set_sha256")})
    if len(hashes) > 1:
        return (f"the loss files named {runs[0].eval_set!r} carry {len(hashes)} different eval_set_sha256 values "
                f"({', '.join(h[:12] for h in hashes)}), so they are not one evaluation set")
    return None


def choose_reference(arms: set[str], requested: str | None) -> str | None:
    """The reference arm: the requested one (an error if absent), else "baseline" when present."""
    if requested is not None:
        if requested not in arms:
            raise ParameterError("reference", f"{{reference}} {requested}: no loss file has this arm (arms: "
                                 f"{', '.join(sorted(arms))})", leading=False)
        return requested
    return DEFAULT_REFERENCE if DEFAULT_REFERENCE in arms else None


def natural_key(name: str) -> tuple:
    """Sort key that orders the numbers inside names by their value: v2 before v10, seed-9 before seed-10."""
    parts = re.split(r"(\d+)", name)  # text at even positions, digits at odd ones, so like compares with like
    return tuple(int(part) if k % 2 else part for k, part in enumerate(parts)), name


def other_arms(arms, reference: str) -> list[str]:
    """Non-reference arms in a stable order: gatedv first, then in natural name order (v2 before v10)."""
    return sorted((arm for arm in arms if arm != reference), key=lambda arm: (arm != GATEDV, natural_key(arm)))


def arm_order(arms, reference: str | None) -> list[str]:
    """Every arm, the reference first, then gatedv, then in natural name order (v2 before v10)."""
    return sorted(arms, key=lambda arm: (arm != reference, arm != GATEDV, natural_key(arm)))
