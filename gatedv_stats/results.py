"""What the Python API returns: the library's results, presented for where they are shown.

Each result reads in one line as its `repr` (`Comparison(gatedv vs baseline: no detectable difference; …)`),
prints as the command line's text summary (`str`), shows the report's tables in a notebook (`_repr_html_`),
gives a pandas DataFrame (`to_frame`), the command line's `--json` object (`to_dict`) and, where the report
draws figures for it, the report's Altair charts (`plot`). The statistics themselves stay in the wrapped result
(`comparison`, `analysis`, `arms`, `plan`), whose fields are also reachable on the wrapper
(`result.delta_p`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import altair as alt
import numpy as np
import pandas as pd

from gatedv_stats.analysis.pair import PairAnalysis
from gatedv_stats.core import formatting as fmt
from gatedv_stats.io.lossfiles import LossRun, SkippedFile
from gatedv_stats.pairing.losses import PairedLosses
from gatedv_stats.pairing.selection import natural_key
from gatedv_stats.reporting.model import RowGroup, Table, row
from gatedv_stats.reporting.render import tables_html
from gatedv_stats.reporting.sections.comparison import (
    comparison_charts,
    comparison_row,
    comparison_table,
    per_seed_rows,
)
from gatedv_stats.reporting.sections.verdicts import verdict_row, verdicts_table
from gatedv_stats.stats.comparison import Comparison
from gatedv_stats.stats.metrics import ArmSummary, arm_summary, document_differences, perplexity, token_nll
from gatedv_stats.stats.multiple import ArmsComparison
from gatedv_stats.stats.planning import StudyPlan


class Result(ABC):
    """The presentation every API result shares."""

    skipped: tuple[SkippedFile, ...] | None  # unreadable files passed over (None: none were allowed)

    @abstractmethod
    def headline(self) -> str:
        """The result in one line (its `repr` without the type name)."""

    @abstractmethod
    def summary(self) -> str:
        """The command line's text output."""

    @abstractmethod
    def to_dict(self) -> dict:
        """The command line's `--json` object (JSON-ready; NaN where the command prints null)."""

    @abstractmethod
    def to_frame(self) -> pd.DataFrame:
        """The result as a table, one row per comparison (or run, or quantity)."""

    @abstractmethod
    def tables(self) -> list[Table]:
        """The report's tables for this result."""

    def _skipped(self) -> dict:
        return {} if self.skipped is None else {"skipped_unreadable": [file.to_dict() for file in self.skipped]}

    def _repr_html_(self) -> str:
        return tables_html(self.tables())

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        return f"{type(self).__name__.removesuffix('Result')}({self.headline()})"


def _forward(result: object, name: str) -> Any:
    """An attribute of the wrapped library result (never a dunder, so copying and pickling stay plain)."""
    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(result, name)


def _charts(name: str, pairs: Sequence[tuple[str, PairedLosses, ArmSummary, ArmSummary]]) -> alt.VConcatChart:
    """The report's figures of these (label, paired, reference summary, variant summary) comparisons."""
    diffs = [pd.DataFrame({"comparison": label,
                           "diff": document_differences(paired.baseline, paired.variant) / paired.n_units})
             for label, paired, _, _ in pairs]
    per_seed = [entry for label, _, reference, variant in pairs for entry in per_seed_rows(label, reference, variant)]
    return alt.vconcat(*comparison_charts(name, diffs, per_seed))


