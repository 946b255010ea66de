"""Calibration of the seed-and-document interval against the document and two-level bootstraps (the fast
version is tests/stats/test_seed_calibration.py), and its speed.

Simulated studies from gatedv_stats.testing (per-token differences y_si = δ + a_s + b_i + u_c + e_si,
document lengths 32–1,023 targets, domains of geometric size with mean 5 when clustered). Per scenario,
seeds S and documents N, with δ = 0 (the arms are one population of models):

* the rate at which each method's 95% interval excludes 0 (its false-positive rate; for the seed-and-document
  interval, 1 − its coverage, exactly, since D's interval moves with D): ours, ours with plain
  Satterthwaite df (no few-seed guard), the paper's document bootstrap (over domain sums when clustered: the
  cluster bootstrap) and the two-level seed × document bootstrap of gatedv_stats.stats.seed_level;
* the power of the verdict ("better") at a true ΔP of −2% (δ = log 0.98).

Before the table: the coverage of plain Satterthwaite df and of the few-seed guard when the document part is
known (one numerical integral per cell), and the speed against the document bootstrap.

Markdown tables go to stdout, progress to stderr.

    python bench/seed_document_calibration.py --studies 4000 --bootstrap-studies 300
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from scipy import integrate, stats
from tqdm import tqdm

from gatedv_stats.stats import metrics
from gatedv_stats.stats.crossed import cluster_sums
from gatedv_stats.stats.resampling import document_bootstrap
from gatedv_stats.stats.seed_document import seed_document_interval
from gatedv_stats.stats.seed_level import two_level_bootstrap
from gatedv_stats.testing import CrossedModel, domain_labels, loss_sums, simulate_differences, simulated_fits
from timing import best_of

SCENARIOS = {  # per-token SDs at δ = 0: seed, document, interaction, domain
    "seed-only (b = 0)": CrossedModel(0.0, seed_sd=0.01, doc_sd=0.0, interaction_sd=0.03),
    "seed-dominant": CrossedModel(0.0, seed_sd=0.01, doc_sd=0.005, interaction_sd=0.03, cluster_sd=0.005),
    "document-dominant": CrossedModel(0.0, seed_sd=0.0005, doc_sd=0.05, interaction_sd=0.02, cluster_sd=0.03),
    "interaction-dominant": CrossedModel(0.0, seed_sd=0.002, doc_sd=0.02, interaction_sd=0.3, cluster_sd=0.01),
    "mixed": CrossedModel(0.0, seed_sd=0.005, doc_sd=0.03, interaction_sd=0.05, cluster_sd=0.02),
    "document-dominant, length-scaled": CrossedModel(0.0, seed_sd=0.0005, doc_sd=0.05, interaction_sd=0.02,
                                                     cluster_sd=0.03, length_scaled=True),
}
POWER_DELTA = math.log(0.98)  # ΔP = −2%


def excludes(fit, truth: float, df: np.ndarray) -> np.ndarray:
    return np.abs(fit.estimate - truth) > stats.t.ppf(0.975, df) * np.sqrt(fit.var_d)


def our_rates(model: CrossedModel, n_seeds: int, n_targets, labels, rng, studies: int) -> tuple[float, float, float]:
    """False-positive rate with the guard and with plain Satterthwaite df, and power at ΔP = −2%."""
    fit = simulated_fits(model, n_seeds, n_targets, rng, n_studies=studies, clusters=labels)
    shifted = CrossedModel(POWER_DELTA, model.seed_sd, model.doc_sd, model.interaction_sd, model.cluster_sd,
                           model.length_scaled)
    power_fit = simulated_fits(shifted, n_seeds, n_targets, rng, n_studies=studies, clusters=labels)
    better = power_fit.estimate + stats.t.ppf(0.975, power_fit.df) * np.sqrt(power_fit.var_d) < 0
    return (float(excludes(fit, 0.0, fit.df).mean()), float(excludes(fit, 0.0, fit.satterthwaite_df).mean()),
            float(better.mean()))


def bootstrap_rates(model: CrossedModel, n_seeds: int, n_targets, labels, rng, studies: int,
                    resamples: int) -> tuple[float, float]:
    """How often the document (cluster) bootstrap and the two-level bootstrap exclude 0 at δ = 0."""
    y = simulate_differences(model, n_seeds, n_targets, rng, n_studies=studies, clusters=labels)
    baseline, variant = loss_sums(y, n_targets, rng)
    document = two_level = 0
    for b in range(studies):
        d, n = metrics.document_differences(baseline[b], variant[b]), n_targets
        if labels is not None:
            sums = cluster_sums(d, n_targets, labels)
            d, n = sums.values, sums.n_units
        low, high = document_bootstrap(d, n, n_resamples=resamples, rng_seed=b).confidence_interval
        document += high < 0 or low > 0
        interval = two_level_bootstrap(baseline[b], variant[b], n_targets, n_resamples=resamples, rng_seed=b)
        two_level += interval.confidence_interval.high < 0 or interval.confidence_interval.low > 0
    return document / studies, two_level / studies


def calibration(args: argparse.Namespace) -> None:
    print(f"\n95% intervals at δ = 0: rate of excluding 0 (= 1 − coverage for the first two columns); "
          f"{args.studies:,} studies per cell for ours, {args.bootstrap_studies} with {args.resamples} resamples "
          f"for the bootstraps; power of the verdict at ΔP = −2% ({args.studies:,} studies); seed {args.seed}\n")
    print("| scenario | S | N | domains | ours | ours, plain Satterthwaite df | document bootstrap "
          "| two-level bootstrap | power at ΔP = −2% |")
    print("|---|---|---|---|---|---|---|---|---|")
    cells = [(name, s, n, c) for name in SCENARIOS for s in (3, 5, 10) for n in (200, 2048) for c in (False, True)
             if not (c and name.startswith("seed-only"))]
    for index, (name, n_seeds, n_docs, clustered) in enumerate(tqdm(cells, desc="cells", leave=False)):
        model = SCENARIOS[name]
        rng = np.random.default_rng([args.seed, index])
        n_targets = rng.integers(32, 1024, n_docs)
        labels = domain_labels(n_docs, rng) if clustered else None
        ours, plain, power = our_rates(model, n_seeds, n_targets, labels, rng, args.studies)
        document, two_level = bootstrap_rates(model, n_seeds, n_targets, labels, rng, args.bootstrap_studies,
                                              args.resamples)
        domains = f"{int(labels.max()) + 1}" if labels is not None else "—"
        print(f"| {name} | {n_seeds} | {n_docs:,} | {domains} | {ours:.3f} | {plain:.3f} | {document:.3f} "
              f"| {two_level:.3f} | {power:.3f} |", flush=True)


def two_seed_pairs(args: argparse.Namespace) -> None:
    print(f"\nS = 2 (one degree of freedom for the seed part), N = 2,048, no domains: rate of excluding 0 "
          f"({args.studies:,} studies)\n")
    print("| scenario | ours | ours, plain Satterthwaite df |")
    print("|---|---|---|")
    for index, (name, model) in enumerate(SCENARIOS.items()):
        rng = np.random.default_rng([args.seed, 1000 + index])
        ours, plain, _ = our_rates(model, 2, rng.integers(32, 1024, 2048), None, rng, args.studies)
        print(f"| {name} | {ours:.3f} | {plain:.3f} |", flush=True)


def few_seed_df() -> None:
    """Coverage of D ± t_df·SE when SE² = X + Y, X = a·χ²_ν/ν (the seed part, ν = S − 1) and Y = b known, for
    plain Satterthwaite df (X + Y)² ν / X² and the guarded df min(that, ν (X + Y) / X): one integral over X."""
    print("\ncoverage of the 95% interval with the seed part on ν = S − 1 df and the document part known, "
          "by the document part's share b / (a + b) (numerical integration)\n")
    shares = (0.05, 0.1, 0.2, 0.33, 0.5, 0.67, 0.9)
    print("| S | df rule | " + " | ".join(f"{share:g}" for share in shares) + " |")
    print("|---|---|" + "---|" * len(shares))
    for nu in (1, 2, 4, 9):
        for label, guarded in (("plain Satterthwaite", False), ("with the guard", True)):
            cells = [f"{_known_document_coverage(nu, share, guarded):.3f}" for share in shares]
            print(f"| {nu + 1} | {label} | " + " | ".join(cells) + " |")


def _known_document_coverage(nu: int, share: float, guarded: bool) -> float:
    a, b = 1.0 - share, share

    def covered(u: float) -> float:
        x = a * u / nu
        df = (x + b) ** 2 * nu / x ** 2
        if guarded:
            df = min(df, nu * (x + b) / x)
        return (2.0 * stats.norm.cdf(stats.t.ppf(0.975, df) * math.sqrt(x + b)) - 1.0) * stats.chi2.pdf(u, nu)

    return float(integrate.quad(covered, 0.0, np.inf, limit=200)[0])


def speed(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(args.seed)
    n_seeds, n_docs = 5, 100_000
    n_targets = rng.integers(32, 1024, n_docs)
    labels = rng.integers(0, 5000, n_docs)
    y = simulate_differences(SCENARIOS["seed-dominant"], n_seeds, n_targets, rng)[0]
    baseline, variant = loss_sums(y, n_targets, rng)
    d = metrics.document_differences(baseline, variant)
    ours = best_of(lambda: seed_document_interval(baseline, variant, n_targets))
    clustered = best_of(lambda: seed_document_interval(baseline, variant, n_targets, clusters=labels))
    peer = best_of(lambda: document_bootstrap(d, n_targets, n_resamples=2000, rng_seed=0))
    print(f"\nspeed, S = {n_seeds}, N = {n_docs:,} (best of 3): seed-and-document interval {ours * 1e3:.0f} ms, "
          f"with 5,000 domains {clustered * 1e3:.0f} ms; document bootstrap (B = 2,000) {peer * 1e3:.0f} ms "
          f"= {peer / ours:.0f}× ours")



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=4000, help="simulated studies per cell for our interval")
    parser.add_argument("--bootstrap-studies", type=int, default=300, help="simulated studies per cell for the "
                        "bootstraps")
    parser.add_argument("--resamples", type=int, default=400, help="bootstrap resamples per interval")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    speed(args)
    few_seed_df()
    calibration(args)
    two_seed_pairs(args)


if __name__ == "__main__":
    main()
