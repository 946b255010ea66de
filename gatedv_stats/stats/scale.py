"""How a paired difference is read: the log-ratio scale of perplexity or the absolute scale of a task metric.

Every comparison works on D, the weighted mean over seed pairs and units of variant − baseline. On the perplexity
scale the units are documents weighted by their targets (or bytes), D is a difference of mean log-losses, so
log(1 + ΔP) ≈ D, lower is better and a smallest effect of interest is a relative ΔP (0.01 = 1%). On a metric's
absolute scale the units are items weighted equally, D is a difference of mean scores in the metric's units
(0.01 = one point of accuracy) and the metric says which way is better. The verdict, the many-arms adjustment and
the plan read D through the scale; nothing else about them differs between the two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gatedv_stats.core import formatting as fmt
from gatedv_stats.core.errors import ParameterError
from gatedv_stats.core.validation import check_open_unit


@dataclass(frozen=True)
class Scale:
    """The reading of a difference: the metric, which way is better and whether D is a log ratio."""

    metric: str = "loss"
    higher_is_better: bool = False
    log_ratio: bool = True  # D is a difference of log-losses: ΔP = exp(D) − 1, a SESOI is a relative ΔP
    proportion: bool = False  # scores lie in [0, 1] (accuracy): differences are shown in points

    def direction(self, difference: float) -> str:
        """"better" when a difference of this sign favours the variant, else "worse"."""
        return "better" if (difference > 0.0) == self.higher_is_better else "worse"

    def check_sesoi(self, sesoi: float) -> float:
        """A smallest effect of interest on this scale: a relative ΔP in (0, 1), or a positive difference."""
        if self.log_ratio:
            return check_open_unit("sesoi", sesoi)
        if not (isinstance(sesoi, (int, float)) and math.isfinite(sesoi) and sesoi > 0.0):
            raise ParameterError("sesoi", f"a smallest effect of interest must be a positive difference in the "
                                 f"metric's units (0.01 = one point of accuracy), got {sesoi}")
        return float(sesoi)

    def equivalence_bounds(self, sesoi: float) -> tuple[float, float]:
        """The equivalence region of the two one-sided tests, on the scale the tests are run on."""
        return (math.log1p(-sesoi), math.log1p(sesoi)) if self.log_ratio else (-sesoi, sesoi)

    def format_sesoi(self, sesoi: float) -> str:
        """"±1.00%" (relative) or "±1.00 points" (a proportion's difference)."""
        if self.log_ratio:
            return f"±{fmt.format_percent(sesoi, 2)}"
        return f"±{fmt.format_difference(sesoi, self.proportion, signed=False)}"

    @property
    def quantity(self) -> str:
        """What a SESOI bounds, after "within ±X": "in PPL", "of acc"."""
        return "in PPL" if self.log_ratio else f"of {self.metric}"

    def format_interval(self, interval: tuple[float, float]) -> str:
        """An interval of D as the scale prints it."""
        if self.log_ratio:
            return fmt.format_interval(*interval)
        return fmt.format_difference_interval(interval, self.proportion)

    def format_estimate(self, difference: float) -> str:
        """D as the scale prints an estimate: "ΔP −2.03%" (exp(D) − 1) or "+1.20 points"."""
        if self.log_ratio:
            return f"ΔP {fmt.format_delta_p(math.expm1(difference))}"
        return fmt.format_difference(difference, self.proportion)

    def format_size(self, difference: float, unit: str) -> str:
        """|D| with its unit: "0.020591 nats per token", "0.029705 bits per byte", "1.23 points"."""
        size = abs(difference)
        if not self.log_ratio:
            return fmt.format_difference(size, self.proportion, signed=False)
        if unit == "byte":
            return f"{size / math.log(2.0):.6f} bits per byte"
        return f"{fmt.format_nll_diff(size)} nats per {unit}"


PERPLEXITY = Scale()


def metric_scale(metric: str, higher_is_better: bool, proportion: bool) -> Scale:
    """The absolute scale of a task metric (`proportion`: its scores lie in [0, 1])."""
    return Scale(metric=metric, higher_is_better=higher_is_better, log_ratio=False, proportion=proportion)
