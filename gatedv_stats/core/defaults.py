"""The defaults every statistic shares, in one place: a function's signature names them from here, so that the
command line, the Python API and the report cannot drift apart."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Defaults:
    """What a comparison uses when the user says nothing."""

    confidence_level: float = 0.95  # of every interval; α = 1 − level for the verdicts and their adjustment
    n_resamples: int = 2000  # bootstrap draws (document and two-level bootstraps)
    n_permutations: int = 10_000  # Monte Carlo sign vectors of a permutation test
    rng_seed: int = 0  # of every resampling RNG
    # Level of the pre-test that keeps the document term in Var̂(D): the level Bozivich, Bancroft & Hartley (1956)
    # recommend for "sometimes pool" rules, and the one that keeps the interval calibrated on the grid of
    # bench/pooling_level.py (docs/statistics.md, "Truncation and pooling").
    pooling_level: float = 0.25
    alpha: float = 0.05  # of a plan's test and of the many-arms adjustment
    power: float = 0.8  # of a plan


DEFAULTS = Defaults()
