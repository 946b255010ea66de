"""Calibration of verdicts from few seeds, with and without a noise floor, for perplexity and for 0/1 item scores.

Null studies (the population difference is 0) of S = 1, 2, 3 seed pairs on N units, with a floor measured from
k = ν + 1 A/A runs of the same setup (`stats.noise_floor.aa_floor`), go through the product's own interval
(`seed_document_interval` with `floor=`) and verdict; each cell prints the false-verdict rate ("better" or "worse"
when the truth is 0), its Monte Carlo standard error and the mean df. Beside them: S = 2, 3, 4, 6 without a floor
(the few-seed rule), the power against a true effect with and without a floor at equal seeds, and a floor that
understates the seed variance by 2× (the honest failure mode).

Perplexity: per-token differences y_si = a_s + b_i + e_si (seed effect, document effect of the difference, seed ×
document interaction), normal, N = 500 equal-weight documents; the document share is Σw²σ²_doc / Var(D) at the
cell's S. Items: the logit model of `gatedv_stats.testing.ItemScoreModel` (N = 500 items), with the variant's
item-level effect SD setting the document share, printed as measured.

    python bench/noise_floor_calibration.py --studies 2000
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from tqdm import tqdm

from gatedv_stats.core.errors import NoSpreadError
from gatedv_stats.stats.noise_floor import SeedVariance, aa_floor
from gatedv_stats.stats.scale import PERPLEXITY, MetricScale
from gatedv_stats.stats.seed_document import seed_document_interval
from gatedv_stats.stats.verdict import verdict
from gatedv_stats.testing import ItemScoreModel, simulate_item_scores

N_UNITS = 500
SEED_SD = 0.01  # nats per token: the seed effect of a paired difference
INTERACTION_SD = 0.2  # per-token seed × document interaction (its average over N documents adds to the seed part)
SHARES = (0.0, 0.02, 0.05, 0.2, 0.5)  # with a floor
FEW_SEED_SHARES = (0.003, 0.019, 0.048, 0.083, 0.19, 0.48)  # without: the grid on which 2 seeds were at 7–9%
FLOOR_DF = (4, 9, 29)
ITEM_EFFECT_SDS = (0.0, 0.15, 0.3, 0.6, 1.2)
ITEMS = ItemScoreModel(seed_sd=0.08)


def perplexity_study(rng: np.random.Generator, n_seeds: int, share: float, delta: float = 0.0,
                     n_aa: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, float]:
    """(S, N) paired differences as loss sums of one-target documents, and the means of `n_aa` A/A runs; returns
    (baseline, variant, aa_means, τ²)."""
    w2 = 1.0 / N_UNITS
    tau2 = SEED_SD ** 2 + INTERACTION_SD ** 2 * w2
    doc_var = share / (1.0 - share) * tau2 / n_seeds / w2 if share < 1.0 else 0.0
    documents = rng.normal(0.0, math.sqrt(doc_var), N_UNITS)
    half_seed, half_int = SEED_SD / math.sqrt(2.0), INTERACTION_SD / math.sqrt(2.0)

    def runs(count: int) -> np.ndarray:  # one arm's per-document losses: a run effect and its interaction terms
        return rng.normal(0.0, half_seed, (count, 1)) + rng.normal(0.0, half_int, (count, N_UNITS))

    baseline = 3.0 + runs(n_seeds)
    variant = 3.0 + delta + documents + runs(n_seeds)
    aa = (3.0 + runs(n_aa)).mean(axis=1) if n_aa else None
    return baseline, variant, aa, tau2


def item_study(rng: np.random.Generator, n_seeds: int, effect_sd: float, delta: float = 0.0,
               n_aa: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, float]:
    """0/1 scores (S, N) of both arms on the same N items and the mean scores of `n_aa` A/A runs of the baseline
    on them; τ² is not known in closed form (nan)."""
    model = ItemScoreModel(delta=delta, seed_sd=ITEMS.seed_sd, item_effect_sd=effect_sd)
    baseline, variant = simulate_item_scores(model, n_seeds + n_aa, N_UNITS, rng)
    aa = baseline[0, n_seeds:].mean(axis=1) if n_aa else None
    return baseline[0, :n_seeds], variant[0, :n_seeds], aa, math.nan


def verdict_rate(kind: str, n_seeds: int, level_of: float, studies: int, rng: np.random.Generator, *,
                 floor_df: int | None, delta: float = 0.0, floor_scale: float = 1.0) -> tuple[float, float, float]:
    """(rate of better/worse verdicts, mean df, mean document share of Var̂(D)) over `studies` studies."""
    draw = perplexity_study if kind == "perplexity" else item_study
    scale = PERPLEXITY if kind == "perplexity" else MetricScale(metric="acc", higher_is_better=True, proportion=True)
    decided, dfs, shares = 0, [], []
    for _ in range(studies):
        baseline, variant, aa, _ = draw(rng, n_seeds, level_of, delta, (floor_df + 1) if floor_df else 0)
        floor = None
        if aa is not None:
            estimate = aa_floor(aa).seed
            floor = SeedVariance(estimate.variance * floor_scale, estimate.df)
        try:
            fit = seed_document_interval(baseline, variant, np.ones(N_UNITS), floor=floor)
        except NoSpreadError:
            continue
        decided += verdict(fit, scale).verdict in ("better", "worse")
        dfs.append(fit.df)
        seed_part = (fit.v_seed if fit.floor_use is None else fit.floor_use.seed.variance) / n_seeds
        shares.append(max(fit.se ** 2 - seed_part, 0.0) / fit.se ** 2)
    return decided / studies, float(np.mean(dfs)), float(np.mean(shares))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--studies", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    se = math.sqrt(0.05 * 0.95 / args.studies)
    print(f"null studies per cell: {args.studies} (Monte Carlo SE of a 5% rate: {se:.4f}); N = {N_UNITS} units\n")
    for kind, levels, plain_levels, label in (("perplexity", SHARES, FEW_SEED_SHARES, "document share"),
                                              ("items", ITEM_EFFECT_SDS, ITEM_EFFECT_SDS, "item effect SD")):
        print(f"## {kind}: false verdicts with a floor of ν df (rows: {label}; cells S = 1 / 2 / 3)\n")
        print(f"| {label} | measured share | " + " | ".join(f"ν = {nu}" for nu in FLOOR_DF) + " |")
        print("|---|---|" + "---|" * len(FLOOR_DF))
        for level in tqdm(levels, desc=f"{kind} with a floor", leave=False):
            cells, measured = [], []
            for nu in FLOOR_DF:
                rates = [verdict_rate(kind, s, level, args.studies, rng, floor_df=nu) for s in (1, 2, 3)]
                cells.append(" / ".join(f"{rate:.3f}" for rate, _, _ in rates))
                measured.append(rates[0][2])
            print(f"| {level:g} | {np.mean(measured):.2f} | " + " | ".join(cells) + " |")
        print(f"\n## {kind}: false verdicts without a floor (the few-seed rule), S = 2 / 3 / 4 / 6\n")
        print(f"| {label} | " + " | ".join(f"S = {s}" for s in (2, 3, 4, 6)) + " |")
        print("|---|" + "---|" * 4)
        for level in tqdm(plain_levels, desc=f"{kind} without a floor", leave=False):
            plain = [verdict_rate(kind, s, level, args.studies, rng, floor_df=None)[0] for s in (2, 3, 4, 6)]
            print(f"| {level:g} | " + " | ".join(f"{rate:.3f}" for rate in plain) + " |")
        delta = 0.01 if kind == "perplexity" else 0.25
        print(f"\n## {kind}: power at a true effect ({delta:g}) and a floor 2× too small (second level)\n")
        print("| S | no floor | floor ν = 9 | floor ν = 29 | floor ν = 9, 2× too small: false verdicts |")
        print("|---|---|---|---|---|")
        middle = levels[2]
        for s in (1, 2, 3, 4):
            def rate(floor_df: int | None, **kwargs: float) -> float:
                return verdict_rate(kind, s, middle, args.studies, rng, floor_df=floor_df, **kwargs)[0]

            no_floor = "—" if s < 2 else f"{rate(None, delta=delta):.3f}"
            with_floor = [rate(nu, delta=delta) for nu in (9, 29)]
            understated = rate(9, floor_scale=0.5)
            print(f"| {s} | {no_floor} | {with_floor[0]:.3f} | {with_floor[1]:.3f} | {understated:.3f} |")
        print()


if __name__ == "__main__":
    main()
