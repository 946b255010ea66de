"""A research loop you can run on a laptop: a noise floor, then a stream of candidate changes, each decided with
sequential seeds at the level a research ledger gives it, and entered there: kept or discarded under online
false-discovery-rate control.

    python examples/research-loop.py --out loop            # the tiny size on the embedded corpus
    python examples/research-loop.py --out loop --updates 4 --candidates 2 --max-seeds 2   # a quick check

Everything goes through the `gatedv` commands an automated loop would call:

1. `gatedv prepare builtin:python-stdlib` (the embedded corpus) and five A/A runs of the baseline (`gatedv sweep`),
   whose spread is the setup's noise floor (`gatedv noise-floor`).
2. For each candidate (a `--knob` change: GatedV, changes that do nothing or little, harmful ones), a grid of the
   baseline and the candidate over up to K seeds, trained with `gatedv sweep --until-decided --noise-floor --ledger`:
   the candidate's design runs at the level the ledger (LOND, whose false-discovery-rate control holds for the
   positive dependence of candidates that share the baseline's runs) gives it, and seed pairs are trained in rounds
   until the group-sequential comparison stops. The baseline's runs are shared by every candidate.
3. At its stop the candidate enters the ledger with the design's stage-wise p-value: "stop: better" is a keep,
   every other stop a discard.

It prints each decision, what was kept, the runs trained against a fixed design of K seed pairs per candidate,
and the ledger's section of the report (`gatedv report --ledger`). docs/sequential-seeds.md and
docs/research-ledger.md say what each step computes; docs/research-loop.md shows one run's output.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

# (name, knobs): GatedV; changes of the attention's activations and normalisation, which may help a little or not
# at all; the baseline's own value activation (changes nothing); and two harmful ones (a starved feed-forward, one
# key/value head)
CANDIDATES = [
    ("gatedv", {"value_act": "silu"}),
    ("same", {"value_act": "linear"}),
    ("narrow-ffn", {"d_ff": 8}),
    ("q-silu", {"query_act": "silu"}),
    ("xtanh", {"value_act": "xtanh"}),
    ("qk-norm", {"qk_norm": True}),
    ("one-kv-head", {"n_kv_heads": 1}),
    ("k-silu", {"key_act": "silu"}),
    ("o-silu", {"output_act": "silu"}),
]
AA_SEEDS = [101, 102, 103, 104, 105]  # the A/A runs of the floor: seeds no candidate is paired with


def gatedv(*args: object, json_out: bool = True) -> dict | str:
    """`gatedv ARGS [--json]`; its stderr (progress, warnings) passes through."""
    command = ["gatedv", *map(str, args), *(["--json"] if json_out else [])]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed with exit status {done.returncode}")
    return json.loads(done.stdout) if json_out else done.stdout


def grid_file(path: Path, out: Path, name: str, variants: dict, seeds: list[int], updates: int | None) -> Path:
    """An experiment file of the tiny size: `variants` maps a name to its knobs."""
    lines = [f'name = "{name}"', f'data = "{(out / "data").resolve()}"', 'config = "tiny"', f"seeds = {seeds}",
             "lrs = [0.003]", f'out = "{(out / "runs").resolve()}"']
    if updates is not None:
        lines.append(f"updates = {updates}\neval_every = {updates}")
    for variant, knobs in variants.items():
        lines.append(f"\n[variants.{variant}]")
        lines += [f"{knob} = {json.dumps(value)}" for knob, value in knobs.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def heldout_files(out: Path, variant: str, seeds: list[int]) -> list[Path]:
    return [out / "runs" / variant / "lr0.003" / f"seed{seed}" / "heldout.parquet" for seed in seeds]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("research-loop"), help="where everything is written")
    parser.add_argument("--updates", type=int, default=None, help="updates per run (default: the tiny recipe's)")
    parser.add_argument("--candidates", type=int, default=len(CANDIDATES), help="how many of the candidates to try")
    parser.add_argument("--max-seeds", type=int, default=4, help="K, each candidate's budget of seed pairs")
    parser.add_argument("--sesoi", type=float, default=0.02, help="the smallest effect of interest (relative ΔP)")
    args = parser.parse_args()
    out = args.out.resolve()
    (out / "grids").mkdir(parents=True, exist_ok=True)
    if not (out / "data" / "manifest.json").is_file():
        gatedv("prepare", "builtin:python-stdlib", "--out", out / "data", json_out=False)

    aa = grid_file(out / "grids" / "aa.toml", out, "aa", {"baseline": {}}, AA_SEEDS, args.updates)
    gatedv("sweep", aa)
    floor = gatedv("noise-floor", *heldout_files(out, "baseline", AA_SEEDS), "--out", out / "floor.json")
    print(floor["summary"].splitlines()[0])

    seeds = list(range(1, args.max_seeds + 1))
    rows = []
    for name, knobs in CANDIDATES[:args.candidates]:
        grid = grid_file(out / "grids" / f"{name}.toml", out, name, {"baseline": {}, name: knobs}, seeds,
                         args.updates)
        state = gatedv("sweep", grid, "--until-decided", "--noise-floor", out / "floor.json", "--sesoi",
                       args.sesoi, "--ledger", out / "ledger.db")["variants"][0]
        entry = state["ledger"]
        rows.append((name, state, entry))
        print(f"{name:<12} {state['line']}\n{'':<12} ledger: {entry['decision']} (stage-wise p {entry['p_value']:.3g} "
              f"at level {entry['level']:.3g})")
    summarise(rows, out, args.max_seeds)


def summarise(rows: list, out: Path, max_seeds: int) -> None:
    """What was kept, the runs spent against a fixed design, and the ledger's section of the report."""
    kept = [name for name, _, entry in rows if entry["decision"] == "keep"]
    trained = sum(state["n_pairs"] for _, state, _ in rows) + max(state["n_pairs"] for _, state, _ in rows)
    fixed = (len(rows) + 1) * max_seeds
    print(f"\nkept: {', '.join(kept) or 'none'}")
    print(f"runs trained for the candidates and their baseline: {trained}, against {fixed} for a fixed design of "
          f"{max_seeds} seed pairs each ({1 - trained / fixed:.0%} saved); the floor's A/A runs: {len(AA_SEEDS)}")
    report = out / "report.md"
    files = [path for name, state, _ in rows for path in heldout_files(out, name, list(range(1, state["n_pairs"] + 1)))]
    baseline = heldout_files(out, "baseline", list(range(1, max(state["n_pairs"] for _, state, _ in rows) + 1)))
    gatedv("report", *files, *baseline, "--ledger",
           out / "ledger.db", "--noise-floor", out / "floor.json", "--out", report, json_out=False)
    section = re.search(r"^## Research ledger.*?(?=^## |\Z)", report.read_text(encoding="utf-8"), re.M | re.S)
    print("\n" + (section.group(0).strip() if section else f"(no ledger section in {report})"))


if __name__ == "__main__":
    main()