@dataclass(frozen=True, repr=False)
class ComparisonResult(Result):
    """`gv.compare`: the verdict and the paper's comparison of two arms (`gatedv bootstrap`)."""

    comparison: Comparison
    paired: PairedLosses
    skipped: tuple[SkippedFile, ...] | None = None

    def __getattr__(self, name: str) -> Any:
        return _forward(self.comparison, name)

    def headline(self) -> str:
        result = self.comparison
        interval = ("" if result.seed_document is None else
                    " " + fmt.format_delta_p_interval(result.seed_document.delta_p_interval))
        return (f"{result.variant.arm} vs {result.baseline.arm}: {result.verdict_text}; ΔP "
                f"{fmt.format_delta_p(result.delta_p)}{interval}; {result.n_pairs} seed pairs, "
                f"{fmt.format_count(result.win.n_docs)} documents")

    def summary(self) -> str:
        return self.comparison.summary()

    def to_dict(self) -> dict:
        return {**self.comparison.to_dict(), **self._skipped()}

    def to_frame(self) -> pd.DataFrame:
        result = self.comparison
        fit = result.seed_document
        nan = float("nan")
        return pd.DataFrame([{
            "baseline_arm": result.baseline.arm, "variant_arm": result.variant.arm, "eval_set": self.paired.eval_set,
            "verdict": result.verdict_text, "delta_p": result.delta_p,
            "delta_p_low": nan if fit is None else fit.delta_p_interval[0],
            "delta_p_high": nan if fit is None else fit.delta_p_interval[1],
            "nll_diff_mean": result.nll_diff_mean,
            "nll_diff_low": nan if fit is None else fit.confidence_interval.low,
            "nll_diff_high": nan if fit is None else fit.confidence_interval.high,
            "p_value": nan if result.verdict is None else result.verdict.p_value,
            "nll_diff_models_fixed_low": result.nll_diff_ci.low, "nll_diff_models_fixed_high": result.nll_diff_ci.high,
            "baseline_ppl_mean": result.baseline.ppl_mean, "variant_ppl_mean": result.variant.ppl_mean,
            "improved_pairs": result.improved_pairs, "n_pairs": result.n_pairs, "n_docs": result.win.n_docs,
            "win_rate": result.win.win_rate, "unit": result.unit}])

    def tables(self) -> list[Table]:
        result, reference = self.comparison, self.comparison.baseline.arm
        fit, level = result.seed_document, result.bootstrap.confidence_level
        verdicts = verdict_row(result.variant.arm, result.verdict_text, result.delta_p,
                               None if fit is None else fit.delta_p_interval, result.n_pairs, result.unit)
        sesoi = None if result.verdict is None else result.verdict.sesoi
        return [verdicts_table(reference, level, sesoi, (RowGroup(None, (verdicts,)),), (result.verdict_explanation,)),
                comparison_table("comparison", fmt.eval_set_name(self.paired.eval_set), reference, level,
                                 result.bootstrap.n_resamples, result.bootstrap.rng_seed,
                                 (RowGroup(None, (comparison_row(result.variant.arm, result, result.verdict_text),)),))]

    def plot(self) -> alt.VConcatChart:
        """The report's figures of this comparison: per-document differences and per-seed paired PPL."""
        result = self.comparison
        label = f"{result.variant.arm} vs {result.baseline.arm}"
        return _charts(fmt.eval_set_name(self.paired.eval_set), [(label, self.paired, result.baseline, result.variant)])


@dataclass(frozen=True, repr=False)
class AnalysisResult(Result):
    """`gv.analyze`: everything about one pair of arms (`gatedv analyze`)."""

    analysis: PairAnalysis
    paired: PairedLosses
    skipped: tuple[SkippedFile, ...] | None = None

    def __getattr__(self, name: str) -> Any:
        return _forward(self.analysis, name)

    @property
    def comparison_result(self) -> ComparisonResult:
        """The comparison inside the analysis, as `gv.compare` returns it."""
        return ComparisonResult(self.analysis.comparison, self.paired, self.skipped)

    def headline(self) -> str:
        return self.comparison_result.headline()

    def summary(self) -> str:
        return self.analysis.summary()

    def to_dict(self) -> dict:
        return {**self.analysis.to_dict(), **self._skipped()}

    def to_frame(self) -> pd.DataFrame:
        analysis, nan = self.analysis, float("nan")
        seed_level = analysis.seed_level
        return self.comparison_result.to_frame().assign(
            permutation_p_value=analysis.permutation.p_value,
            bca_low=nan if analysis.bca_interval is None else analysis.bca_interval.low,
            bca_high=nan if analysis.bca_interval is None else analysis.bca_interval.high,
            t_p_value=nan if seed_level is None else seed_level.t_interval.p_value)

    def tables(self) -> list[Table]:
        return self.comparison_result.tables()

    def plot(self) -> alt.VConcatChart:
        """The report's figures of this comparison (see `ComparisonResult.plot`)."""
        return self.comparison_result.plot()


