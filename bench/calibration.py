"""Slow calibration of the reviewer statistics on simulated loss files (the fast version is
tests/stats/test_calibration.py).

Draws many paired studies from `gatedv_stats.testing.PopulationModel` (known population effect; seed
effects, document effects and residuals normal with the stated SDs) and prints, per design:

* coverage of the 95% paired t interval (target: the evaluation-set effect) and of the 95% two-level
  seed × document bootstrap interval (target: the population ΔP), beside the coverage the output states for
  the bootstrap when seed variation dominates;
* the false-positive rate of the sign-flip permutation test at α = 0.05 with no effect (exact and Monte Carlo);
* the time of our sign-flip test against scipy.stats.permutation_test on the same statistic.

Each rate is printed with its 99.9% binomial acceptance region around the rate it should have.

    python bench/calibration.py --replications 2000
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy import stats
from tqdm import tqdm

from gatedv_stats.stats import metrics
from gatedv_stats.stats.permutation import sign_flip_test
from gatedv_stats.stats.seed_level import paired_t_interval, percentile_seed_coverage, two_level_bootstrap
from gatedv_stats.testing import PopulationModel, simulate
from timing import best_of

DESIGNS = {
    # name: (model, seeds, documents)
    "seeds dominate, S=3": (PopulationModel(-0.02, seed_sd=0.02, doc_sd=0.001, residual_sd=0.01), 3, 64),
    "seeds dominate, S=5": (PopulationModel(-0.02, seed_sd=0.02, doc_sd=0.001, residual_sd=0.01), 5, 64),
    "seeds dominate, S=20": (PopulationModel(-0.02, seed_sd=0.02, doc_sd=0.001, residual_sd=0.01), 20, 64),
    "documents dominate, S=3": (PopulationModel(-0.02, seed_sd=0.002, doc_sd=0.05, residual_sd=0.02), 3, 64),
    "documents dominate, S=5": (PopulationModel(-0.02, seed_sd=0.002, doc_sd=0.05, residual_sd=0.02), 5, 64),
    "mixed, S=5": (PopulationModel(-0.02, seed_sd=0.01, doc_sd=0.02, residual_sd=0.05), 5, 64),
}


def region(replications: int, rate: float) -> str:
    low, high = stats.binom.interval(0.999, replications, rate)
    return f"[{low / replications:.3f}, {high / replications:.3f}]"


def coverage(replications: int, samples: int, seed: int) -> None:
    print(f"coverage of 95% intervals ({replications} replications, B = {samples}, seed {seed})")
    print(f"{'design':<26}{'t (eval set)':>14}{'two-level (pop. ΔP)':>22}{'stated for seeds':>18}  region around 0.95")
    rng = np.random.default_rng(seed)
    for name, (model, n_seeds, n_docs) in DESIGNS.items():
        t_hits = boot_hits = 0
        for replication in tqdm(range(replications), desc=name, leave=False):
            study = simulate(model, n_seeds, n_docs, rng)
            r = metrics.token_nll(study.variant, study.n_targets) - metrics.token_nll(study.baseline, study.n_targets)
            t = paired_t_interval(r)
            t_hits += t.confidence_interval.low <= study.eval_set_log_ratio <= t.confidence_interval.high
            boot = two_level_bootstrap(study.baseline, study.variant, study.n_targets, n_resamples=samples,
                                       rng_seed=replication)
            boot_hits += boot.confidence_interval.low <= model.delta_p <= boot.confidence_interval.high
        print(f"{name:<26}{t_hits / replications:>14.3f}{boot_hits / replications:>22.3f}"
              f"{percentile_seed_coverage(n_seeds):>18.3f}  {region(replications, 0.95)}")


def false_positives(replications: int, seed: int) -> None:
    print(f"\nsign-flip test under no effect, α = 0.05 ({replications} replications, seed {seed})")
    model = PopulationModel(0.0, seed_sd=0.0, doc_sd=0.03, residual_sd=0.02)
    rng = np.random.default_rng(seed)
    for label, n_docs, resamples in (("exact, N = 16", 16, 1), ("Monte Carlo, N = 256, 999 vectors", 256, 999)):
        rejections = 0
        for replication in tqdm(range(replications), desc=label, leave=False):
            study = simulate(model, 3, n_docs, rng)
            d = metrics.document_differences(study.baseline, study.variant)
            test = sign_flip_test(d, study.n_targets, n_permutations=resamples, rng_seed=replication)
            rejections += test.p_value <= 0.05
        print(f"  {label:<36} rate {rejections / replications:.4f}  region around 0.05 {region(replications, 0.05)}")


def speed(seed: int) -> None:
    print("\nsign-flip test vs scipy.stats.permutation_test (same statistic Σd/Σn, vectorised), best of 3")
    rng = np.random.default_rng(seed)
    for label, n_docs, resamples in (("exact, N = 18", 18, 2 ** 18), ("Monte Carlo, N = 2048, 10,000", 2048, 10_000)):
        d = rng.normal(-5.0, 40.0, n_docs)
        n = np.full(n_docs, 256)
        ours = best_of(lambda: sign_flip_test(d, n, n_permutations=resamples, rng_seed=0))
        peer = best_of(lambda: stats.permutation_test((d,), lambda x, axis: x.sum(axis=axis) / n.sum(), vectorized=True,
                                                    permutation_type="samples", n_resamples=resamples, random_state=0))
        print(f"  {label:<32} ours {ours:.3f} s   scipy {peer:.3f} s   scipy/ours {peer / ours:.1f}×")



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replications", type=int, default=2000)
    parser.add_argument("--samples", type=int, default=1000, help="bootstrap resamples per interval")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    coverage(args.replications, args.samples, args.seed)
    false_positives(args.replications, args.seed + 1)
    speed(args.seed + 2)


if __name__ == "__main__":
    main()
