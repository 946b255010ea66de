"""The figures a scale has beside the verdict (`Scale.figures` names them): the paper's perplexity figures of loss
files, or the per-seed means, item wins and tests of a score (a downstream task's metric, any per-unit score).

Each kind is one class: made from a pair, its fit and its verdict (`of`), it gives D as its figures compute it
(`estimate`), the comparison's JSON, text, warnings and table columns, and its rows of a many-arms comparison."""

from __future__ import annotations

from typing import Any, Protocol

from gatedv_stats.analysis.figures.perplexity import PerplexityFigures
from gatedv_stats.analysis.figures.scores import ScoreFigures


class Figures(Protocol):
    """What `analysis.compare.Comparison` asks of its scale's figures."""

    @staticmethod
    def estimate(paired: Any) -> float: ...

    def to_dict(self, comparison: Any) -> dict: ...

    def summary(self, comparison: Any) -> str: ...

    def warnings(self, comparison: Any) -> tuple[str, ...]: ...

    def columns(self, comparison: Any) -> dict: ...

    def headline_estimate(self, comparison: Any) -> str: ...


FIGURES: dict[str, Any] = {"perplexity": PerplexityFigures, "scores": ScoreFigures}
