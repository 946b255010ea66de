"""The research loop end to end: streams of candidates on one shared baseline, each decided by a sequential design
over seed pairs run at the level the research ledger gives it, and entered in the ledger at its stop.

Each stream is N = 50 candidates in random order: 10% better by δ, 50% null, 40% worse by δ (the mixture), or all
null. Every candidate is compared with the same baseline runs: its paired difference at seed s is
D_s = θ + X_s − R_s, X_s, R_s ~ N(0, τ²/2) independent, R_s the baseline's seed noise shared by the whole stream
(so the candidates' tests are correlated 0.5), τ² = 1, and the documents fixed with no document term. Each stream
has a noise floor from 30 A/A runs (τ̂² ~ τ²χ²₂₉/29), which the looks use as the product does
(`stats.noise_floor.use_floor`: alone at one seed pair, then pooled with the candidate's own spread unless the F
test finds that larger; the statistic T_k on the pooled df). The design: up to K = 4 seed pairs, one-sided level a
the ledger's next level (α = 2a two-sided), O'Brien–Fleming-type spending at the fractions k/K, a non-binding
futility boundary and equivalence at the smallest effect of interest δ (the drift δ√(K/τ̂²); β = 0.2 or less), the
z boundaries read on the look's t as `stats.sequential.decide_look` reads them. δ = 1.8τ: a fixed design of K seed
pairs has power 0.8 at one-sided 0.0027 (ADDIS's and LOND's first level) with τ known. At the stop the ledger takes
the design's stage-wise p (`stats.sequential.stagewise_p` on the z with the look's tail), for e-LOND the e-process at
the stop (`stats.e_values`, with the planned information k/τ̂², whose boundary 1/a is then the design's "better").
The designs are cached at the ledger's level rounded down to a grid of 1% steps and the drift rounded to one of 1%.

The vectorised run goes through the library's statistics functions (boundaries, futility, the stage-wise p, the
procedures' adapter `stats.online_fdr.OnlineStream`) over ≥ 2,000 streams; beside it, the seam the ledger had
before: designs at their own two-sided 0.05 whose candidates enter with the fixed-sample one-sided p at the stop.
`--end-to-end S` adds S streams through `gv.sequential(..., ledger=)` itself (loss arrays of 40 documents, a noise
floor from 30 A/A runs, the default procedure), which must agree with the vectorised run within Monte Carlo error.

Per procedure: the FDR (mean over streams of false keeps / max(keeps, 1), ± its Monte Carlo SE; false: a keep of a
candidate that is not better), the power (the share of the better candidates kept), the mean seed pairs per
candidate, and the share of "stop: better" that the ledger kept.

    python bench/research_loop_calibration.py --streams 2000 --end-to-end 100
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import multiprocessing
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import special

from gatedv_stats.stats import sequential as gs
from gatedv_stats.stats.noise_floor import CONSISTENCY_LEVEL
from gatedv_stats.stats.online_fdr import DEFAULT_PROCEDURE, NAMES, PROCEDURES, OnlineStream, online_procedure

N_CANDIDATES = 50
SHARES = {"better": 0.10, "null": 0.50, "worse": 0.40}
MAX_SEEDS = 4
ALPHA = 0.05
EFFECT = 1.8  # δ in units of τ: power 0.8 for a fixed design of K = 4 seed pairs at one-sided 0.0027
POWER = 0.8
FRACTIONS = np.arange(1, MAX_SEEDS + 1) / MAX_SEEDS
MIXTURES = ("complete null", "mixture")
SEAMS = ("seam:saffron", "seam:addis", "seam:lond")  # designs at their own α, fixed-sample p at the stop


LEVEL_STEP = 1.01  # designs at the ledger's level rounded down to this grid: at most 1% below it
DRIFT_STEP = 1.01  # and at the drift rounded to this grid
FLOOR_DF = 29  # the noise floor of 30 A/A runs


@functools.cache
def design(level: float, drift: float) -> tuple[np.ndarray, np.ndarray]:
    """One design's efficacy and futility boundaries (z; futility −∞ at the last look) at one-sided `level` and the
    drift of the smallest effect of interest (`stats.sequential`, as `analysis.sequential.create_design`)."""
    efficacy, _ = gs.efficacy_bounds(FRACTIONS, level, "obf")
    beta = gs.futility_beta(FRACTIONS, efficacy, drift, 1.0 - POWER, "obf")
    futility = (gs.futility_bounds(FRACTIONS, efficacy, drift, beta, "obf")[0] if beta
                else np.full(MAX_SEEDS, -math.inf))
    futility[-1] = -math.inf
    return efficacy, futility


def on_grid(values: np.ndarray, step: float, down: bool) -> np.ndarray:
    """Each value rounded (down, or to the nearest) to the grid step**j."""
    power = np.log(values) / math.log(step)
    return step ** (np.floor(power + 1e-9) if down else np.round(power))


@dataclass(frozen=True)
class Designs:
    """Each stream's design (rows): its level and drift on the grids, its z boundaries."""

    levels: np.ndarray
    drifts: np.ndarray
    efficacy: np.ndarray
    futility: np.ndarray

    @classmethod
    def at(cls, levels: np.ndarray, floors: np.ndarray) -> Designs:
        snapped = on_grid(levels, LEVEL_STEP, down=True)
        drifts = on_grid(EFFECT * np.sqrt(MAX_SEEDS / floors), DRIFT_STEP, down=False)
        rows = [design(float(level), float(drift)) for level, drift in zip(snapped, drifts)]
        return cls(snapped, drifts, np.array([row[0] for row in rows]), np.array([row[1] for row in rows]))


