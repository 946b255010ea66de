"""The API result of `gv.load`: the evaluated runs read (loss files, item-score files, score tables)."""


from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pandas as pd

from gatedv_stats.core import formatting as fmt
from gatedv_stats.io.runfiles import Run, SkippedFile
from gatedv_stats.pairing.selection import natural_key
from gatedv_stats.reporting.model import RowGroup, Table, row
from gatedv_stats.results.base import Result
from gatedv_stats.stats.metrics import perplexity, token_nll


@dataclass(frozen=True, repr=False)
class Runs(Result):
    """`gv.load`: the evaluated runs read (a sequence of `Run`), ready for `compare`, `analyze`, `arms` and
    `plan`.

    Parameters
    ----------
    runs
        The runs, each with its units, provenance, source and SHA-256.
    skipped
        The unreadable files passed over (None: none were allowed).

    Examples
    --------
    >>> runs = gv.load(example_study(tmp_dir))
    >>> runs
    Runs(6 runs of 2 arms (baseline, gatedv) on heldout)
    >>> len(runs), runs[0].arm, runs[0].seed
    (6, 'baseline', 0)
    """

    runs: tuple[Run, ...]
    skipped: tuple[SkippedFile, ...] | None = None

    def __iter__(self) -> Iterator[Run]:
        return iter(self.runs)

    def __len__(self) -> int:
        return len(self.runs)

    def __getitem__(self, index: int) -> Run:
        return self.runs[index]

    @property
    def arms(self) -> list[str]:
        """The arms read, in natural name order."""
        return sorted({run.arm for run in self.runs}, key=natural_key)

    def headline(self) -> str:
        sets = sorted({str(_family(run)) for run in self.runs})
        return f"{len(self.runs)} runs of {len(self.arms)} arms ({', '.join(self.arms)}) on {', '.join(sets)}"

    def summary(self) -> str:
        lines = [self.headline()]
        for (arm, family), group in self.to_frame().groupby(["arm", "on"], sort=False, dropna=False):
            values = group["ppl"] if group["kind"].iloc[0] == "loss" else group["score"]
            name = "PPL" if group["kind"].iloc[0] == "loss" else f"{group['metric'].iloc[0]} mean"
            lines.append(f"  {arm} on {family}: seeds {', '.join(map(str, group['seed']))}, {name} "
                         f"{fmt.format_ppl(values.mean(), values.std() if len(group) > 1 else None)}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"runs": self.to_frame().drop(columns="on").to_dict(orient="records"), **self._skipped()}

    def to_frame(self) -> pd.DataFrame:
        """One row per run: arm, seed, evaluation set, learning rate, units, PPL (loss files) or the mean of its
        first metric (scores), source, SHA-256, its kind and task."""
        return pd.DataFrame([{
            "arm": run.arm, "seed": run.seed, "eval_set": run.eval_set, "lr": run.meta.get("lr"),
            "n_docs": len(run.units), **_value(run), "source": run.source, "sha256": run.sha256, "kind": run.schema,
            "task": run.task, "on": str(_family(run))} for run in self.runs])

    def tables(self) -> list[Table]:
        rows = tuple(row(r.arm, str(r.seed), r.on, fmt.format_count(r.n_docs),
                         fmt.format_ppl(r.ppl) if r.kind == "loss" else f"{r.score:.4g}", r.source)
                     for r in self.to_frame().itertuples())
        return [Table("runs", self.headline() + ".", ("Arm", "Seed", "Evaluation set / task", "Units", "PPL / score",
                                                      "Source"), "lrlrrl", (RowGroup(None, rows),))]


def _family(run: Run) -> str | None:
    return run.task if run.task is not None else run.eval_set


def _value(run: Run) -> dict:
    if run.schema == "loss":
        nll = token_nll(run.units["loss_sum"].to_numpy(), run.units["n_targets"].to_numpy())
        return {"ppl": float(perplexity(nll)), "metric": "loss", "score": float("nan")}
    metric = run.meta["metrics"][0]
    return {"ppl": float("nan"), "metric": metric, "score": float(run.units[metric].mean())}
