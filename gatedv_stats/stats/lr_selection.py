"""Learning-rate selection (paper Table 2): per arm, the grid rate with the lowest final development NLL on the
selection seed; exact ties favour the lower rate."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from gatedv_stats.core.errors import InputError

TABLE_COLUMNS = ("arm", "lr", "seed", "dev_nll")


@dataclass(frozen=True)
class LRSelection:
    """The selected rate of each arm and the development PPL of every arm × rate on the selection seed."""

    selection_seed: int
    selected: dict  # arm -> lr
    ppl: pd.DataFrame  # index arm, columns lr, values exp(final dev NLL) on the selection seed

    def to_dict(self) -> dict:
        return {
            "selection_seed": self.selection_seed,
            "selected": {arm: float(lr) for arm, lr in self.selected.items()},
            "ppl": {arm: {str(lr): (None if np.isnan(value) else float(value)) for lr, value in row.items()}
                    for arm, row in self.ppl.iterrows()},
        }

    def summary(self) -> str:
        rates = list(self.ppl.columns)
        width = max(10, *(len(f"{lr:g}") for lr in rates)) + 2
        arm_width = max(8, *(len(str(arm)) for arm in self.ppl.index)) + 2
        lines = [f"development PPL on selection seed {self.selection_seed} (* = selected)",
                 f"{'arm':<{arm_width}}" + "".join(f"{lr:>{width}g}" for lr in rates)]
        for arm, row in self.ppl.iterrows():
            cells = [("" if np.isnan(value) else f"{value:,.3f}" + ("*" if lr == self.selected[arm] else " "))
                     for lr, value in row.items()]
            lines.append(f"{arm:<{arm_width}}" + "".join(f"{cell:>{width}}" for cell in cells))
        return "\n".join(lines)


def final_curve_points(curves: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The last point of each run of a curve table that may stand for its final development NLL, and the runs
    that may not, each with why: (arm, lr, seed, step, dev_nll) and (arm, lr, seed, step, why).

    With a run record (`curvefiles.RUN_RECORD_COLUMNS`), a run stands when its status, where recorded, is
    "finished" and its curve ends at its final update, where recorded; when both are recorded it stands whatever
    the other runs' lengths. A run whose record does not give both stands only when its curve reaches the last
    step of every other standing curve of its arm: the rates of one arm are compared after the same training.
    """
    last = curves.sort_values("step", kind="stable").groupby(["arm", "lr", "seed"], as_index=False).last()
    run_record = last.reindex(columns=["run_file", "run_status", "run_updates"])  # all NaN without a run record
    files, status = run_record["run_file"], run_record["run_status"]
    updates = run_record["run_updates"].to_numpy(dtype=np.float64)
    why = pd.Series(None, index=last.index, dtype=object)
    for index, where, recorded_status, final, step in zip(last.index, files, status, updates, last["step"].astype(int)):
        if isinstance(recorded_status, str) and recorded_status != "finished":
            of = "" if np.isnan(final) else f" of {int(final)}"
            state = "diverged" if recorded_status == "diverged" else "has not finished"
            why[index] = (f"its run {state} ({where} says status {recorded_status!r}; its curve ends at "
                          f"step {step}{of})")
        elif not np.isnan(final) and step != int(final):
            why[index] = f"its curve ends at step {step}, not at the run's final update {int(final)} ({where})"
    standing = why.isna().to_numpy()
    confirmed = status.eq("finished").to_numpy() & ~np.isnan(updates)
    longest = last[standing].groupby("arm")["step"].max()
    for index in last.index[standing & ~confirmed]:
        arm, step = last.at[index, "arm"], int(last.at[index, "step"])
        if step < longest[arm]:
            record = ("no run.json beside it records the run's final update" if pd.isna(files[index])
                      else f"{files[index]} does not record both the run's status and its final update")
            why[index] = (f"its curve ends at step {step}, before step {int(longest[arm])} that another {arm} curve "
                          f"reaches, and {record}")
    kept = why.isna().to_numpy()
    left_out = last.loc[~kept, ["arm", "lr", "seed", "step"]].assign(why=why[~kept].to_numpy())
    return (last.loc[kept, ["arm", "lr", "seed", "step", "dev_nll"]].reset_index(drop=True),
            left_out.reset_index(drop=True))


def select_lr(table: pd.DataFrame, selection_seed: int | None = None) -> LRSelection:
    """Select each arm's learning rate from final development NLLs.

    `table` has columns arm, lr, seed, dev_nll; a curve table (with `step`) is reduced to each run's last
    step. Without `selection_seed` the smallest seed present for every arm is used.
    """
    missing = [column for column in TABLE_COLUMNS if column not in table.columns]
    if missing:
        raise InputError(f"learning-rate table: missing column {', '.join(map(repr, missing))}")
    if "step" in table.columns:
        table = table.sort_values("step", kind="stable").groupby(["arm", "lr", "seed"], as_index=False).last()
    duplicated = table.duplicated(["arm", "lr", "seed"])
    if duplicated.any():
        arm, lr, seed = table.loc[duplicated, ["arm", "lr", "seed"]].iloc[0]
        raise InputError(f"learning-rate table: arm {arm} lr {lr} seed {seed} appears twice")
    if selection_seed is None:
        shared = set.intersection(*(set(group["seed"]) for _, group in table.groupby("arm")))
        if not shared:
            raise InputError("learning-rate table: no seed is present for every arm; give the selection seed")
        selection_seed = int(min(shared))
    on_seed = table[table["seed"] == selection_seed]
    absent = sorted(set(table["arm"]) - set(on_seed["arm"]))
    if absent:
        raise InputError(f"learning-rate table: selection seed {selection_seed} has no runs of {', '.join(absent)}")
    ordered = on_seed.sort_values(["dev_nll", "lr"], kind="stable")  # lowest NLL, then the lower rate
    selected = {arm: float(lr) for arm, lr in ordered.groupby("arm", sort=True)["lr"].first(skipna=False).items()}
    ppl = on_seed.assign(ppl=np.exp(on_seed["dev_nll"].to_numpy(dtype=np.float64))).pivot(
        index="arm", columns="lr", values="ppl").sort_index()
    return LRSelection(selection_seed=int(selection_seed), selected=selected, ppl=ppl)
