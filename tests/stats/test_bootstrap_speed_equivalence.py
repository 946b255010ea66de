"""The fast document bootstrap draws its own index stream, not scipy's: it must still be the same bootstrap.

Checked here: every resample is N uniform draws with replacement (per-document counts recovered through the
public function) and the distribution is a loop over those draws, a seed fixes the result whatever the thread
count, the bootstrap SD matches its analytic value, and percentile and BCa intervals agree with
`scipy.stats.bootstrap(paired=True)` within Monte Carlo error.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from scipy.special import ndtri

from gatedv_stats.stats import resampling
from gatedv_stats.stats.resampling import bootstrap_ratio_distribution, document_bootstrap
from helpers import ratio

Z = 4.5  # tolerances below are Z Monte Carlo standard errors: a false alarm has probability below 1e-5


def document_counts(n_docs: int, samples: int, seed: int) -> np.ndarray:
    """(samples, n_docs) times each document was drawn: the draws do not depend on d, so d = e_j reads column j."""
    ones = np.ones(n_docs)
    columns = [bootstrap_ratio_distribution(np.eye(1, n_docs, j)[0], ones, n_resamples=samples, rng_seed=seed) * n_docs
               for j in range(n_docs)]
    return np.rint(columns).astype(np.int64).T


@pytest.fixture(params=[None, 64], ids=["default-blocks", "blocks-of-64"])
def block_size(request, monkeypatch):
    """Default blocks, or blocks of at most 64 documents so that N = 400 exercises the many-block path."""
    if request.param is not None:
        monkeypatch.setattr(resampling, "_BLOCK_SIZE", request.param)
    return request.param


@pytest.mark.parametrize(("n_docs", "largest_block"), [(11, 4), (11, None), (13, 2)])
def test_each_resample_is_n_uniform_draws_with_replacement(monkeypatch, n_docs, largest_block):
    if largest_block is not None:
        monkeypatch.setattr(resampling, "_BLOCK_SIZE", largest_block)
    samples = 20_000
    counts = document_counts(n_docs, samples, seed=3)
    assert np.all(counts.sum(axis=1) == n_docs)
    # every document equally likely over the 220,000+ draws
    assert stats.chisquare(counts.sum(axis=0)).pvalue > 1e-4
    # one document's count in one resample is Binomial(N, 1/N): pooled histogram of counts 0, 1, 2, 3, ≥ 4
    observed = np.bincount(np.minimum(counts.ravel(), 4), minlength=5)
    pmf = stats.binom.pmf(np.arange(4), n_docs, 1 / n_docs)
    expected = np.append(pmf, 1 - pmf.sum()) * counts.size
    assert stats.chisquare(observed, expected).pvalue > 1e-4
    # draws are exchangeable across documents: the counts of two documents correlate as -1/(N - 1)
    correlation = np.corrcoef(counts[:, 0], counts[:, -1])[0, 1]
    assert correlation == pytest.approx(-1 / (n_docs - 1), abs=Z / np.sqrt(samples))


@pytest.mark.parametrize("constant_targets", [False, True])
def test_distribution_equals_a_loop_over_the_same_draws(sample, constant_targets):
    d, n_targets = sample
    if constant_targets:
        n_targets = np.full_like(n_targets, 256.0)
    samples = 60
    ours = bootstrap_ratio_distribution(d, n_targets, n_resamples=samples, rng_seed=5)
    counts = document_counts(d.size, samples, seed=5)
    for b in range(samples):
        index = np.repeat(np.arange(d.size), counts[b])
        numerator = sum(float(d[i]) for i in index)
        denominator = sum(float(n_targets[i]) for i in index)
        assert ours[b] == pytest.approx(numerator / denominator, rel=1e-12)


def test_a_seed_fixes_the_distribution_bit_for_bit_whatever_the_thread_count(sample, monkeypatch):
    d, n_targets = sample
    runs = {}
    for threads in (1, 3):
        monkeypatch.setattr(resampling, "_thread_count", lambda threads=threads: threads)
        runs[threads] = bootstrap_ratio_distribution(d, n_targets, n_resamples=700, rng_seed=9, progress=threads == 3)
    np.testing.assert_array_equal(runs[1], runs[3])
    assert not np.array_equal(runs[1], bootstrap_ratio_distribution(d, n_targets, n_resamples=700, rng_seed=10))


@pytest.mark.parametrize("equal_targets", [True, False])
def test_bootstrap_sd_matches_its_analytic_value(sample, block_size, equal_targets):
    d, n_targets = sample
    if equal_targets:
        n_targets = np.full_like(n_targets, 256.0)
    samples = 4000
    distribution = bootstrap_ratio_distribution(d, n_targets, n_resamples=samples, rng_seed=2)
    statistic = d.sum() / n_targets.sum()
    # Resampling N documents: Var*(Σ d*) = N · plug-in variance of d, exactly, which is the ratio's variance when
    # Σ n* is constant; otherwise the delta method (residuals d - D·n, which sum to zero) is first order in 1/N:
    # on this sample it is within 0.03% of the SD of 10^6 resamples.
    residuals = d - statistic * n_targets
    analytic_sd = np.sqrt(np.sum(residuals ** 2)) / n_targets.sum()
    # an SD from B near-normal draws has relative SE 1/sqrt(2(B - 1)); 0.5% more for the delta method
    allowed = Z / np.sqrt(2 * (samples - 1)) + (0.0 if equal_targets else 0.005)
    assert np.std(distribution, ddof=1) == pytest.approx(analytic_sd, rel=allowed)
    if equal_targets:  # E*(mean of d*) is the sample mean, exactly
        assert abs(distribution.mean() - statistic) < Z * analytic_sd / np.sqrt(samples)


def test_bootstrap_sd_with_many_full_blocks():
    """N = 70,001 > the largest block: every default-size block plus the binary digits of the rest."""
    rng = np.random.default_rng(4)
    d = rng.standard_t(5, size=70_001)
    samples = 1000
    distribution = bootstrap_ratio_distribution(d, np.ones_like(d), n_resamples=samples, rng_seed=1)
    analytic_sd = np.std(d) / np.sqrt(d.size)
    assert np.std(distribution, ddof=1) == pytest.approx(analytic_sd, rel=Z / np.sqrt(2 * (samples - 1)))


def endpoint_tolerance(levels: tuple[float, float], sd: float, samples: int, bca: bool) -> np.ndarray:
    """Allowed |ours - scipy| at each endpoint: Z Monte Carlo SEs of the difference of two independent estimates.

    The p-quantile of B draws has SE sqrt(p(1 - p)/B) / f(q_p), with f the density of the (near-normal)
    bootstrap distribution, φ(z_p)/sd. BCa also estimates z0 = Φ⁻¹(fraction below the statistic) from the
    draws, SE sqrt(1/4B)/φ(0) ≈ 1.25/sqrt(B), and its adjusted level z0 + (z0 + z_α)/(1 - a(z0 + z_α)) moves
    about twice as fast as z0, so the endpoint moves by 2·sd per unit of z0.
    """
    levels = np.asarray(levels)
    z = ndtri(levels)
    quantile_se = np.sqrt(levels * (1 - levels) / samples) / stats.norm.pdf(z) * sd
    z0_se = np.sqrt(0.25 / samples) / stats.norm.pdf(0.0)
    endpoint_se = np.hypot(quantile_se, 2 * sd * z0_se) if bca else quantile_se
    return Z * np.sqrt(2) * endpoint_se


@pytest.mark.parametrize("equal_targets", [True, False])
@pytest.mark.parametrize(("method", "scipy_method"), [("percentile", "percentile"), ("bca", "BCa")])
def test_intervals_agree_with_scipy_within_monte_carlo_error(sample, block_size, equal_targets, method,
                                                             scipy_method):
    d, n_targets = sample
    if equal_targets:
        n_targets = np.full_like(n_targets, 256.0)
    samples, level = 4000, 0.95
    ours = document_bootstrap(d, n_targets, n_resamples=samples, confidence_level=level, rng_seed=6, method=method)
    reference = stats.bootstrap((d, n_targets), ratio, paired=True, vectorized=True, n_resamples=samples,
                                confidence_level=level, method=scipy_method, rng=np.random.default_rng(60))
    sd = reference.standard_error
    assert ours.standard_error == pytest.approx(sd, rel=Z * np.sqrt(2 / (2 * (samples - 1))))
    tolerance = endpoint_tolerance(((1 - level) / 2, (1 + level) / 2), sd, samples, bca=method == "bca")
    difference = np.abs(np.subtract(ours.confidence_interval, tuple(reference.confidence_interval)))
    assert np.all(difference < tolerance), (difference / sd, tolerance / sd)
