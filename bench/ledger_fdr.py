"""False keeps and power of the research ledger's online procedures over streams of candidates.

Each stream is 200 candidates in random order: 10% better, 50% neutral (no difference) and 40% worse than what they
are compared with. Each candidate's test is the one-sided z test of "not better" (what `gatedv ledger` computes from
the seeds × units fit, with many df): Z = δ_i + noise, p = P(N(0, 1) ≥ Z), where δ = z(1 − a) + z(power) for a
better candidate (so its test alone has the stated power at one-sided level a), 0 for a neutral one and −δ for a
worse one. Every stream goes through the product's adapter (`gatedv_stats.stats.online_fdr.online_decisions`):
LOND, ADDIS, LORD++, SAFFRON (FDR at α), e-LOND (FDR at α from the e-values exp(δZ − δ²/2), the likelihood ratio
at the better candidates' effect) and alpha-spending (FWER at α), beside the unadjusted rule (keep when the verdict
says "better": two-sided α, one-sided p ≤ α/2) and, for scale, the offline Benjamini–Hochberg procedure at α over the
whole stream at once (which no online ledger can run: it needs every p-value first).

Per procedure: FDR = the mean over streams of false keeps / max(keeps, 1) (± its Monte Carlo SE), power = the mean
share of the better candidates kept, the mean number of false keeps and of keeps, and for alpha-spending the FWER
(the share of streams with any false keep). Three designs: each test 80% powered at one-sided 0.025 (the unadjusted
verdict's level); at 0.001 (about the level ADDIS spends: 1.97× the seeds of the first design); and the first design
with dependent tests (every 20 consecutive candidates compared with one reference run, whose noise they share:
correlation 0.5), where the guarantees of LOND (positive dependence), e-LOND and alpha-spending (any dependence)
still hold and those of ADDIS, LORD++ and SAFFRON do not.

    python bench/ledger_fdr.py --streams 2000
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import numpy as np
from scipy import stats

from gatedv_stats.stats.e_values import likelihood_ratio_e_value
from gatedv_stats.stats.multiple import adjust_p_values
from gatedv_stats.stats.online_fdr import INDEPENDENCE, NAMES, PROCEDURES, online_decisions, online_procedure

N_CANDIDATES = 200
SHARES = {"better": 0.10, "neutral": 0.50, "worse": 0.40}
POWER = 0.8
BLOCK = 20  # candidates that share one reference run in the dependent design
DEPENDENCE = tuple(name for name in PROCEDURES if name not in INDEPENDENCE)  # valid under the dependent design
DESIGNS = (("independent, 80% power at one-sided 0.025", 0.025, 0.0),
           ("independent, 80% power at one-sided 0.001", 0.001, 0.0),
           ("dependent (ρ = 0.5 within blocks of 20), 80% power at one-sided 0.025", 0.025, 0.5))


def stream(rng: np.random.Generator, delta: float, rho: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One stream's one-sided p-values, its e-values and which candidates are better."""
    counts = [round(share * N_CANDIDATES) for share in SHARES.values()]
    effects = rng.permutation(np.repeat([delta, 0.0, -delta], counts))
    shared = np.repeat(rng.normal(size=math.ceil(N_CANDIDATES / BLOCK)), BLOCK)[:N_CANDIDATES]
    z = effects + math.sqrt(rho) * shared + math.sqrt(1.0 - rho) * rng.normal(size=N_CANDIDATES)
    return stats.norm.sf(z), np.array([likelihood_ratio_e_value(value, 1.0, delta, True) for value in z]), effects > 0


def keeps(rule: str, p_values: np.ndarray, e_values: np.ndarray, alpha: float) -> np.ndarray:
    """The candidates a rule keeps."""
    if rule == "unadjusted":
        return p_values <= alpha / 2.0
    if rule == "offline BH":
        return np.asarray(adjust_p_values(p_values.tolist())["bh"]) <= alpha
    chosen = online_procedure(rule, alpha)
    decisions = online_decisions(e_values if chosen.e_values else p_values, chosen)
    return np.array([decision.keep for decision in decisions])


def design_rows(rng: np.random.Generator, streams: int, alpha: float, level: float, rho: float) -> list[dict]:
    """Every rule's FDR, power, false keeps and keeps over `streams` streams of one design."""
    delta = stats.norm.isf(level) + stats.norm.ppf(POWER)
    rules = ("unadjusted", "offline BH", *PROCEDURES)
    fdp: dict[str, list[float]] = {rule: [] for rule in rules}
    power: dict[str, list[float]] = {rule: [] for rule in rules}
    false: dict[str, list[int]] = {rule: [] for rule in rules}
    kept: dict[str, list[int]] = {rule: [] for rule in rules}
    for _ in range(streams):
        p_values, e_values, better = stream(rng, delta, rho)
        for rule in rules:
            chosen = keeps(rule, p_values, e_values, alpha)
            n_false, n_kept = int(np.sum(chosen & ~better)), int(np.sum(chosen))
            fdp[rule].append(n_false / max(n_kept, 1))
            power[rule].append(float(np.sum(chosen & better)) / float(np.sum(better)))
            false[rule].append(n_false)
            kept[rule].append(n_kept)
    return [{"rule": rule, "fdr": float(np.mean(fdp[rule])), "fdr_se": float(np.std(fdp[rule]) / math.sqrt(streams)),
             "power": float(np.mean(power[rule])), "false_keeps": float(np.mean(false[rule])),
             "keeps": float(np.mean(kept[rule])), "fwer": float(np.mean(np.array(false[rule]) > 0))}
            for rule in rules]


def table(rows: list[dict], alpha: float, guaranteed: bool) -> list[str]:
    lines = ["| rule | controls | FDR (± MC SE) | power | false keeps | keeps | any false keep (FWER) | FDR ≤ α |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        rule = row["rule"]
        controls = {"unadjusted": "nothing", "offline BH": "FDR (offline)", "alpha-spending": "FWER"}.get(rule, "FDR")
        online = rule in PROCEDURES
        check = ("✔" if row["fdr"] <= alpha else "✘") if online and (guaranteed or rule in DEPENDENCE) else "—"
        lines.append(f"| {NAMES.get(rule, rule)} | {controls} | {row['fdr']:.3f} ± {row['fdr_se']:.3f} | "
                     f"{row['power']:.2f} | {row['false_keeps']:.2f} | {row['keeps']:.2f} | {row['fwer']:.3f} | "
                     f"{check} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=2000)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="Print every figure as one JSON object.")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    results = {name: design_rows(rng, args.streams, args.alpha, level, rho) for name, level, rho in DESIGNS}
    seconds = time.perf_counter() - started
    if args.json:
        print(json.dumps({"streams": args.streams, "alpha": args.alpha, "seconds": seconds, "designs": results}))
        return
    print(f"{args.streams} streams of {N_CANDIDATES} candidates (10% better, 50% neutral, 40% worse), α = "
          f"{args.alpha:g}; {seconds:.1f} s, load {os.getloadavg()[0]:.2f}\n")
    failed = []
    for name, _, rho in DESIGNS:
        print(f"**{name}**\n")
        rows = results[name]
        print("\n".join(table(rows, args.alpha, guaranteed=rho == 0.0)) + "\n")
        failed += [f"{row['rule']} ({name})" for row in rows if row["rule"] in PROCEDURES and row["fdr"] > args.alpha
                   and (rho == 0.0 or row["rule"] in DEPENDENCE)]
    if failed:
        raise SystemExit(f"FDR above α: {', '.join(failed)}")


if __name__ == "__main__":
    main()
