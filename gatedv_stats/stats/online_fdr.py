"""Online control of false keeps over a stream of candidates: a thin adapter over the `online-fdr` package.

Each candidate brings one p-value (H0: it is not better; an e-value for e-LOND) and the procedure gives it a test
level α_t that depends only on the tests finished before it started; the candidate is kept when p ≤ α_t (e ≥ 1/α_t).
LOND (the default, in the form max(D, 1)·β_t) controls the FDR under positive regression dependence, e-LOND under
any dependence, ADDIS, LORD++ and SAFFRON for independent null p-values, and alpha-spending (online Bonferroni) the
family-wise error rate under any dependence; every procedure with R onlineFDR's defaults.

Tests that overlap (candidates decided in parallel) are asynchronous (Zrnic, Ramdas & Jordan 2021): a test's level is
fixed when it starts, by the synchronous procedure replayed over the tests before it, each still running counted as
the costliest value that keeps nothing (`OnlineProcedure.running_value`). The wealth after a test is what the
procedure may still spend before its estimate of the false discovery proportion exceeds α, never below 0. The
procedures, their parameters, the asynchronous levels and the wealth are in docs/research-ledger.md.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from online_fdr.core.abstract.abstract_sequential_test import AbstractSequentialTest
from online_fdr.core.abstract.abstract_spend_func import AbstractSpendFunc
from online_fdr.core.utils.sequence import DefaultLordGammaSequence
from online_fdr.e_values.sequential import ELond
from online_fdr.p_values import Addis, AlphaSpending, Lond, LordPlusPlus, Saffron

from gatedv_stats.core.defaults import DEFAULTS
from gatedv_stats.core.errors import ParameterError
from gatedv_stats.core.validation import check_open_unit

PROCEDURES = ("lond", "e-lond", "addis", "lord++", "saffron", "alpha-spending")
DEFAULT_PROCEDURE = "lond"
NAMES = {"lond": "LOND", "e-lond": "e-LOND", "addis": "ADDIS", "lord++": "LORD++", "saffron": "SAFFRON",
         "alpha-spending": "alpha-spending"}
# What each procedure's guarantee assumes of the tests' dependence.
ASSUMES = {"lond": "positive regression dependence (PRDS)", "e-lond": "nothing (any dependence)",
           "addis": "independence", "lord++": "independence", "saffron": "independence",
           "alpha-spending": "nothing (any dependence)"}
INDEPENDENCE = tuple(name for name, assumption in ASSUMES.items() if assumption == "independence")
# The γ sequences, as the package computes them (R onlineFDR's defaults).
POWER_GAMMA = "γ_j = 0.4374901658 / j^1.6"
LORD_GAMMA = "γ_j = 0.07720838 log(max(j, 2)) / (j exp(sqrt(log j)))"
_LORD_C = 0.07720838
# Each procedure's defaults: W0 = α / w0_divisor (None: no wealth), λ, τ and the γ sequence.
_DEFAULTS: dict[str, tuple[float | None, float | None, float | None, str]] = {
    "lond": (None, None, None, LORD_GAMMA), "e-lond": (None, None, None, LORD_GAMMA),
    "addis": (2.0, 0.25, 0.5, POWER_GAMMA), "saffron": (2.0, 0.5, None, POWER_GAMMA),
    "lord++": (10.0, None, None, LORD_GAMMA), "alpha-spending": (1.0, None, None, LORD_GAMMA)}


@dataclass(frozen=True)
class OnlineProcedure:
    """An online procedure and its parameters, fixed for a whole stream."""

    procedure: str  # one of PROCEDURES
    alpha: float  # the FDR level (the FWER level of alpha-spending)
    w0: float  # the initial wealth (alpha-spending, LOND, e-LOND: α, spent by the γ sequence and never earned back)
    lambda_: float | None  # the candidate threshold of SAFFRON and ADDIS: only p ≤ λ can be kept
    tau: float | None  # ADDIS's selection threshold: p > τ is discarded
    gamma: str  # the γ sequence

    @property
    def error_rate(self) -> str:
        """"FWER" for alpha-spending, else "FDR"."""
        return "FWER" if self.procedure == "alpha-spending" else "FDR"

    @property
    def e_values(self) -> bool:
        """The procedure tests e-values (e-LOND), not p-values."""
        return self.procedure == "e-lond"

    @property
    def assumes_independence(self) -> bool:
        """The guarantee needs independent null tests (ADDIS, SAFFRON, LORD++)."""
        return self.procedure in INDEPENDENCE

    @property
    def earns(self) -> bool:
        """A keep earns wealth back (alpha-investing: ADDIS, SAFFRON, LORD++); LOND, e-LOND and alpha-spending spend
        the γ sequence."""
        return _DEFAULTS[self.procedure][0] not in (None, 1.0)

    def describe(self) -> str:
        """"ADDIS at FDR ≤ 0.05 (W0 = 0.025, λ = 0.25, τ = 0.5; γ_j = …)"."""
        parts = [f"W0 = {self.w0:g}"] if self.earns else []
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
        if self.procedure == "lond":  # max(D, 1)·β_t: the form whose FDR control under PRDS is proven
            return Lond(alpha=self.alpha, original=False)
        if self.procedure == "e-lond":
            return ELond(alpha=self.alpha)
        if self.procedure == "addis":
            return Addis(alpha=self.alpha, wealth=self.w0, lambda_=_given(self.lambda_), tau=_given(self.tau))
        if self.procedure == "saffron":
            return Saffron(alpha=self.alpha, wealth=self.w0, lambda_=_given(self.lambda_))
        if self.procedure == "lord++":
            return LordPlusPlus(alpha=self.alpha, wealth=self.w0)
        return AlphaSpending(alpha=self.alpha, spend_func=_LordSpending())

    @property
    def running_value(self) -> float:
        """What a test still running counts as: the costliest value that keeps nothing."""
        return 0.0 if self.e_values else _given(self.tau) if self.procedure == "addis" else 1.0

    def keeps(self, value: float, level: float) -> bool:
        """p ≤ level, or for e-values e ≥ 1/level."""
        return value * level >= 1.0 if self.e_values else value <= level

    def cost(self, level: float, p_value: float) -> float:
        """The wealth a test at `level` with this p-value uses (LOND, e-LOND, alpha-spending: its β_t, not its
        level)."""
        if self.lambda_ is None:  # no candidate threshold: every test costs its level
            return level
        tau = 1.0 if self.tau is None else self.tau  # SAFFRON discards nothing: every p > λ costs
        return level / (tau - self.lambda_) if self.lambda_ < p_value <= tau else 0.0


def online_procedure(procedure: str = DEFAULT_PROCEDURE, alpha: float = DEFAULTS.alpha) -> OnlineProcedure:
    """A procedure with R onlineFDR's default parameters at level `alpha`."""
    alpha = check_open_unit("alpha", alpha)
    if procedure not in PROCEDURES:
        raise ParameterError("procedure", f"{procedure!r}: expected one of {', '.join(PROCEDURES)}")
    w0_divisor, lambda_, tau, gamma = _DEFAULTS[procedure]
    return OnlineProcedure(procedure, alpha, alpha / (w0_divisor or 1.0), lambda_, tau, gamma)


