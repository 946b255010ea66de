"""Calibration of group-sequential verdicts over seed pairs (`gatedv decide`), with and without a noise floor, for
perplexity and 0/1 item scores.

Every simulated study draws K = 6 seed pairs of both arms (and, with a floor, ν + 1 = 10 A/A runs of the baseline for
a floor of 9 df) and goes through the product's own path: `analysis.sequential.create_design` at the first look (1
seed pair with the floor, 2 without), then `look` at every seed pair until a look stops. Per cell: the share of each
decision, the false verdicts over all looks (null: better or worse; harm, the variant worse by the smallest effect
of interest: better or equivalent; at the smallest effect of interest, better by it: worse) with their Monte Carlo
SE, the simultaneous coverage of the true difference by every repeated confidence interval taken, the mean number
of seed pairs used, and the fixed design's verdict on all K seed pairs of the same study (same floor, no SESOI).

Perplexity: the per-token model of bench/noise_floor_calibration.py (seed SD 0.01, interaction SD 0.2, N = 500
documents, document share 0.05 at K); items: its `ItemScoreModel` (seed SD 0.08 on the logit scale, item effect SD
0.3, N = 500 items). The smallest effect of interest is about what a fixed design of K seed pairs detects with 80%
power.

    python bench/sequential_calibration.py --studies 1000
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gatedv_stats.analysis.noise_floor import NoiseFloor
from gatedv_stats.analysis.sequential import create_design, look
from gatedv_stats.core.errors import InputError
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.stats.noise_floor import aa_floor
from gatedv_stats.stats.scale import PERPLEXITY, MetricScale, Scale
from gatedv_stats.stats.seed_document import seed_document_interval
from gatedv_stats.stats.verdict import verdict
from gatedv_stats.testing import ItemScoreModel
from noise_floor_calibration import N_UNITS, item_study, perplexity_study

MAX_SEEDS = 6
ALPHA = 0.05
FLOOR_DF = 9
DOCUMENT_SHARE = 0.05
ITEM_EFFECT_SD = 0.3
# The smallest effects of interest: perplexity a relative ΔP (the design's drift is log(1 + X) on D's scale); items
# a difference of accuracies, the true difference at ITEM_LOGIT_EFFECT on the logit scale (by Monte Carlo).
PERPLEXITY_SESOI = 0.016
ITEM_LOGIT_EFFECT = 0.24
TRUTHS = ("null", "harm", "sesoi")
FALSE = {"null": ("better", "worse"), "harm": ("better", "equivalent"), "sesoi": ("worse",)}
DECISIONS = ("better", "worse", "equivalent", "no useful gain", "no detectable difference")
IDS = np.array([f"u{i:04d}" for i in range(N_UNITS)], dtype=object)


@dataclass(frozen=True)
class Cell:
    kind: str  # "perplexity" or "items"
    floor: bool
    truth: str  # one of TRUTHS
    spending: str = "obf"


def item_sesoi() -> float:
    model = ItemScoreModel(delta=ITEM_LOGIT_EFFECT, seed_sd=0.08, item_effect_sd=ITEM_EFFECT_SD)
    return round(model.true_difference(np.random.default_rng(12345), 4_000_000), 4)


def paired_of(baseline: np.ndarray, variant: np.ndarray, scale: Scale) -> Paired:
    """The first S seed pairs of a simulated study as the product's paired structure (seeds 0 … S − 1)."""
    n_seeds = baseline.shape[0]
    items = not scale.log_ratio
    return Paired(baseline_arm="baseline", variant_arm="variant", seeds=np.arange(n_seeds, dtype=np.int64),
                  doc_ids=IDS, n_units=np.ones(N_UNITS, dtype=np.int64), baseline=baseline, variant=variant,
                  doc_columns=pd.DataFrame(index=range(N_UNITS)),
                  sources={"baseline": [f"b{s}" for s in range(n_seeds)], "variant": [f"v{s}" for s in range(n_seeds)]},
                  unit="item" if items else "token", scale=scale, task="sim" if items else None)


def study(cell: Cell, sesoi: float, rng: np.random.Generator) -> dict:
    """One simulated study through the sequential design, and the fixed design's verdict on all its seed pairs."""
    items = cell.kind == "items"
    sign = {"null": 0.0, "harm": 1.0, "sesoi": -1.0}[cell.truth] * (-1.0 if items else 1.0)  # + favours the baseline
    scale = MetricScale(metric="acc", higher_is_better=True, proportion=True) if items else PERPLEXITY
    if items:
        baseline, variant, aa, _ = item_study(rng, MAX_SEEDS, ITEM_EFFECT_SD, sign * ITEM_LOGIT_EFFECT,
                                              FLOOR_DF + 1 if cell.floor else 0)
        truth = sign * sesoi
    else:
        truth = sign * math.log1p(sesoi)
        baseline, variant, aa, _ = perplexity_study(rng, MAX_SEEDS, DOCUMENT_SHARE, truth,
                                                    FLOOR_DF + 1 if cell.floor else 0)
    floor = None
    if aa is not None:
        floor = NoiseFloor(aa_floor(aa), scale.metric, "item" if items else "token", {}, None, (), ())
    design, made, covered = None, None, True
    for n_seeds in range(1 if floor is not None else 2, MAX_SEEDS + 1):
        paired = paired_of(baseline[:n_seeds], variant[:n_seeds], scale)
        try:  # a look whose seed pairs agree exactly (0/1 scores) has no spread: the user trains another pair
            if design is None:
                design = create_design(paired, max_seeds=MAX_SEEDS, alpha=ALPHA, sesoi=sesoi, spending=cell.spending,
                                       floor=floor)
            made = look(design, paired)
        except InputError:
            continue
        design = design.with_look(made)
        covered = covered and made.interval.low <= truth <= made.interval.high
        if made.stop:
            break
    assert design is not None and made is not None
    fixed = seed_document_interval(baseline, variant, np.ones(N_UNITS), confidence_level=1.0 - ALPHA,
                                   noun="item" if items else "document", floor=None if floor is None else floor.seed)
    return {"decision": made.decision, "seed_pairs": made.n_pairs, "covered": covered,
            "fixed": verdict(fixed, scale).verdict, "power": design.power_at_sesoi}


