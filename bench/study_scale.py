"""A big study end to end: 12 arms × 5 seeds × 100,000 documents, `gatedv arms` and `gatedv report` against a plain
pandas + scipy pipeline.

    PYTHONPATH=$PWD python bench/study_scale.py [--out DIR] [--json]

Writes the study once (a fixed seed; reused when DIR already holds it): one Parquet loss file per arm and seed
(`gatedv_stats.io.lossfiles.write_loss_file`), doc ids in a shuffled order, n_targets 64–256, about 3,000
domains of unequal size, n_bytes; arms baseline, v1 … v11 (natural order matters: v2 before v10); a crossed
seed × document structure (document difficulty, a seed effect shared by the arms and one per arm and seed, a
per-run document noise, an arm × document interaction) with small true effects for some arms. Then times, each
in a fresh subprocess, with its CPU time and peak memory: the largest process's `ru_maxrss` (from `os.wait4`)
and the summed RSS of the process and its workers (`gatedv report` analyzes a large study's comparisons on one
process per CPU), sampled every 0.1 s from /proc:

* `gatedv arms DIR --reference baseline --json` (stdout to a file, read back for the agreement check);
* `gatedv report DIR --format html --out …`;
* the peer: every file read with pandas, the per-arm figures `gatedv arms` prints (P̄, ΔP, improved pairs, D,
  the seed-and-document interval and p, the paired t on per-seed log ratios, the sign-flip p with the same
  number of sign vectors, Holm and BH with statsmodels), written plainly (`plain_pipeline` below).

It prints the times, the peak memory, the ratios and how far the peer's figures are from ours.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ARMS = ["baseline"] + [f"v{k}" for k in range(1, 12)]
# true per-token effect of each arm against the baseline (nats); most are small, some are zero
EFFECTS = {"baseline": 0.0, "v1": -0.010, "v2": -0.006, "v3": -0.003, "v4": -0.001, "v5": 0.0, "v6": 0.0,
           "v7": 0.002, "v8": 0.005, "v9": 0.0, "v10": -0.004, "v11": 0.001}
SEEDS = [0, 1, 2, 3, 4]
N_DOCS = 100_000
N_DOMAINS = 3_000
STUDY_SEED = 20261130
N_PERMUTATIONS = 10_000  # `gatedv arms --permutations` default
ALPHA = 0.05
GOAL_SECONDS, GOAL_BYTES = 60.0, 4 * 2**30


def study_spec() -> dict:
    return {"arms": ARMS, "effects": EFFECTS, "seeds": SEEDS, "n_docs": N_DOCS, "n_domains": N_DOMAINS,
            "seed": STUDY_SEED}


def write_study(out: Path) -> bool:
    """Write the study under `out` unless it is there already (same spec); True when written now."""
    import pandas as pd

    from gatedv_stats.io.lossfiles import write_loss_file

    marker = out / "study.json"
    if marker.exists() and json.loads(marker.read_text()) == study_spec():
        return False
    rng = np.random.default_rng(STUDY_SEED)
    doc_ids = np.array([f"doc-{k:06d}" for k in rng.permutation(N_DOCS)], dtype=object)
    n_targets = rng.integers(64, 257, size=N_DOCS)
    domain_weights = rng.lognormal(0.0, 1.0, size=N_DOMAINS)
    domain_index = rng.choice(N_DOMAINS, size=N_DOCS, p=domain_weights / domain_weights.sum())
    domains = np.array([f"domain-{k:04d}" for k in range(N_DOMAINS)], dtype=object)[domain_index]
    n_bytes = np.maximum(1, np.round(n_targets * rng.normal(4.2, 0.4, size=N_DOCS))).astype(np.int64)
    difficulty = 3.0 + rng.normal(0.0, 0.2, size=N_DOMAINS)[domain_index] + rng.normal(0.0, 0.4, size=N_DOCS)
    shared_seed = rng.normal(0.0, 0.004, size=len(SEEDS))
    for arm in ARMS:
        arm_by_doc = rng.normal(0.0, 0.02, size=N_DOCS) if arm != "baseline" else 0.0
        for k, seed in enumerate(SEEDS):
            nll = (difficulty + EFFECTS[arm] + arm_by_doc + shared_seed[k] + rng.normal(0.0, 0.003)
                   + rng.normal(0.0, 0.05, size=N_DOCS))
            docs = pd.DataFrame({"doc_id": doc_ids, "n_targets": n_targets,
                                 "loss_sum": n_targets * np.maximum(nll, 0.05), "domain": domains,
                                 "n_bytes": n_bytes})
            meta = {"arm": arm, "seed": seed, "eval_set": "heldout", "lr": 0.003,
                    "eval_set_sha256": "ab" * 32, "tokenizer_sha256": "cd" * 32}
            write_loss_file(out / arm / f"seed{seed}" / "heldout.parquet", docs, meta)
    marker.write_text(json.dumps(study_spec()))
    return True


def timed(command: list[str], stdout_path: Path | None = None) -> dict:
    """Wall seconds, CPU seconds (the child and its worker processes), the largest process's peak RSS
    (`ru_maxrss` from `os.wait4`) and the peak summed RSS of the whole process tree (sampled every 0.1 s)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(stdout_path or os.devnull, "wb") as stdout:
        start = time.perf_counter()
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=stdout, stderr=subprocess.PIPE)
        tree_peak = [0]
        sampler = threading.Thread(target=_sample_tree_rss, args=(process, tree_peak), daemon=True)
        sampler.start()
        assert process.stderr is not None  # stderr=PIPE
        stderr = process.stderr.read().decode(errors="replace")
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    sampler.join()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({process.returncode}):\n{stderr[-2000:]}")
    return {"command": " ".join(command), "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_bytes": usage.ru_maxrss * 1024, "peak_tree_rss_bytes": tree_peak[0]}


