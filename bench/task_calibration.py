"""Calibration of the downstream-task verdict (item scores, seeds × items interval) by simulation with 0/1 outcomes
(the fast version is tests/stats/test_task_calibration.py).

Studies from gatedv_stats.testing.ItemScoreModel: logit P(right) = item difficulty (SD 1.5) + a seed effect per arm
+ a seed × item interaction per arm (+ the variant's shift δ, its per-item and per-subtask effects; subtasks of 20
items). Per scenario, seeds S and items N:

* coverage of the 95% interval and the rates of the false verdicts "better" / "worse" when the true difference is 0
  (every term symmetric about 0);
* the power of "better" at a few logit shifts δ, with the true difference in points;
* coverage of the macro-average interval over 3 tasks scored by the same models (a seed's effect shared by them).

Markdown tables go to stdout, progress to stderr.

    python bench/task_calibration.py --studies 2000
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy import special
from tqdm import tqdm

from gatedv_stats.stats.seed_document import seed_document_interval
from gatedv_stats.stats.tasks import macro_average
from gatedv_stats.testing import ItemScoreModel, item_calibration, simulate_item_scores

SUBTASK_SIZE = 20
SCENARIOS = {
    "seed-only": ItemScoreModel(),
    "seed-dominant": ItemScoreModel(seed_sd=0.2),
    "item effects": ItemScoreModel(item_effect_sd=0.5),
    "subtasks (clustered)": ItemScoreModel(item_effect_sd=0.3, subtask_sd=0.5, subtask_effect_sd=0.3),
}
SEEDS = (3, 5)
ITEMS = (200, 1000, 5000)
POWER_DELTAS = (0.05, 0.1, 0.2)


def subtasks_of(name: str, n_items: int) -> np.ndarray | None:
    return np.arange(n_items) // SUBTASK_SIZE if "subtasks" in name else None


def null_table(studies: int, rng: np.random.Generator) -> list[str]:
    lines = ["| scenario | S | N | coverage | false \"better\" | false \"worse\" | mean df | no interval |",
             "|---|---|---|---|---|---|---|---|"]
    cells = [(name, s, n) for name in SCENARIOS for s in SEEDS for n in ITEMS]
    for name, s, n in tqdm(cells, desc="null", leave=False):
        c = item_calibration(SCENARIOS[name], s, n, rng, n_studies=studies, subtasks=subtasks_of(name, n))
        lines.append(f"| {name} | {s} | {n:,} | {c.coverage:.3f} | {c.better_rate:.3f} | {c.worse_rate:.3f} | "
                     f"{c.mean_df:.1f} | {c.no_interval_rate:.4f} |")
    return lines


def power_table(studies: int, rng: np.random.Generator) -> list[str]:
    lines = ["| δ (logit) | true difference | S | N | power (\"better\") | coverage |", "|---|---|---|---|---|---|"]
    cells = [(delta, s, n) for delta in POWER_DELTAS for s in SEEDS for n in ITEMS]
    for delta, s, n in tqdm(cells, desc="power", leave=False):
        c = item_calibration(ItemScoreModel(delta=delta, item_effect_sd=0.3), s, n, rng, n_studies=studies)
        lines.append(f"| {delta:g} | {100 * c.truth:+.2f} points | {s} | {n:,} | {c.better_rate:.3f} | "
                     f"{c.coverage:.3f} |")
    return lines


def macro_table(studies: int, rng: np.random.Generator, n_tasks: int = 3, n_items: int = 500) -> list[str]:
    """Coverage of the macro-average interval: the seed effects of both arms are shared by every task."""
    lines = ["| S | tasks × items | seed SD (logit) | macro coverage | coverage ignoring the shared seed effect |",
             "|---|---|---|---|---|"]
    for s in SEEDS:
        for seed_sd in (0.04, 0.2):
            model = ItemScoreModel(seed_sd=seed_sd, item_effect_sd=0.3)
            effects = rng.normal(0.0, seed_sd, (2, studies, s))
            tasks = [simulate_item_scores(model, s, n_items, rng, n_studies=studies, seed_effects=effects)
                     for _ in range(n_tasks)]
            covered = naive = 0
            for k in tqdm(range(studies), desc=f"macro S={s}", leave=False):
                fits = [seed_document_interval(base[k], var[k], np.ones(n_items)) for base, var in tasks]
                macro = macro_average(fits)
                low, high = macro.confidence_interval
                covered += low <= 0.0 <= high
                # independent tasks would give Var = Σ Var̂_t / T² on the smallest task df
                se = np.sqrt(sum(fit.se ** 2 for fit in fits)) / n_tasks
                half = special.stdtrit(min(fit.df for fit in fits), 0.975) * se
                naive += abs(macro.difference) <= half
            lines.append(f"| {s} | {n_tasks} × {n_items} | {seed_sd:g} | {covered / studies:.3f} | "
                         f"{naive / studies:.3f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--studies", type=int, default=2000)
    parser.add_argument("--macro-studies", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"Null (true difference 0), {args.studies:,} studies per cell, 95% intervals:\n")
    print("\n".join(null_table(args.studies, rng)))
    print(f"\nPower of \"better\", {args.studies:,} studies per cell (item effect SD 0.3):\n")
    print("\n".join(power_table(args.studies, rng)))
    print(f"\nMacro-average over tasks, {args.macro_studies:,} studies per cell:\n")
    print("\n".join(macro_table(args.macro_studies, rng)))


if __name__ == "__main__":
    main()