@dataclass(frozen=True, repr=False)
class ArmsResult(Result):
    """`gv.arms`: every arm against a reference, with Holm and BH adjusted p-values (`gatedv arms`)."""

    arms: ArmsComparison
    pairs: tuple[PairedLosses, ...]
    skipped: tuple[SkippedFile, ...] | None = None

    def __getattr__(self, name: str) -> Any:
        return _forward(self.arms, name)

    def headline(self) -> str:
        decided: dict[str, list[str]] = {}
        for arm in self.arms.arms:
            decided.setdefault(arm.verdict, []).append(arm.arm if arm.eval_set is None else
                                                       f"{arm.arm} ({arm.eval_set})")
        verdicts = "; ".join(f"{verdict}: {', '.join(names)}" for verdict, names in decided.items())
        return f"{len(self.arms.arms)} comparisons with {self.arms.reference}, Holm-adjusted: {verdicts}"

    def summary(self) -> str:
        return self.arms.summary()

    def to_dict(self) -> dict:
        return {**self.arms.to_dict(),
                "inputs": [{"arm": pair.variant_arm, "eval_set": pair.eval_set, **pair.sources} for pair in self.pairs],
                **self._skipped()}

    def to_frame(self) -> pd.DataFrame:
        return self.arms.to_frame()

    def tables(self) -> list[Table]:
        groups = []
        for eval_set in dict.fromkeys(arm.eval_set for arm in self.arms.arms):
            rows = tuple(verdict_row(arm.arm, arm.verdict, arm.delta_p,
                                     None if arm.delta_p_seed_document_ci is None else
                                     (arm.delta_p_seed_document_ci[0], arm.delta_p_seed_document_ci[1]),
                                     arm.n_pairs, arm.unit)
                         for arm in self.arms.arms if arm.eval_set == eval_set)
            groups.append(RowGroup(fmt.eval_set_name(eval_set), rows))
        return [verdicts_table(self.arms.reference, 1.0 - self.arms.alpha, self.arms.sesoi, tuple(groups),
                               adjusted=len(self.arms.arms) > 1)]

    def plot(self) -> alt.VConcatChart:
        """The report's figures of every comparison: per-document differences and per-seed paired PPL."""
        def summary(arm: str, paired: PairedLosses, losses: np.ndarray) -> ArmSummary:
            return arm_summary(arm, paired.seeds, losses, paired.n_units)

        compared = [(f"{pair.variant_arm} vs {pair.baseline_arm}" + ("" if pair.eval_set is None else
                                                                    f", {pair.eval_set}"), pair,
                     summary(pair.baseline_arm, pair, pair.baseline), summary(pair.variant_arm, pair, pair.variant))
                    for pair in self.pairs]
        sets = {pair.eval_set for pair in self.pairs}
        return _charts(fmt.eval_set_name(sets.pop()) if len(sets) == 1 else "every evaluation set", compared)


@dataclass(frozen=True, repr=False)
class PlanResult(Result):
    """`gv.plan`: seeds and documents needed to detect a relative ΔP, from pilot runs (`gatedv plan`)."""

    plan: StudyPlan
    paired: PairedLosses
    skipped: tuple[SkippedFile, ...] | None = None

    def __getattr__(self, name: str) -> Any:
        return _forward(self.plan, name)

    def headline(self) -> str:
        plan = self.plan
        return (f"{self.paired.variant_arm} vs {self.paired.baseline_arm}: {plan.seeds_required} seed pairs to detect "
                f"ΔP {fmt.format_delta_p(plan.effect)} with power {plan.power:g} at α = {plan.alpha:g} (pilot "
                f"{plan.n_seeds} seeds × {fmt.format_count(plan.n_docs)} documents)")

    def summary(self) -> str:
        return f"{self.paired.variant_arm} vs {self.paired.baseline_arm}\n{self.plan.summary()}"

    def to_dict(self) -> dict:
        return {**self.plan.to_dict(), "baseline_arm": self.paired.baseline_arm,
                "variant_arm": self.paired.variant_arm, "inputs": self.paired.sources, **self._skipped()}

    def _quantities(self) -> dict[str, Any]:
        return {key: value for key, value in self.plan.to_dict().items() if not isinstance(value, dict)}

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([{"baseline_arm": self.paired.baseline_arm, "variant_arm": self.paired.variant_arm,
                              **self._quantities()}])

    def tables(self) -> list[Table]:
        rows = tuple(row(key, "—" if value is None else f"{value:g}" if isinstance(value, float) else str(value))
                     for key, value in self._quantities().items())
        return [Table("plan", f"Plan for {self.paired.variant_arm} vs {self.paired.baseline_arm} from the pilot runs.",
                      ("Quantity", "Value"), "lr", (RowGroup(None, rows),))]


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
