"""Checks of the arguments every statistic shares, in one place and with one vocabulary.

Each check returns the value (converted where that is safe) or raises `ParameterError` naming the argument,
which the command line reports under its own flag name.
"""

from __future__ import annotations

import functools
import numbers
import warnings
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from gatedv_stats.core.errors import ParameterError


def check_confidence_level(confidence_level: float) -> float:
    """A confidence level strictly between 0 and 1."""
    return check_open_unit("confidence_level", confidence_level)


def check_open_unit(parameter: str, value: float) -> float:
    """A probability strictly between 0 and 1 (a level, α, a power)."""
    if not isinstance(value, numbers.Real) or not 0.0 < float(value) < 1.0:
        raise ParameterError(parameter, f"must lie strictly between 0 and 1 (got {value})")
    return float(value)


MAX_RESAMPLES = 10_000_000  # beyond, a resampled interval or p-value resolves nothing more and runs for hours


def check_n_resamples(n_resamples: int, minimum: int = 2, parameter: str = "n_resamples") -> int:
    """A number of resamples (bootstrap draws, Monte Carlo sign vectors): a percentile interval needs at least
    two, and more than `MAX_RESAMPLES` is refused."""
    value = check_at_least(parameter, n_resamples, minimum)
    if value > MAX_RESAMPLES:
        raise ParameterError(parameter, f"must be at most {MAX_RESAMPLES:,} (got {value:,})")
    return value


def check_at_least(parameter: str, value: int, minimum: int) -> int:
    """An integer no smaller than `minimum`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ParameterError(parameter, f"must be at least {minimum} (got {value})")
    return int(value)


MAX_SEED = 2**63 - 1  # seeds are stored as int64 in every output


def check_seed(seed: int, parameter: str) -> int:
    """A seed (a training seed, a resampling RNG's `rng_seed`, a `selection_seed`): an integer in 0..2**63 − 1, so
    that every output can record it exactly (int64). `parameter` names it in the error."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed <= MAX_SEED:
        raise ParameterError(parameter, f"must be an integer from 0 to {MAX_SEED} (got {seed})")
    return int(seed)


_P = ParamSpec("_P")
_R = TypeVar("_R")


def renamed_keyword(old: str, new: str) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Accept the keyword `old` as a deprecated alias of `new` for one release: it warns (DeprecationWarning naming
    `new`) and is passed on as `new`; giving both is a ParameterError naming `new`."""
    def decorate(function: Callable[_P, _R]) -> Callable[_P, _R]:
        @functools.wraps(function)
        def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            if old in kwargs:
                if new in kwargs:
                    raise ParameterError(new, f"give {{{new}}} or its deprecated name {old}, not both", leading=False)
                warnings.warn(f"{function.__name__}: the keyword {old} is deprecated; use {new}", DeprecationWarning,
                              stacklevel=2)
                kwargs[new] = kwargs.pop(old)
            return function(*args, **kwargs)
        return wrapper
    return decorate
