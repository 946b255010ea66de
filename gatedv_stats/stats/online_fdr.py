"""Online control of false keeps over a stream of candidates: a thin adapter over the `online-fdr` package.

Each candidate brings one p-value (H0: it is not better) and the procedure gives it a test level α_t that depends
only on the p-values before it; the candidate is kept when p ≤ α_t. Whatever the length of the stream:

* `addis` (the default): ADDIS (Tian & Ramdas 2019), adaptive and discarding: a p-value above τ (most worse
  candidates) is discarded and costs no wealth, and the share of nulls is estimated from the p-values above λ.
  Controls the FDR when the null p-values are independent of each other and of the non-nulls.
* `lord++`: LORD++ (Javanmard & Montanari 2018; Ramdas et al. 2017), every test costs its level. FDR under the
  same independence.
* `saffron`: SAFFRON (Ramdas et al. 2018), adaptive to the share of nulls (p-values above λ pay). FDR under the same
  independence.
* `alpha-spending`: online Bonferroni, α_t = α·γ_t with Σγ_t ≤ 1: the family-wise error rate stays at most α ("every
  keep must be right") under any dependence between the tests — the choice for tests that share an evaluation set
  and a reference run, whose p-values are dependent.

The defaults are R onlineFDR's (its reference documentation; the `online-fdr` package reproduces its published
outputs, checked in tests/stats/test_online_fdr.py): ADDIS W0 = α/2, λ = 0.25, τ = 0.5 and SAFFRON W0 = α/2, λ = 0.5,
both with γ_j = 0.4374901658 / j^1.6; LORD++ W0 = α/10 and alpha-spending with Javanmard & Montanari's (2018)
equation 31, γ_j = 0.07720838 log(max(j, 2)) / (j exp(√(log j))).

The wealth after a test is what the procedure may still spend before its estimate of the false discovery proportion
exceeds α: W0 plus the rewards of the keeps (α − W0 for the first, α for each later one) minus the cost of every test
so far (its level for LORD++; its level / (1 − λ) when p > λ for SAFFRON; its level / (τ − λ) when λ < p ≤ τ for
ADDIS). For alpha-spending it is α minus the levels spent. It never falls below 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from online_fdr.core.abstract.abstract_sequential_test import AbstractSequentialTest
from online_fdr.core.abstract.abstract_spend_func import AbstractSpendFunc
from online_fdr.core.utils.sequence import DefaultLordGammaSequence
from online_fdr.p_values import Addis, AlphaSpending, LordPlusPlus, Saffron

from gatedv_stats.core.defaults import DEFAULTS
from gatedv_stats.core.errors import ParameterError
from gatedv_stats.core.validation import check_open_unit

PROCEDURES = ("addis", "lord++", "saffron", "alpha-spending")
DEFAULT_PROCEDURE = "addis"
NAMES = {"addis": "ADDIS", "lord++": "LORD++", "saffron": "SAFFRON", "alpha-spending": "alpha-spending"}
# The γ sequences, as the package computes them (R onlineFDR's defaults).
POWER_GAMMA = "γ_j = 0.4374901658 / j^1.6"
LORD_GAMMA = "γ_j = 0.07720838 log(max(j, 2)) / (j exp(sqrt(log j)))"
_LORD_C = 0.07720838
# Each procedure's defaults: W0 = α / w0_divisor, λ, τ and the γ sequence.
_DEFAULTS: dict[str, tuple[float, float | None, float | None, str]] = {
    "addis": (2.0, 0.25, 0.5, POWER_GAMMA), "saffron": (2.0, 0.5, None, POWER_GAMMA),
    "lord++": (10.0, None, None, LORD_GAMMA), "alpha-spending": (1.0, None, None, LORD_GAMMA)}


@dataclass(frozen=True)
class OnlineProcedure:
    """An online procedure and its parameters, fixed for a whole stream."""

    procedure: str  # one of PROCEDURES
    alpha: float  # the FDR level (the FWER level of alpha-spending)
    w0: float  # the initial wealth (alpha-spending: α, spent and never earned back)
    lambda_: float | None  # the candidate threshold of SAFFRON and ADDIS: only p ≤ λ can be kept
    tau: float | None  # ADDIS's selection threshold: p > τ is discarded
    gamma: str  # the γ sequence

    @property
    def error_rate(self) -> str:
        """"FWER" for alpha-spending, else "FDR"."""
        return "FWER" if self.procedure == "alpha-spending" else "FDR"

    def describe(self) -> str:
        """"ADDIS at FDR ≤ 0.05 (W0 = 0.025, λ = 0.25, τ = 0.5; γ_j = …)"."""
        parts = [] if self.procedure == "alpha-spending" else [f"W0 = {self.w0:g}"]
        parts += [f"{name} = {value:g}" for name, value in (("λ", self.lambda_), ("τ", self.tau)) if value is not None]
        settings = ", ".join(parts)
        return (f"{NAMES[self.procedure]} at {self.error_rate} ≤ {self.alpha:g} ({settings}{'; ' if settings else ''}"
                f"{self.gamma})")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> OnlineProcedure:
        """A procedure as `to_dict` wrote it (its parameters kept as they were, whatever today's defaults)."""
        chosen = online_procedure(data["procedure"], data["alpha"])
        return cls(**{**asdict(chosen), **{key: data[key] for key in ("w0", "lambda_", "tau", "gamma")}})

    def method(self) -> AbstractSequentialTest:
        """A fresh `online-fdr` object of this procedure."""
        if self.procedure == "addis":
            return Addis(alpha=self.alpha, wealth=self.w0, lambda_=_given(self.lambda_), tau=_given(self.tau))
        if self.procedure == "saffron":
            return Saffron(alpha=self.alpha, wealth=self.w0, lambda_=_given(self.lambda_))
        if self.procedure == "lord++":
            return LordPlusPlus(alpha=self.alpha, wealth=self.w0)
        return AlphaSpending(alpha=self.alpha, spend_func=_LordSpending())

    def cost(self, level: float, p_value: float) -> float:
        """The wealth a test at `level` with this p-value uses."""
        if self.procedure == "saffron":
            return level / (1.0 - _given(self.lambda_)) if p_value > _given(self.lambda_) else 0.0
        if self.procedure == "addis":
            lambda_, tau = _given(self.lambda_), _given(self.tau)
            return level / (tau - lambda_) if lambda_ < p_value <= tau else 0.0
        return level


def online_procedure(procedure: str = DEFAULT_PROCEDURE, alpha: float = DEFAULTS.alpha) -> OnlineProcedure:
    """A procedure with R onlineFDR's default parameters at level `alpha`."""
    alpha = check_open_unit("alpha", alpha)
    if procedure not in PROCEDURES:
        raise ParameterError("procedure", f"{procedure!r}: expected one of {', '.join(PROCEDURES)}")
    w0_divisor, lambda_, tau, gamma = _DEFAULTS[procedure]
    return OnlineProcedure(procedure, alpha, alpha / w0_divisor, lambda_, tau, gamma)


@dataclass(frozen=True)
class OnlineDecision:
    """One test of the stream."""

    level: float  # α_t, the level the procedure gave this test
    keep: bool  # p ≤ α_t
    wealth: float  # the wealth left after it


def online_decisions(p_values: Iterable[float], procedure: OnlineProcedure) -> tuple[OnlineDecision, ...]:
    """The level, the decision and the wealth left of every test of a stream, in order."""
    method = procedure.method()
    wealth, kept = procedure.w0, False
    decisions = []
    for p_value in p_values:
        p_value = float(p_value)
        if not (math.isfinite(p_value) and 0.0 <= p_value <= 1.0):
            raise ParameterError("p_values", f"a p-value must lie in [0, 1], got {p_value}")
        keep = bool(method.test_one(p_value))
        level = float(method.last_test_level or 0.0)
        wealth -= procedure.cost(level, p_value)
        if keep and procedure.procedure != "alpha-spending":  # a keep earns wealth back, except alpha-spending's
            wealth += procedure.alpha if kept else procedure.alpha - procedure.w0
            kept = True
        decisions.append(OnlineDecision(level, keep, wealth))
    return tuple(decisions)


class _LordSpending(AbstractSpendFunc):
    """α·γ_j with Javanmard & Montanari's (2018) equation 31 over an unbounded stream, as R onlineFDR's
    Alpha_spending (the package's own `LordThree` spending function needs the stream's length in advance)."""

    def __init__(self) -> None:
        super().__init__(None)
        self._gamma = DefaultLordGammaSequence(c=_LORD_C)

    def spend(self, index: int, alpha: float) -> float:
        return alpha * self._gamma.calc_gamma(index + 1)


def _given(value: float | None) -> float:
    assert value is not None  # a parameter every procedure that reads it has
    return value
