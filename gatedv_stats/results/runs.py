"""The API result of `gv.load`: the evaluated runs read."""


from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pandas as pd

from gatedv_stats.core import formatting as fmt
from gatedv_stats.io.lossfiles import LossRun, SkippedFile
from gatedv_stats.pairing.selection import natural_key
from gatedv_stats.reporting.model import RowGroup, Table, row
from gatedv_stats.results.base import Result
from gatedv_stats.stats.metrics import perplexity, token_nll


@dataclass(frozen=True, repr=False)
class Runs(Result):
    """`gv.load`: the evaluated runs read (a sequence of `LossRun`), ready for `compare`, `analyze`, `arms` and
    `plan`."""

    runs: tuple[LossRun, ...]
    skipped: tuple[SkippedFile, ...] | None = None

    def __iter__(self) -> Iterator[LossRun]:
        return iter(self.runs)

    def __len__(self) -> int:
        return len(self.runs)

    def __getitem__(self, index: int) -> LossRun:
        return self.runs[index]

    @property
    def arms(self) -> list[str]:
        """The arms read, in natural name order."""
        return sorted({run.arm for run in self.runs}, key=natural_key)

    def headline(self) -> str:
        sets = sorted({str(run.eval_set) for run in self.runs})
        return (f"{len(self.runs)} runs of {len(self.arms)} arms ({', '.join(self.arms)}) on "
                f"{', '.join(sets)}")

    def summary(self) -> str:
        frame = self.to_frame()
        lines = [self.headline()]
        for (arm, eval_set), group in frame.groupby(["arm", "eval_set"], sort=False, dropna=False):
            lines.append(f"  {arm} on {eval_set}: seeds {', '.join(map(str, group['seed']))}, PPL "
                         f"{fmt.format_ppl(group['ppl'].mean(), group['ppl'].std() if len(group) > 1 else None)}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"runs": self.to_frame().to_dict(orient="records"), **self._skipped()}

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([{
            "arm": run.arm, "seed": run.seed, "eval_set": run.eval_set, "lr": run.meta.get("lr"),
            "n_docs": len(run.docs),
            "ppl": float(perplexity(token_nll(run.docs["loss_sum"].to_numpy(), run.docs["n_targets"].to_numpy()))),
            "source": run.source, "sha256": run.sha256} for run in self.runs])

    def tables(self) -> list[Table]:
        frame = self.to_frame()
        rows = tuple(row(r.arm, str(r.seed), str(r.eval_set), fmt.format_count(r.n_docs), fmt.format_ppl(r.ppl),
                         r.source) for r in frame.itertuples())
        return [Table("runs", self.headline() + ".", ("Arm", "Seed", "Evaluation set", "Documents", "PPL", "Source"),
                      "lrlrrl", (RowGroup(None, rows),))]
