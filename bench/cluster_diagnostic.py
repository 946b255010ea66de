"""Calibration of the group-effect note (gatedv_stats.stats.cluster_diagnostic): how often it fires without a
group effect and with one, and how often the verdict names a winner with no true difference, without and with
the domains as clusters (`--cluster domain`). The fast version is tests/stats/test_cluster_diagnostic.py.

Simulated studies from gatedv_stats.testing (per-token differences y_si = δ + a_s + b_i + u_c + e_si, δ = 0,
document lengths 32–1,023 targets). Without a group effect (u_c = 0): the component mixes of
bench/seed_document_calibration.py, on three layouts — 20 domains × 50 documents; 200 documents in domains of
geometric size (mean 5); 20 × 50 with each domain's documents of a typical length of their own and the
document and interaction SDs scaled by length (the documents' variances then differ between domains, against
which the F test is not exact). With a group effect: 20 domains × 50 documents, 5 seeds, the document-dominant
mix with domain SDs up to the one of `CLUSTERED_STUDY`. Markdown to stdout, progress to stderr.

    python bench/cluster_diagnostic.py --studies 400
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np
from tqdm import tqdm

from gatedv_stats.stats.cluster_diagnostic import DIAGNOSTIC_LEVEL, MIN_SE_RATIO
from gatedv_stats.testing import CLUSTERED_STUDY, cluster_calibration, domain_labels, domain_lengths, equal_domains
from seed_document_calibration import SCENARIOS

LAYOUTS = ("20 × 50", "200 in ~40 domains", "20 × 50, lengths by domain")
CLUSTER_SDS = (0.0, 0.005, 0.01, 0.02, 0.04)


def without_group_effect(args: argparse.Namespace) -> None:
    print(f"\nno group effect (u_c = 0): rate at which the note fires, and at which its F test alone is "
          f"significant (level {DIAGNOSTIC_LEVEL:g}); {args.studies:,} studies per cell, seed {args.seed}\n")
    print("| components | layout | S | note fires | F significant | verdict names a winner | with --cluster |")
    print("|---|---|---|---|---|---|---|")
    cells = [(name, layout, s) for name in SCENARIOS for layout in LAYOUTS for s in (3, 5)]
    for index, (name, layout, n_seeds) in enumerate(tqdm(cells, desc="cells", leave=False)):
        rng = np.random.default_rng([args.seed, index])
        model = replace(SCENARIOS[name], cluster_sd=0.0)
        if layout == LAYOUTS[1]:
            labels = domain_labels(200, rng)
        else:
            labels = equal_domains(20, 50)
        if layout == LAYOUTS[2]:
            model, n_targets = replace(model, length_scaled=True), domain_lengths(labels, rng)
        else:
            n_targets = rng.integers(32, 1024, labels.size)
        result = cluster_calibration(model, n_seeds, n_targets, labels, rng, n_studies=args.studies)
        print(f"| {name} | {layout} | {n_seeds} | {result.note_rate:.3f} | {result.significant_rate:.3f} "
              f"| {result.winner_rate:.3f} | {result.clustered_winner_rate:.3f} |", flush=True)


def with_group_effect(args: argparse.Namespace) -> None:
    print(f"\n20 domains × 50 documents, 5 seeds, document-dominant components (seed SD {CLUSTERED_STUDY.seed_sd:g}, "
          f"document {CLUSTERED_STUDY.doc_sd:g}, interaction {CLUSTERED_STUDY.interaction_sd:g}), δ = 0, by domain "
          f"SD; {args.studies:,} studies per row (the note needs F significant and the clustered SE ≥ "
          f"{MIN_SE_RATIO:g}× the unclustered)\n")
    print("| domain SD | note fires | F significant | verdict names a winner | with --cluster domain |")
    print("|---|---|---|---|---|")
    labels = equal_domains(20, 50)
    for index, cluster_sd in enumerate(tqdm(CLUSTER_SDS, desc="domain SDs", leave=False)):
        rng = np.random.default_rng([args.seed, 1000 + index])
        result = cluster_calibration(replace(CLUSTERED_STUDY, cluster_sd=cluster_sd), 5,
                                     rng.integers(32, 1024, labels.size), labels, rng, n_studies=args.studies)
        star = " (CLUSTERED_STUDY)" if cluster_sd == CLUSTERED_STUDY.cluster_sd else ""
        print(f"| {cluster_sd:g}{star} | {result.note_rate:.3f} | {result.significant_rate:.3f} "
              f"| {result.winner_rate:.3f} | {result.clustered_winner_rate:.3f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=400, help="simulated studies per cell")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with_group_effect(args)
    without_group_effect(args)


if __name__ == "__main__":
    main()
