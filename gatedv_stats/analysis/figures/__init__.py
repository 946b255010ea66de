"""The figures a scale has beside the verdict (`Scale.figures` names them): the paper's perplexity figures of loss
files, or the per-seed means, item wins and tests of a score (a downstream task's metric, any per-unit score).

Each kind is one class, made from a pair (`of`): D as its figures compute it (`estimate`), the comparison's JSON,
text, warnings and table columns; `perplexity_arms` and `score_arms` make their rows of a many-arms comparison."""

from __future__ import annotations

from typing import Any

from gatedv_stats.analysis.figures.perplexity import PerplexityFigures
from gatedv_stats.analysis.figures.scores import ScoreFigures

FIGURES: dict[str, Any] = {"perplexity": PerplexityFigures, "scores": ScoreFigures}
