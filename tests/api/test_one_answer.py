"""One answer everywhere: the same files and settings give the same verdict in `bootstrap`, `analyze`, `arms`,
`report` and the Python API.

With two arms every entry point shows the single pair's verdict. With many arms sharing a reference, `arms`, the
report and `gv.arms` decide from the Holm-adjusted p-values over the arms, while `bootstrap` / `analyze` /
`gv.compare`, which see one pair, keep its unadjusted verdict (docs/method-statistics.md §10).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import gatedv_stats as gv
from gatedv_stats.io.lossfiles import write_loss_file
from gatedv_stats.testing import synthetic_runs
from helpers import invoke, invoke_json

SAMPLES = "200"


def clustered_runs(root: Path) -> Path:
    """Two arms, three seeds, 60 documents in 6 domains whose documents share the variant's effect: treated as
    independent documents the variant is worse, with domains as the sampled units no difference is detectable."""
    rng = np.random.default_rng(0)
    domain = np.repeat([f"d{k}" for k in range(6)], 10)
    n_targets = np.full(domain.size, 256)
    difficulty = rng.normal(3.0, 0.3, domain.size)
    domain_effect = np.repeat(rng.normal(0.01, 0.02, 6), 10)
    for seed in range(3):
        shift = rng.normal(0.0, 0.002)
        for arm, effect in (("baseline", 0.0), ("gatedv", 1.0)):
            nll = difficulty + rng.normal(0.0, 0.01, domain.size) + effect * (domain_effect + shift)
            docs = pd.DataFrame({"doc_id": [f"doc{i}" for i in range(domain.size)], "n_targets": n_targets,
                                 "loss_sum": nll * n_targets, "domain": domain})
            write_loss_file(root / f"{arm}_{seed}.parquet", docs, {"arm": arm, "seed": seed, "eval_set": "dev"})
    return root


def many_arm_runs(root: Path) -> Path:
    """Seven arms: a1 really better, a2 worse at p ≈ 0.02 alone but not after Holm's adjustment over six arms."""
    ppls = {"baseline": [30.0, 30.6, 30.2], "a1": [29.1, 29.7, 29.3], "a2": [30.3, 30.8, 30.55],
            "a3": [30.1, 30.5, 30.25], "a4": [29.9, 30.65, 30.1], "a5": [30.0, 30.62, 30.26], "a6": [29.95, 30.5, 30.2]}
    for run in synthetic_runs(ppls, n_docs=40, rng_seed=0):
        write_loss_file(root / f"{run.arm}_{run.seed}.parquet", run.docs, {**run.meta, "eval_set": "dev"})
    return root


def report_verdicts(root: Path, out: Path, *options: str) -> dict[str, str]:
    """Variant → verdict, from the Verdicts table of the Markdown report."""
    result = invoke("report", root, "--format", "md", "--out", out, "--samples", SAMPLES, *options)
    assert result.exit_code == 0, result.output
    section = out.read_text(encoding="utf-8").split("## Verdicts", 1)[1].split("\n## ", 1)[0]
    return {match[0]: match[1] for match in re.findall(r"^\| (\S+) \| \*\*([a-z ]+)\*\* \|", section, re.M)}


# (CLI options of bootstrap / analyze / report, of arms, the same as API keywords)
SETTINGS = {
    "defaults": ([], [], {}),
    "cluster": (["--cluster", "domain"], ["--cluster", "domain"], {"cluster": "domain"}),
    "sesoi": (["--sesoi", "0.05"], ["--sesoi", "0.05"], {"sesoi": 0.05}),
    "level": (["--level", "0.8"], ["--alpha", "0.2"], {"confidence_level": 0.8}),
}


@pytest.mark.parametrize("name", [name if name == "defaults" else pytest.param(name, marks=pytest.mark.slow)
                                  for name in SETTINGS])  # each setting runs every command: the defaults daily
def test_two_arms_get_one_verdict_from_every_command_and_the_api(tmp_path, name):
    root = clustered_runs(tmp_path / "runs")
    options, arms_options, keywords = SETTINGS[name]
    pair = ["--baseline-arm", "baseline", "--variant-arm", "gatedv"]
    verdicts = {
        "bootstrap": invoke_json("bootstrap", root, *pair, "--samples", SAMPLES, *options)["verdict"],
        "analyze": invoke_json("analyze", root, *pair, "--samples", SAMPLES, "--permutations", "200",
                            *options)["comparison"]["verdict"],
        "arms": invoke_json("arms", root, "--reference", "baseline", "--permutations", "200",
                         *arms_options)["arms"][0]["verdict"],
        "report": report_verdicts(root, tmp_path / "report.md", *options)["gatedv"],
        "gv.compare": gv.compare(root, baseline_arm="baseline", variant_arm="gatedv", n_resamples=200,
                                 **keywords).verdict_text,
        "gv.analyze": gv.analyze(root, baseline_arm="baseline", variant_arm="gatedv", n_resamples=200,
                                 n_permutations=200, **keywords).comparison.verdict_text,
        "gv.arms": gv.arms(root, reference="baseline", n_permutations=200,
                           **{("alpha" if key == "confidence_level" else key): (1 - value if key == "confidence_level"
                                                                               else value)
                              for key, value in keywords.items()}).arms.arms[0].verdict,
    }
    assert len(set(verdicts.values())) == 1, verdicts
    expected = {"defaults": "worse", "cluster": "no detectable difference", "sesoi": "equivalent", "level": "worse"}
    assert verdicts["bootstrap"] == expected[name]


@pytest.mark.slow  # seven arms through every command and two reports
def test_many_arms_get_the_holm_adjusted_verdict_from_arms_the_report_and_the_api(tmp_path):
    root = many_arm_runs(tmp_path / "runs")
    payload = invoke_json("arms", root, "--reference", "baseline", "--permutations", "200")
    arms = {arm["arm"]: arm for arm in payload["arms"]}
    adjusted = {arm: entry["verdict"] for arm, entry in arms.items()}
    assert report_verdicts(root, tmp_path / "report.md") == adjusted
    api = gv.arms(root, reference="baseline", n_permutations=200)
    assert {test.arm: test.verdict for test in api.arms.arms} == adjusted
    assert adjusted["a1"] == "better" and adjusted["a2"] == "no detectable difference"
    # one pair alone is judged at its own p: a2's 0.02 is "worse" there, 0.12 after Holm's adjustment over six arms
    alone = invoke_json("bootstrap", root, "--baseline-arm", "baseline", "--variant-arm", "a2", "--samples", SAMPLES)
    assert alone["verdict"] == "worse"
    assert arms["a2"]["seed_document_p_value"] < 0.05 < arms["a2"]["seed_document_p_holm"]
    assert gv.compare(root, baseline_arm="baseline", variant_arm="a2", n_resamples=200).verdict_text == "worse"