@dataclass(frozen=True)
class OnlineDecision:
    """One test of the stream."""

    level: float  # α_t, the level the procedure gave this test when it started
    keep: bool | None  # p ≤ α_t (e ≥ 1/α_t); None while the test runs
    wealth: float  # the wealth left after it


def online_decisions(values: Iterable[float | None], procedure: OnlineProcedure,
                     running: Sequence[Iterable[int]] | None = None) -> tuple[OnlineDecision, ...]:
    """The level, the decision and the wealth left of every test of a stream, in the order the tests started.

    `values`: each test's p-value (e-value for e-LOND), None for a test still running. `running`: for each test, the
    earlier tests (0-based) that were still running when it started (None: none ever overlapped)."""
    tests = [_checked_value(value, procedure) for value in values]
    overlaps = [frozenset(())] * len(tests) if running is None else [frozenset(earlier) for earlier in running]
    if len(overlaps) != len(tests) or any(not all(0 <= u < t for u in earlier) for t, earlier in enumerate(overlaps)):
        raise ParameterError("running", "one set of earlier tests per test")
    levels: list[float] = []
    keeps: list[bool | None] = []
    method = procedure.method()
    first_overlap = next((t for t, earlier in enumerate(overlaps) if earlier), len(tests))
    for t, value in enumerate(tests):
        if t >= first_overlap:  # from the first overlap on, each start replays the procedure over what it knew
            method = _replayed(tests[:t], keeps, overlaps, procedure)
        decided = method.test_one(procedure.running_value if value is None else value)
        levels.append(float(method.last_test_level or 0.0))
        keeps.append(None if value is None else bool(decided))
    return tuple(OnlineDecision(level, keep, wealth)
                 for level, keep, wealth in zip(levels, keeps, _wealth(tests, levels, keeps, procedure)))