def run_cell(args: tuple[Cell, float, int, int]) -> list[dict]:
    cell, sesoi, studies, seed = args
    rng = np.random.default_rng(seed)
    return [study(cell, sesoi, rng) for _ in range(studies)]


def summarise(cell: Cell, rows: list[dict]) -> dict:
    frame = pd.DataFrame(rows)
    n = len(frame)
    false = frame["decision"].isin(FALSE[cell.truth]).mean()
    fixed_false = frame["fixed"].isin(FALSE[cell.truth]).mean()
    return {"cell": cell, "n": n, **{name: (frame["decision"] == name).mean() for name in DECISIONS},
            "false": false, "false_se": math.sqrt(max(false * (1 - false), 1e-12) / n),
            "coverage": frame["covered"].mean(), "seed_pairs": frame["seed_pairs"].mean(),
            "fixed_better": (frame["fixed"] == "better").mean(), "fixed_false": fixed_false,
            "design_power": frame["power"].mean()}


def print_tables(results: list[dict], sesois: dict[str, float], studies: int) -> None:
    se = math.sqrt(ALPHA * (1 - ALPHA) / studies)
    print(f"studies per cell: {studies} (Monte Carlo SE of a {ALPHA:g} rate: {se:.4f}); K = {MAX_SEEDS} seed pairs, "
          f"α = {ALPHA:g} two-sided; a floor of {FLOOR_DF} df, or none (first look at 2 seed pairs)\n")
    for kind, label in (("perplexity", f"SESOI ΔP {sesois['perplexity']:g}"),
                        ("items", f"SESOI {sesois['items']:g} (accuracy)")):
        print(f"**{kind}** ({label}): the decisions at the stopping look, false verdicts over all looks, the "
              "simultaneous coverage of every repeated interval, the mean seed pairs used; beside them the fixed "
              f"design on all {MAX_SEEDS} seed pairs\n")
        print("| floor | spending | truth | better | worse | equivalent | no useful gain | no detectable difference | "
              "false verdicts (SE) | RCI coverage | mean seed pairs | fixed: better | fixed: false verdicts |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for result in results:
            cell = result["cell"]
            if cell.kind != kind:
                continue
            shares = " | ".join(f"{result[name]:.3f}" for name in DECISIONS)
            print(f"| {'ν = ' + str(FLOOR_DF) if cell.floor else 'none'} | {cell.spending} | {cell.truth} | {shares} | "
                  f"{result['false']:.3f} ({result['false_se']:.3f}) | {result['coverage']:.3f} | "
                  f"{result['seed_pairs']:.2f} | {result['fixed_better']:.3f} | {result['fixed_false']:.3f} |")
        print()
    print("power at the smallest effect of interest: the sequential design's 'better' against the fixed design's "
          "(same studies), and the design's own normal-approximation figure\n")
    print("| kind | floor | sequential | fixed | difference | design's figure |")
    print("|---|---|---|---|---|---|")
    for result in results:
        cell = result["cell"]
        if cell.truth == "sesoi" and cell.spending == "obf":
            print(f"| {cell.kind} | {'ν = ' + str(FLOOR_DF) if cell.floor else 'none'} | {result['better']:.3f} | "
                  f"{result['fixed_better']:.3f} | {result['better'] - result['fixed_better']:+.3f} | "
                  f"{result['design_power']:.3f} |")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--studies", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    sesois = {"perplexity": PERPLEXITY_SESOI, "items": item_sesoi()}
    kinds, floors = ("perplexity", "items"), (True, False)
    cells = [Cell(kind, floor, truth) for kind in kinds for floor in floors for truth in TRUTHS]
    cells += [Cell(kind, floor, "null", "pocock") for kind in kinds for floor in floors]
    chunks = max(1, args.workers * 4 // len(cells) + 1)
    seeds = np.random.SeedSequence(args.seed).spawn(len(cells) * chunks)
    tasks = [(cell, sesois[cell.kind], args.studies // chunks + (j < args.studies % chunks),
              int(seeds[i * chunks + j].generate_state(1)[0])) for i, cell in enumerate(cells) for j in range(chunks)]
    start = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(args.workers) as pool:
        parts = pool.map(run_cell, tasks, chunksize=1)
    rows: dict[Cell, list[dict]] = {}
    for (cell, *_), part in zip(tasks, parts):
        rows.setdefault(cell, []).extend(part)
    print_tables([summarise(cell, rows[cell]) for cell in cells], sesois, args.studies)
    print(f"{time.perf_counter() - start:.0f} s on {args.workers} workers")


if __name__ == "__main__":
    main()