def _sample_tree_rss(process: subprocess.Popen, peak: list) -> None:
    """Keep in peak[0] the largest sum of resident memory over `process` and its descendants (Linux /proc)."""
    while process.returncode is None and Path(f"/proc/{process.pid}").exists():
        total, pending = 0, [process.pid]
        while pending:
            pid = pending.pop()
            try:
                status = Path(f"/proc/{pid}/status").read_text()
                total += int(status.split("VmRSS:")[1].split()[0]) * 1024 if "VmRSS:" in status else 0
                for task in Path(f"/proc/{pid}/task").iterdir():
                    pending += [int(child) for child in (task / "children").read_text().split()]
            except (OSError, ValueError):
                continue  # the process ended meanwhile
        peak[0] = max(peak[0], total)
        time.sleep(0.1)


# --- the peer: what a researcher writes without this tool (pandas, scipy, statsmodels; no gatedv_stats) ---

def read_study(directory: Path):
    """Every loss file under `directory` as one long pandas frame (arm and seed from the Parquet metadata)."""
    import pandas as pd
    import pyarrow.parquet as pq

    frames = []
    for path in sorted(directory.rglob("*.parquet")):
        table = pq.read_table(path)
        meta = {key.decode(): json.loads(value) for key, value in table.schema.metadata.items() if key != b"pandas"}
        frames.append(table.to_pandas().assign(arm=meta["arm"], seed=int(meta["seed"])))
    return pd.concat(frames, ignore_index=True)


def seed_document_fit(y: np.ndarray, n: np.ndarray, confidence_level: float) -> dict:
    """Method-of-moments fit of the crossed seed × document model to per-token differences y (S, N)."""
    from scipy import stats

    n_seeds = y.shape[0]
    w = n / n.sum()
    per_seed = y @ w
    d = per_seed.mean()
    v_seed = per_seed.var(ddof=1)
    doc_means = y.mean(axis=0)
    q_doc = np.sum(w**2 * (doc_means - d) ** 2)
    q_int = np.sum(w**2 * (y - doc_means - (per_seed - d)[:, None]) ** 2) / (n_seeds - 1)
    w2, w3 = np.sum(w**2), np.sum(w**3)
    kappa = w2 - 2 * w3 + w2**2
    doc_var = (q_doc - q_int / n_seeds) / kappa
    # effective df of Q_doc, (tr A)² / tr(A²) for A = (I − w1ᵀ) diag(w²) (I − 1wᵀ) = diag(ω) + G K Gᵀ
    omega = w**2
    g = np.stack([omega, w], axis=1)
    k = np.array([[0.0, -1.0], [-1.0, omega.sum()]])
    tr_a = omega.sum() - 2 * np.dot(omega, w) + omega.sum() ** 2
    tr_a2 = np.sum(omega**2) + 2 * np.trace(k @ g.T @ (omega[:, None] * g)) + np.trace(k @ g.T @ g @ k @ g.T @ g)
    nu_doc = tr_a**2 / tr_a2
    nu_int = (n_seeds - 1) * nu_doc
    # the document term is pooled into the interaction unless its F pre-test is significant at 0.25
    pooled = doc_var < 0 or stats.f.sf(q_doc / (q_int / n_seeds), nu_doc, nu_int) >= 0.25
    seed_part, doc_part = v_seed / n_seeds, 0.0 if pooled else w2 * doc_var
    var_d = seed_part + doc_part
    doc_noise = 0.0 if pooled else (w2 / kappa * q_doc) ** 2 / nu_doc + (w2 / kappa / n_seeds * q_int) ** 2 / nu_int
    satterthwaite = var_d**2 / (seed_part**2 / (n_seeds - 1) + doc_noise)
    df = min(satterthwaite, (n_seeds - 1) * var_d / seed_part)
    se = np.sqrt(var_d)
    half = stats.t.ppf(0.5 + confidence_level / 2, df) * se
    return {"d": d, "se": se, "df": df, "low": d - half, "high": d + half,
            "p": 2 * stats.t.sf(abs(d) / se, df)}