def stream_paths(rng: np.random.Generator, mixture: str, streams: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each candidate's per-seed differences (oriented: large = better), streams × candidates × seed pairs, the true
    effects (streams × candidates) and each stream's noise floor τ̂²."""
    if mixture == "complete null":
        effects = np.zeros((streams, N_CANDIDATES))
    else:
        counts = [round(share * N_CANDIDATES) for share in SHARES.values()]
        effects = rng.permuted(np.tile(np.repeat([EFFECT, 0.0, -EFFECT], counts), (streams, 1)), axis=1)
    shared = rng.normal(0.0, math.sqrt(0.5), size=(streams, 1, MAX_SEEDS))  # the baseline's seed noise
    own = rng.normal(0.0, math.sqrt(0.5), size=(streams, N_CANDIDATES, MAX_SEEDS))
    floors = rng.chisquare(FLOOR_DF, size=streams) / FLOOR_DF
    return effects[..., None] + own - shared, effects, floors


@dataclass(frozen=True)
class Looks:
    """The looks of one candidate per stream (streams × looks): estimate, se, df and T, as the floor gives them."""

    estimate: np.ndarray
    se: np.ndarray
    df: np.ndarray

    @property
    def statistic(self) -> np.ndarray:
        return self.estimate / self.se

    @classmethod
    def of(cls, differences: np.ndarray, floors: np.ndarray) -> Looks:
        """`stats.noise_floor.use_floor` at every look, vectorised: the floor alone at one seed pair, then pooled
        with the candidate's own spread by df, or that spread alone where the F test finds it larger."""
        n = np.arange(1, MAX_SEEDS + 1)
        estimate = np.cumsum(differences, axis=1) / n
        variance = np.tile(floors[:, None], (1, MAX_SEEDS))
        df = np.full(variance.shape, float(FLOOR_DF))
        for k in range(2, MAX_SEEDS + 1):
            study = np.var(differences[:, :k], axis=1, ddof=1)
            larger = special.fdtrc(k - 1, FLOOR_DF, study / floors) < CONSISTENCY_LEVEL
            pooled = (FLOOR_DF * floors + (k - 1) * study) / (FLOOR_DF + k - 1)
            variance[:, k - 1] = np.where(larger, study, pooled)
            df[:, k - 1] = np.where(larger, k - 1.0, FLOOR_DF + k - 1.0)
        return cls(estimate, np.sqrt(variance / n), df)


def decide(looks: Looks, designs: Designs, floors: np.ndarray,
           e_levels: np.ndarray | None) -> tuple[np.ndarray, ...]:
    """Per stream: the stopping look, whether it crossed "better", whether it stopped for "better" (not
    "equivalent"), and the z the stage-wise p ranks it at, by the rules of `stats.sequential.decide_look`. With
    `e_levels` (e-LOND), "better" is the e-process reaching 1/level."""
    t, df = looks.statistic, looks.df
    critical = np.where(np.isfinite(designs.efficacy), -special.stdtrit(df, special.ndtr(-designs.efficacy)),
                        np.inf)
    mean = designs.drifts[:, None] * np.sqrt(FRACTIONS)[None, :]
    finite = np.isfinite(designs.futility)
    futility = np.where(finite, special.nctdtrit(df, mean, special.ndtr(np.where(finite, designs.futility, 0.0)
                                                                               - mean)), -np.inf)
    if e_levels is None:
        better = t >= critical
    else:
        information = np.arange(1, MAX_SEEDS + 1) / floors[:, None]  # planned, from the floor
        e = np.exp(np.minimum((EFFECT * looks.estimate - EFFECT ** 2 / 2.0) * information, 690.0))
        better = e * e_levels[:, None] >= 1.0
    equivalent = np.abs(looks.estimate) + critical * looks.se < EFFECT
    final = np.zeros_like(t, dtype=bool)
    final[:, -1] = True
    stops = better | (t <= -critical) | equivalent | final | (t <= futility)
    look = stops.argmax(axis=1)
    rows = np.arange(t.shape[0])
    at, crossed = t[rows, look], better[rows, look]
    z = -special.ndtri(special.stdtr(df[rows, look], -at))  # the z with the look's tail
    foot = np.maximum(-designs.efficacy[rows, look],
                      -special.ndtri(special.stdtr(df[rows, look], -futility[rows, look])))
    ranked = np.where(equivalent[rows, look] & ~crossed & ~final[rows, look], np.minimum(z, foot), z)
    return look, crossed, crossed & ~equivalent[rows, look], ranked


def stagewise(designs: Designs, look: np.ndarray, crossed: np.ndarray, ranked: np.ndarray) -> np.ndarray:
    """The stage-wise p of every stream at its stop, grouped by design and look for `stats.sequential.stagewise_p`."""
    p_values = np.empty(look.size)
    for level, drift, k in {(a, b, c) for a, b, c in zip(designs.levels, designs.drifts, look)}:
        here = (designs.levels == level) & (designs.drifts == drift) & (look == k)
        p_values[here] = gs.stagewise_p(FRACTIONS, design(float(level), float(drift))[0], int(k), ranked[here],
                                        crossed[here])
    return p_values


def vectorised(streams: int, seed: int) -> dict:
    """Every procedure (and the seam: its designs at two-sided 0.05, fixed-sample p's) over the same streams."""
    results = {}
    for m, mixture in enumerate(MIXTURES):
        differences, effects, floors = stream_paths(np.random.default_rng([seed, m]), mixture, streams)
        looks = [Looks.of(differences[:, i], floors) for i in range(N_CANDIDATES)]
        for procedure in (*PROCEDURES, *SEAMS):
            chosen = online_procedure(procedure.removeprefix("seam:"), ALPHA)
            seam = procedure in SEAMS
            ledgers = [OnlineStream(chosen) for _ in range(streams)]
            kept = np.zeros((streams, N_CANDIDATES), dtype=bool)
            better = np.zeros_like(kept)
            pairs = np.zeros(streams)
            for i in range(N_CANDIDATES):
                levels = np.array([ledger.level() for ledger in ledgers])
                designs = Designs.at(np.full(streams, ALPHA / 2.0) if seam else levels, floors)
                look, crossed, better[:, i], ranked = decide(looks[i], designs, floors,
                                                             levels if chosen.e_values and not seam else None)
                pairs += look + 1
                rows = np.arange(streams)
                if seam:  # the fixed-sample one-sided p at the stop
                    values = special.stdtr(looks[i].df[rows, look], -looks[i].statistic[rows, look])
                elif chosen.e_values:
                    information = (look + 1) / floors
                    values = np.exp(np.minimum((EFFECT * looks[i].estimate[rows, look] - EFFECT ** 2 / 2.0)
                                               * information, 690.0))
                else:
                    values = stagewise(designs, look, crossed, ranked)
                kept[:, i] = [ledger.test(float(value)) for ledger, value in zip(ledgers, values)]
            results[(mixture, procedure)] = aggregate(kept, effects, pairs, better)
    return results


def aggregate(kept: np.ndarray, effects: np.ndarray, pairs: np.ndarray, better: np.ndarray) -> dict:
    """FDR (± SE), power, mean seed pairs per candidate and the share of "stop: better" kept, over streams (rows)."""
    streams = kept.shape[0]
    fdp = np.sum(kept & (effects <= 0), axis=1) / np.maximum(kept.sum(axis=1), 1)
    n_better = int(np.sum(effects > 0))
    power = None if not n_better else float(np.sum(kept & (effects > 0)) / n_better)
    stops = int(better.sum())
    return {"streams": int(streams), "fdr": float(fdp.mean()), "fdr_se": float(fdp.std(ddof=1) / math.sqrt(streams)),
            "power": power, "power_se": None if power is None else math.sqrt(power * (1.0 - power) / n_better),
            "pairs": float(pairs.mean() / N_CANDIDATES),
            "pairs_se": float(pairs.std(ddof=1) / N_CANDIDATES / math.sqrt(streams)), "better_stops": stops,
            "kept_share_of_better_stops": None if stops == 0 else float(np.sum(kept & better) / stops)}


def agreement(ours: dict, theirs: dict) -> str:
    """Each figure of the end-to-end run against the vectorised one, in combined Monte Carlo SEs (an FDR estimated
    as 0 counts with the SE of one stream with a false keep)."""
    parts = []
    for name, error, shown in (("fdr", "fdr_se", "FDR"), ("power", "power_se", "power"),
                               ("pairs", "pairs_se", "mean seed pairs")):
        if ours[name] is None or theirs[name] is None:
            continue
        floor = 1.0 / theirs["streams"] if name == "fdr" else 0.0
        se = math.hypot(max(ours[error], floor), max(theirs[error], floor))
        parts.append(f"{shown} {theirs[name]:.4f} ± {theirs[error]:.4f} against {ours[name]:.4f} "
                     f"({abs(theirs[name] - ours[name]) / se:.1f} SE)")
    return "; ".join(parts)


def end_to_end_stream(args: tuple[str, int]) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """One stream through `gv.sequential(..., ledger=)` with the default procedure: each candidate's loss arrays
    (40 documents), looked at one seed pair after another until its design stops. Its keeps, effects, seed pairs
    and "stop: better"s."""
    import gatedv_stats as gv

    mixture, seed = args
    rng = np.random.default_rng(seed)
    differences, effects, _ = stream_paths(rng, mixture, 1)
    scale, n_docs, targets = 0.01, 40, 256  # τ in nats per token
    base = rng.uniform(2.0, 4.0, size=n_docs)
    aa_runs = base[None, :] + rng.normal(0.0, scale * math.sqrt(0.5), size=(30, 1))  # run means vary by τ²/2
    kept, better = np.zeros(N_CANDIDATES, dtype=bool), np.zeros(N_CANDIDATES, dtype=bool)
    pairs = 0
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        floor = _floor(gv, aa_runs * targets, n_docs, folder)
        for i in range(N_CANDIDATES):
            # the differences of the vectorised model (in units of τ), with a document × seed interaction of 1% of τ
            steps = differences[0, i]
            noise = rng.normal(0.0, 0.01 * scale, size=(MAX_SEEDS, n_docs))
            for n in range(1, MAX_SEEDS + 1):
                baseline = np.tile(base, (n, 1)) * targets
                variant = (base[None, :] - scale * steps[:n, None] + noise[:n]) * targets  # lower loss = better
                paired = gv.pair(baseline=baseline, variant=variant, n_targets=np.full(n_docs, targets),
                                 baseline_arm="baseline", variant_arm=f"c{i}")
                result = gv.sequential(paired, design=folder / f"c{i}.json", max_seeds=MAX_SEEDS,
                                       sesoi=math.expm1(EFFECT * scale), noise_floor=floor,
                                       ledger=folder / "stream.ledger")
                if result.stop:
                    break
            pairs += result.look.n_pairs
            assert result.ledger_entry is not None  # a design started in a ledger is entered at its stop
            kept[i] = result.ledger_entry.decision == "keep"
            better[i] = result.decision == "better"
    return kept, effects[0], pairs, better


def _floor(gv, losses: np.ndarray, n_docs: int, folder: Path):
    """The noise floor of 30 A/A runs of the baseline (29 df)."""
    import pandas as pd

    from gatedv_stats.io.lossfiles import write_loss_file

    for seed, row in enumerate(losses):
        docs = pd.DataFrame({"doc_id": [f"d{j}" for j in range(n_docs)], "n_targets": 256, "loss_sum": row})
        write_loss_file(folder / f"aa-{seed}.parquet", docs, {"arm": "baseline", "seed": seed})
    return gv.noise_floor(sorted(folder.glob("aa-*.parquet")), out=folder / "floor.json")


def table(results: dict, mixture: str) -> list[str]:
    lines = ["| procedure | FDR (± MC SE) | upper 2-SE bound | power | mean seed pairs | \"stop: better\" kept |",
             "|---|---|---|---|---|---|"]
    for (shown, name), row in results.items():
        if shown != mixture:
            continue
        label = (f"{NAMES[name.removeprefix('seam:')]}: designs at their own two-sided 0.05, fixed-sample p at the "
                 "stop (before)" if name in SEAMS else NAMES[name])
        power = "—" if row["power"] is None else f"{row['power']:.3f}"
        share = "—" if row["kept_share_of_better_stops"] is None else f"{row['kept_share_of_better_stops']:.3f}"
        lines.append(f"| {label} | {row['fdr']:.4f} ± {row['fdr_se']:.4f} | {row['fdr'] + 2 * row['fdr_se']:.4f} | "
                     f"{power} | {row['pairs']:.2f} | {share} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=2000)
    parser.add_argument("--end-to-end", type=int, default=0, help="streams through gv.sequential and the ledger")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    started = time.perf_counter()
    results = vectorised(args.streams, args.seed)
    end_to_end = {}
    if args.end_to_end:
        with multiprocessing.Pool(args.workers) as pool:
            for mixture in MIXTURES:
                seeds = [(mixture, args.seed * 1_000_003 + 7 * k + MIXTURES.index(mixture))
                         for k in range(args.end_to_end)]
                kept, effects, pairs, better = zip(*pool.map(end_to_end_stream, seeds))
                end_to_end[mixture] = aggregate(np.array(kept), np.array(effects), np.array(pairs, dtype=float),
                                                np.array(better))
    seconds = time.perf_counter() - started
    if args.json:
        print(json.dumps({"vectorised": {f"{m}/{n}": row for (m, n), row in results.items()},
                          "end_to_end": end_to_end, "seconds": seconds}))
        return
    print(f"{args.streams} streams of {N_CANDIDATES} candidates on one shared baseline each, K = {MAX_SEEDS}, "
          f"δ = {EFFECT}τ, α = {ALPHA}; {seconds:.0f} s, load {os.getloadavg()[0]:.2f}\n")
    failed = []
    for mixture in MIXTURES:
        print(f"**{mixture}**\n\n" + "\n".join(table(results, mixture)) + "\n")
        row = results[(mixture, DEFAULT_PROCEDURE)]
        if row["fdr"] + 2 * row["fdr_se"] > ALPHA + 0.005:
            failed.append(f"{DEFAULT_PROCEDURE} under the {mixture}")
        if mixture in end_to_end:
            other = end_to_end[mixture]
            share = other["kept_share_of_better_stops"]
            print(f"end to end through gv.sequential and gv.Ledger ({NAMES[DEFAULT_PROCEDURE]}, {other['streams']} "
                  f"streams): {agreement(row, other)}; \"stop: better\" kept "
                  f"{'—' if share is None else f'{share:.3f}'} of {other['better_stops']}\n")
    if failed:
        raise SystemExit(f"FDR's upper 2-SE bound above 0.055: {', '.join(failed)}")


if __name__ == "__main__":
    main()