class OnlineStream:
    """A synchronous stream tested one test at a time: the level of the next test before its value is seen, then
    its decision (what a loop that designs each test at its level needs)."""

    def __init__(self, procedure: OnlineProcedure) -> None:
        self.procedure = procedure
        self._method = procedure.method()

    def level(self) -> float:
        """The level the next test gets (the procedure sets it before it sees the value)."""
        probe = copy.deepcopy(self._method)
        probe.test_one(self.procedure.running_value)
        return float(probe.last_test_level or 0.0)

    def test(self, value: float) -> bool:
        """The next test: keep (p ≤ level, e ≥ 1/level) or not."""
        return bool(self._method.test_one(value))


def next_level(values: Sequence[float | None], procedure: OnlineProcedure,
               running: Sequence[Iterable[int]] | None = None) -> float:
    """The level a test starting now would get, after the tests of `values` (None: still running)."""
    earlier = [set(item) for item in running] if running is not None else [set() for _ in values]
    now = {t for t, value in enumerate(values) if value is None}
    return online_decisions([*values, None], procedure, [*earlier, now])[-1].level


def _checked_value(value: float | None, procedure: OnlineProcedure) -> float | None:
    if value is None:
        return None
    value = float(value)
    if procedure.e_values and not value >= 0.0:  # NaN too
        raise ParameterError("values", f"an e-value must be non-negative, got {value}")
    if not procedure.e_values and not 0.0 <= value <= 1.0:  # NaN too
        raise ParameterError("p_values", f"a p-value must lie in [0, 1], got {value}")
    return value


def _replayed(earlier: list[float | None], keeps: list[bool | None], overlaps: list[frozenset[int]],
              procedure: OnlineProcedure) -> AbstractSequentialTest:
    """The procedure fed the tests before one that starts now (the last of `overlaps`' tests so far + 1): each test
    still running then as the costliest non-keep, each finished one with the decision it got at the level fixed at
    its own start. A replay can give a test that started while others ran a higher level than it had (they have
    finished since): it is then fed the value nearest that level on the side of its own decision, so that keeps,
    candidates and selections stay as they were."""
    running = overlaps[len(earlier)] | {u for u, value in enumerate(earlier) if value is None}
    method = procedure.method()
    for u, value in enumerate(earlier):
        if u in running or value is None:
            value = procedure.running_value
        elif overlaps[u] and not keeps[u]:
            probe = copy.deepcopy(method)  # the level the replay gives u, which it sets before it sees the value
            probe.test_one(procedure.running_value)
            level = float(probe.last_test_level or 0.0)
            if procedure.keeps(value, level):
                value = math.nextafter(1.0 / level, 0.0) if procedure.e_values else math.nextafter(level, math.inf)
        method.test_one(value)
    return method


def _wealth(tests: list[float | None], levels: list[float], keeps: list[bool | None],
            procedure: OnlineProcedure) -> list[float]:
    """The wealth left after each test (docs/research-ledger.md, "Wealth")."""
    wealth, kept, out = procedure.w0, False, []
    gamma = DefaultLordGammaSequence(c=_LORD_C)
    for t, (value, level, keep) in enumerate(zip(tests, levels, keeps), start=1):
        if not procedure.earns:
            wealth -= procedure.alpha * gamma.calc_gamma(t)
        else:
            wealth -= procedure.cost(level, procedure.running_value if value is None else value)
            if keep:  # a keep earns wealth back
                wealth += procedure.alpha if kept else procedure.alpha - procedure.w0
                kept = True
        out.append(max(wealth, 0.0))
    return out


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