def sign_flip_p(d: np.ndarray, n: np.ndarray, n_vectors: int, seed: int) -> float:
    """Two-sided Monte Carlo sign-flip p of Σ d / Σ n, in chunks of 100 sign vectors."""
    rng = np.random.default_rng(seed)
    observed = d.sum() / n.sum()
    tolerance = 1e-10 * np.abs(d).sum() / n.sum()
    extreme = 0
    for start in range(0, n_vectors, 100):
        signs = 1.0 - 2.0 * rng.integers(0, 2, size=(min(100, n_vectors - start), d.size))
        extreme += int(np.sum(np.abs(signs @ d / n.sum()) >= abs(observed) - tolerance))
    return (extreme + 1) / (n_vectors + 1)


def plain_pipeline(directory: Path) -> dict:
    """Per-arm figures of `gatedv arms --reference baseline`, computed with pandas, scipy and statsmodels."""
    from scipy import stats
    from statsmodels.stats.multitest import multipletests

    long = read_study(directory)
    wide = long.pivot(index="doc_id", columns=["arm", "seed"], values="loss_sum")
    n = long.groupby("doc_id")["n_targets"].first().reindex(wide.index).to_numpy(dtype=np.float64)
    nll = wide.sum() / n.sum()  # per run
    ppl = np.exp(nll)
    reference = wide["baseline"].to_numpy().T  # (S, N)
    rows = []
    for arm in [arm for arm in long["arm"].unique() if arm != "baseline"]:
        variant = wide[arm].to_numpy().T
        log_ratios = (nll[arm] - nll["baseline"]).to_numpy()
        fit = seed_document_fit((variant - reference) / n, n, 1 - ALPHA)
        log_ratio = np.log(ppl[arm].mean() / ppl["baseline"].mean())
        rows.append({"arm": arm, "ppl_mean": ppl[arm].mean(), "reference_ppl_mean": ppl["baseline"].mean(),
                     "delta_p": ppl[arm].mean() / ppl["baseline"].mean() - 1,
                     "improved_pairs": int((ppl[arm] < ppl["baseline"]).sum()), "nll_diff_mean": log_ratios.mean(),
                     "nll_diff_seed_document_ci": [fit["low"], fit["high"]],
                     "delta_p_seed_document_ci": [np.expm1(log_ratio - (fit["high"] - fit["d"])),
                                                  np.expm1(log_ratio + (fit["high"] - fit["d"]))],
                     "seed_document_p_value": fit["p"], "t_p_value": stats.ttest_1samp(log_ratios, 0.0).pvalue,
                     "permutation_p_value": sign_flip_p((variant - reference).mean(axis=0), n, N_PERMUTATIONS, 0)})
    for family in ("seed_document", "t", "permutation"):
        raw = [row[f"{family}_p_value"] for row in rows]
        for method, key in (("holm", "holm"), ("fdr_bh", "bh")):
            for row, value in zip(rows, multipletests(raw, method=method)[1]):
                row[f"{family}_p_{key}"] = value
    for row in rows:
        significant = row["seed_document_p_holm"] <= ALPHA
        row["verdict"] = ("better" if row["nll_diff_mean"] < 0 else "worse") if significant \
            else "no detectable difference"
    return {"arms": [{key: (value.tolist() if isinstance(value, np.ndarray) else value) for key, value in row.items()}
                     for row in rows]}


