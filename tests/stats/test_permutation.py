"""The sign-flip permutation test against scipy.stats.permutation_test and a brute-force enumeration."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.stats import permutation
from gatedv_stats.stats.permutation import sign_flip_test


def scipy_test(d, n, alternative, n_resamples, seed=0):
    return stats.permutation_test((d,), lambda x, axis: x.sum(axis=axis) / n.sum(), permutation_type="samples",
                                  vectorized=True, n_resamples=n_resamples, alternative=alternative, random_state=seed)


def brute_force_p(d, n, alternative):
    observed = d.sum() / n.sum()
    null = np.array([np.dot(signs, d) / n.sum() for signs in itertools.product((1.0, -1.0), repeat=d.size)])
    tol = 1e-12
    extreme = {"two-sided": np.abs(null) >= abs(observed) - tol, "less": null <= observed + tol,
               "greater": null >= observed - tol}[alternative]
    return extreme.mean()


@pytest.mark.parametrize("alternative", ["two-sided", "less", "greater"])
@pytest.mark.parametrize("n_docs", [2, 6, 13])
def test_exact_p_value_matches_scipy_and_brute_force(alternative, n_docs):
    rng = np.random.default_rng(n_docs)
    d = rng.normal(-3.0, 10.0, n_docs)
    n = rng.integers(50, 300, n_docs)
    result = sign_flip_test(d, n, alternative=alternative)
    assert result.method == "exact" and result.n_permutations == 2 ** n_docs and result.rng_seed is None
    assert result.statistic == pytest.approx(d.sum() / n.sum(), rel=1e-15)
    assert result.p_value == pytest.approx(scipy_test(d, n, alternative, 10 ** 6).pvalue, rel=1e-12)
    assert result.p_value == pytest.approx(brute_force_p(d, n, alternative), rel=1e-12)


def test_exact_enumeration_across_many_chunks_matches_scipy(monkeypatch):
    monkeypatch.setattr(permutation, "_CHUNK_ELEMENTS", 60)  # 5 sign vectors per chunk, the last one partial
    rng = np.random.default_rng(5)
    d = rng.normal(0.5, 2.0, 12)
    n = np.full(12, 256)
    assert sign_flip_test(d, n).p_value == pytest.approx(scipy_test(d, n, "two-sided", 10 ** 6).pvalue, rel=1e-12)


def test_ties_with_the_observed_value_count_as_extreme():
    d = np.array([1.0, 1.0, 1.0, 1.0])  # flipping any subset of equal values gives exact ties
    result = sign_flip_test(d, np.ones(4))
    assert result.p_value == pytest.approx(2 / 16)  # all +, all −
    assert sign_flip_test(np.zeros(5), np.ones(5)).p_value == 1.0


def test_monte_carlo_agrees_with_scipy_within_its_error_and_is_seeded():
    rng = np.random.default_rng(7)
    d = rng.normal(-0.4, 3.0, 60)
    n = rng.integers(100, 257, 60)
    first = sign_flip_test(d, n, n_permutations=20_000, rng_seed=3)
    assert first.method == "monte-carlo" and first.n_permutations == 20_000 and first.rng_seed == 3
    assert first == sign_flip_test(d, n, n_permutations=20_000, rng_seed=3)
    assert first.p_value != sign_flip_test(d, n, n_permutations=20_000, rng_seed=4).p_value
    reference = scipy_test(d, n, "two-sided", 40_000, seed=1).pvalue
    standard_error = np.sqrt(reference * (1 - reference) * (1 / 20_000 + 1 / 40_000))
    assert abs(first.p_value - reference) < 5 * standard_error


def test_monte_carlo_p_value_is_never_zero():
    d = np.full(40, -5.0)  # every sign vector but the observed one is less extreme
    result = sign_flip_test(d, np.ones(40), n_permutations=999, rng_seed=0)
    assert result.p_value == pytest.approx(1 / 1000)


def test_exact_threshold_is_configurable():
    d = np.arange(1.0, 9.0) - 4.0
    n = np.ones(8)
    assert sign_flip_test(d, n, exact_max_docs=5, n_permutations=500).method == "monte-carlo"
    assert sign_flip_test(d, n, exact_max_docs=8).method == "exact"


@pytest.mark.parametrize("kwargs, fragment", [
    ({"differences": [1.0, np.nan], "n_units": [1, 1]}, "finite"),
    ({"differences": [1.0, 2.0], "n_units": [1]}, "equal 1-D shapes"),
    ({"differences": [1.0], "n_units": [1], "alternative": "bigger"}, "alternative"),
    ({"differences": [1.0] * 30, "n_units": [1] * 30, "n_permutations": 0}, "^n_permutations: must be at least 1"),
])
def test_bad_input_is_an_input_error(kwargs, fragment):
    with pytest.raises(InputError, match=fragment):
        sign_flip_test(**kwargs)


def test_n_resamples_is_a_deprecated_alias_of_n_permutations():
    """Sign vectors are counted by `n_permutations`; the old keyword `n_resamples` still works for one release,
    with a DeprecationWarning naming the new one, and giving both is refused."""
    d = np.random.default_rng(11).normal(-0.2, 1.0, 40)
    n = np.full(40, 128)
    with pytest.warns(DeprecationWarning, match="n_resamples is deprecated; use n_permutations"):
        old = sign_flip_test(d, n, n_resamples=300, rng_seed=2)
    assert old == sign_flip_test(d, n, n_permutations=300, rng_seed=2) and old.n_permutations == 300
    with pytest.warns(DeprecationWarning, match="use n_permutations"):
        assert old.n_resamples == 300
    with pytest.raises(ParameterError, match="^give n_permutations or its deprecated name n_resamples, not both$") \
            as refused:
        sign_flip_test(d, n, n_resamples=300, n_permutations=300)
    assert refused.value.parameter == "n_permutations"
    assert refused.value.render(lambda name: "--permutations") == (
        "give --permutations or its deprecated name n_resamples, not both")