def agreement(ours: dict, peer: dict) -> dict:
    """Largest relative difference of each deterministic figure, the permutation p's largest difference in Monte
    Carlo SEs, whether the verdicts agree, and our arm order."""
    theirs = {row["arm"]: row for row in peer["arms"]}
    worst: dict = {}
    permutation_z = 0.0
    for row in ours["arms"]:
        other = theirs[row["arm"]]
        for key in ("ppl_mean", "delta_p", "nll_diff_mean", "nll_diff_seed_document_ci", "delta_p_seed_document_ci",
                    "seed_document_p_value", "seed_document_p_holm", "t_p_value", "t_p_holm", "improved_pairs"):
            a, b = np.ravel(row[key]).astype(float), np.ravel(other[key]).astype(float)
            relative = float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300)))
            worst[key] = max(worst.get(key, 0.0), relative)
        p, q = row["permutation_p_value"], other["permutation_p_value"]
        se = np.sqrt(2 * max(p * (1 - p), 1.0 / N_PERMUTATIONS) / N_PERMUTATIONS)
        permutation_z = max(permutation_z, abs(p - q) / se)
    return {"max_relative_difference": worst, "permutation_p_max_difference_in_se": permutation_z,
            "verdicts_agree": all(row["verdict"] == theirs[row["arm"]]["verdict"] for row in ours["arms"]),
            "arm_order": [row["arm"] for row in ours["arms"]]}


def run_peer(directory: Path, out: Path) -> None:
    out.write_text(json.dumps(plain_pipeline(directory)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "gatedv-study-scale",
                        help="study directory (written once, reused)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--peer", nargs=2, type=Path, metavar=("STUDY", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:  # the plain pipeline in its own process, for its own peak RSS
        return run_peer(*args.peer)
    study = args.out.resolve()
    start = time.perf_counter()
    written = write_study(study)
    setup = time.perf_counter() - start
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        arms = timed([sys.executable, "cli.py", "arms", str(study), "--reference", "baseline", "--json"],
                     tmp / "arms.json")
        report = timed([sys.executable, "cli.py", "report", str(study), "--format", "html", "--out",
                        str(tmp / "report.html")])
        report["html_bytes"] = (tmp / "report.html").stat().st_size
        peer = timed([sys.executable, __file__, "--peer", str(study), str(tmp / "peer.json")])
        check = agreement(json.loads((tmp / "arms.json").read_text()), json.loads((tmp / "peer.json").read_text()))
    figures = {"machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPUs, Python "
                          f"{platform.python_version()}, numpy {np.__version__}",
               "study": {**study_spec(), "directory": str(study), "written_now": written, "setup_s": setup},
               "load_average_before": load, "load_average_after": os.getloadavg(),
               "arms": arms, "report": report, "peer": peer,
               "ratios": {"peer_over_arms": peer["wall_s"] / arms["wall_s"],
                          "peer_over_report": peer["wall_s"] / report["wall_s"]},
               "agreement": check}
    print(json.dumps(figures, indent=2) if args.json else text(figures))


def text(figures: dict) -> str:
    lines = [f"machine: {figures['machine']}",
             f"study: {len(ARMS)} arms × {len(SEEDS)} seeds × {N_DOCS:,} documents in {figures['study']['directory']}"
             f" ({'written' if figures['study']['written_now'] else 'reused'}, {figures['study']['setup_s']:.1f} s)",
             "load average before: " + ", ".join(f"{v:.2f}" for v in figures["load_average_before"])
             + "; after: " + ", ".join(f"{v:.2f}" for v in figures["load_average_after"])]
    for key, name in (("arms", "gatedv arms --json"), ("report", "gatedv report --format html"),
                      ("peer", "plain pandas + scipy pipeline")):
        run = figures[key]
        met = run["wall_s"] < GOAL_SECONDS and run["peak_tree_rss_bytes"] < GOAL_BYTES
        goal = "" if key == "peer" else (" ✔" if met else " ✘") + " (goal < 60 s, < 4 GiB)"
        lines.append(f"{name:<32} wall {run['wall_s']:7.2f} s  CPU {run['cpu_s']:7.2f} s  peak RSS "
                     f"{run['peak_rss_bytes'] / 2**20:6.0f} MiB (all its processes: "
                     f"{run['peak_tree_rss_bytes'] / 2**20:6.0f} MiB){goal}")
    ratios, check = figures["ratios"], figures["agreement"]
    lines += [f"HTML report: {figures['report']['html_bytes'] / 2**20:.2f} MiB",
              f"peer / arms: {ratios['peer_over_arms']:.2f}×   peer / report: {ratios['peer_over_report']:.2f}×",
              "agreement with the peer (largest relative difference): "
              + ", ".join(f"{key} {value:.1e}" for key, value in check["max_relative_difference"].items()),
              f"permutation p: largest difference {check['permutation_p_max_difference_in_se']:.2f} Monte Carlo SEs; "
              f"verdicts agree: {check['verdicts_agree']}; arm order: {', '.join(check['arm_order'])}"]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
