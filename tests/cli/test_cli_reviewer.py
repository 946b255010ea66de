"""`gatedv analyze`, `gatedv arms`, `gatedv plan` end to end, and each bad-input case as one error line."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import gatedv_stats as gv
from gatedv_stats.core import formatting as fmt
from gatedv_stats.io.lossfiles import write_loss_file
from gatedv_stats.stats import metrics
from gatedv_stats.stats.permutation import sign_flip_test
from gatedv_stats.stats.resampling import document_bootstrap
from gatedv_stats.testing import synthetic_runs
from helpers import assert_input_error, invoke

N_DOCS = 30
PPLS = {"baseline": [30.0, 30.5, 29.8], "gatedv": [29.4, 29.9, 29.6], "q-silu": [30.4, 30.9, 30.1]}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """Three arms × three seeds as Parquet loss files with domain and n_bytes columns; written once for the module,
    whose tests only read them."""
    folder = tmp_path_factory.mktemp("runs")
    for run in synthetic_runs(PPLS, n_docs=N_DOCS, rng_seed=3, seeds=[11, 12, 13]):
        docs = run.docs.assign(domain=[f"site{i % 3}.org" for i in range(N_DOCS)])
        write_loss_file(folder / f"{run.arm}_{run.seed}.parquet", docs, {**run.meta, "eval_set": "dev"})
    return folder


def files(run_dir, arm):
    return sorted(str(path) for path in run_dir.glob(f"{arm}_*.parquet"))


def test_analyze_json_keeps_the_bootstrap_object_and_adds_the_reviewer_statistics(run_dir):
    common = ["--baseline", *files(run_dir, "baseline"), "--variant", *files(run_dir, "gatedv"),
              "--samples", "300", "--seed", "7"]
    result = invoke("analyze", *common, "--by", "domain", "--min-docs", "5", "--json")
    assert result.exit_code == 0, result.stderr
    payload = json.loads(result.stdout)
    assert set(payload) == {"comparison", "bca_interval", "permutation_test", "seed_uncertainty", "bits_per_byte",
                            "breakdowns", "notes", "inputs"}
    bootstrap = json.loads(invoke("bootstrap", *common, "--json").stdout)
    assert payload["comparison"] == bootstrap

    paired = gv.pair(baseline=files(run_dir, "baseline"), variant=files(run_dir, "gatedv"))
    d = metrics.document_differences(paired.baseline, paired.variant)
    bca = document_bootstrap(d, paired.n_units, n_resamples=300, rng_seed=7, method="bca")
    assert payload["bca_interval"] == pytest.approx(list(bca.confidence_interval), rel=1e-12)
    permutation = sign_flip_test(d, paired.n_units, n_permutations=10_000, rng_seed=7)
    assert payload["permutation_test"]["p_value"] == permutation.p_value
    assert payload["permutation_test"]["method"] == "monte-carlo" and payload["permutation_test"]["rng_seed"] == 7

    seed_level = payload["seed_uncertainty"]
    r = np.log(PPLS["gatedv"]) - np.log(PPLS["baseline"])
    assert seed_level["t_interval"]["nll_diff_mean"] == pytest.approx(r.mean(), rel=1e-9)
    assert seed_level["sign_test"]["improved"] == 3 and seed_level["sign_test"]["p_value"] == pytest.approx(0.125)
    assert seed_level["two_level_bootstrap"]["rng_seed"] == 7 and len(seed_level["limits"]) == 3
    assert seed_level["seed_permutation_test"]["min_attainable_p"] == 0.25

    n_bytes = paired.doc_columns["n_bytes"].to_numpy()
    expected_bpb = paired.baseline.sum(axis=1) / (np.log(2) * n_bytes.sum())
    assert payload["bits_per_byte"]["baseline"] == pytest.approx(expected_bpb, rel=1e-12)

    (by_domain,) = payload["breakdowns"]
    assert by_domain["column"] == "domain" and [g["group"] for g in by_domain["groups"]] == [
        "site0.org", "site1.org", "site2.org"]
    assert payload["inputs"]["baseline"] == files(run_dir, "baseline")


def test_analyze_text_and_long_table_mode(run_dir, tmp_path):
    frames = []
    for run in synthetic_runs(PPLS, n_docs=N_DOCS, rng_seed=3, seeds=[11, 12, 13]):
        frames.append(run.docs.assign(arm=run.arm, seed=run.seed))
    table = tmp_path / "long.csv"
    pd.concat(frames).to_csv(table, index=False)
    result = invoke("analyze", str(table), "--baseline-arm", "baseline", "--variant-arm", "q-silu",
                    "--samples", "200", "--by", "n_bytes", "--bins", "3")
    assert result.exit_code == 0, result.stderr
    text = result.stdout
    for fragment in ("reviewer statistics:", "BCa interval for D", "sign-flip permutation test", "0/3 pairs improved",
                     "critical t = 4.30", "cannot reach one-sided p ≤ 0.05", "bits per byte:",
                     "D by n_bytes (quantile bins)"):
        assert fragment in text, fragment


def test_analyze_with_one_seed_says_what_is_missing(run_dir):
    result = invoke("analyze", "--baseline", files(run_dir, "baseline")[0], "--variant", files(run_dir, "gatedv")[0],
                    "--samples", "200", "--json")
    assert result.exit_code == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["seed_uncertainty"] is None and "one seed pair" in payload["notes"][0]


def test_analyze_of_an_arm_against_itself_explains_the_missing_seed_statistics(run_dir):
    result = invoke("analyze", "--baseline", *files(run_dir, "baseline"), "--variant", *files(run_dir, "baseline"),
                    "--samples", "100", "--json")
    assert result.exit_code == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["seed_uncertainty"] is None and "spread is zero" in payload["notes"][0]
    assert payload["permutation_test"]["p_value"] == 1.0


@pytest.mark.parametrize("extra, fragments", [
    (["--by", "topic"], ["--by: no document column 'topic'", "available: n_targets, domain, n_bytes"]),
    (["--samples", "1"], ["--samples"]),
    (["--level", "1.5"], ["--level"]),
    (["--permutations", "0"], ["--permutations: must be at least 1"]),
    (["--permutations", "10000000000000"], ["--permutations: must be at most 10,000,000"]),
    (["--samples", "10000001"], ["--samples: must be at most 10,000,000"]),
    (["--by", "domain", "--min-docs", "1"], ["--min-docs"]),
])
def test_analyze_bad_input(run_dir, extra, fragments):
    result = invoke("analyze", "--baseline", *files(run_dir, "baseline"), "--variant", *files(run_dir, "gatedv"),
                    "--samples", "100", *extra)
    assert_input_error(result, *fragments)


def test_analyze_without_a_variant_is_an_input_error(run_dir):
    assert_input_error(invoke("analyze", "--baseline", *files(run_dir, "baseline")), "--variant")


def test_arms_adjusts_over_every_arm(run_dir):
    result = invoke("arms", str(run_dir), "--reference", "baseline", "--permutations", "500", "--json")
    assert result.exit_code == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["reference"] == "baseline" and [row["arm"] for row in payload["arms"]] == ["gatedv", "q-silu"]
    for row in payload["arms"]:
        assert row["t_p_holm"] >= row["t_p_bh"] >= row["t_p_value"]
        assert row["permutation_p_holm"] >= row["permutation_p_value"]
    assert [(item["arm"], item["eval_set"]) for item in payload["inputs"]] == [("gatedv", "dev"), ("q-silu", "dev")]
    assert all(row["verdict"] in ("better", "worse", "no detectable difference", "equivalent")
               for row in payload["arms"])
    text = invoke("arms", str(run_dir), "--reference", "gatedv", "--permutations", "500")
    assert text.exit_code == 0 and "every arm against gatedv (2 comparisons" in text.stdout


@pytest.mark.parametrize("extra, fragments", [
    (["--reference", "lstm"], ["--reference: no runs of arm 'lstm'", "baseline, gatedv, q-silu"]),
    (["--reference", "baseline", "--alpha", "0"], ["--alpha"]),
    (["--reference", "baseline", "--permutations", "0"], ["--permutations"]),
    (["--reference", "baseline", "--permutations", "10000000000000"], ["--permutations: must be at most 10,000,000"]),
    (["--reference", "baseline", "--eval-set", "heldout"], ["no run with eval_set 'heldout'"]),
])
def test_arms_bad_input(run_dir, extra, fragments):
    assert_input_error(invoke("arms", str(run_dir), *extra), *fragments)


def test_plan_prints_a_plan_and_its_json(run_dir):
    pilot = files(run_dir, "baseline") + files(run_dir, "gatedv")
    result = invoke("plan", *pilot, "--effect", "0.02")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("gatedv vs baseline")
    for fragment in ("variance components", "paired seeds needed on 30 documents:", "minimum detectable |ΔP|"):
        assert fragment in result.stdout
    payload = json.loads(invoke("plan", *pilot, "--effect", "0.02", "--json").stdout)
    assert payload["n_seeds"] == 3 and payload["n_docs"] == N_DOCS and payload["seeds_required"] >= 2
    assert payload["components"]["seed_ratio_var"] == pytest.approx(
        np.var(np.log(PPLS["gatedv"]) - np.log(PPLS["baseline"]), ddof=1), rel=1e-9)
    assert payload["variant_arm"] == "gatedv" and len(payload["inputs"]["baseline_sha256"]) == 3


@pytest.mark.parametrize("arms, extra, fragments", [
    (["baseline", "gatedv"], ["--effect", "0"], ["--effect"]),
    (["baseline", "gatedv"], ["--effect", "0.02", "--power", "1.5"], ["--power: must lie strictly between 0 and 1"]),
    (["baseline", "gatedv"], ["--effect", "0.02", "--alpha", "0"], ["--alpha: must lie strictly between 0 and 1"]),
    (["baseline"], ["--effect", "0.02"], ["the pilot holds runs of arm 'baseline' only"]),
    (["baseline", "gatedv", "q-silu"], ["--effect", "0.02"], ["--variant-arm", "baseline, gatedv, q-silu"]),
    (["gatedv", "q-silu"], ["--effect", "0.02"], ["--baseline-arm"]),
])
def test_plan_bad_input(run_dir, arms, extra, fragments):
    pilot = [path for arm in arms for path in files(run_dir, arm)]
    assert_input_error(invoke("plan", *pilot, *extra), *fragments)


def test_plan_with_one_seed_is_an_input_error(run_dir):
    pilot = [files(run_dir, "baseline")[0], files(run_dir, "gatedv")[0]]
    assert_input_error(invoke("plan", *pilot, "--effect", "0.02"), "at least 2 paired seeds")


def test_reviewer_report_section_renders_through_the_report_templates(run_dir, tmp_path):
    from gatedv_stats.analysis.experiment import AnalysisSettings, analyze_experiment
    from gatedv_stats.analysis.pair import analyze
    from gatedv_stats.io.discovery import discover_inputs
    from gatedv_stats.reporting import render_report
    from gatedv_stats.reporting.model import ReportData
    from gatedv_stats.reporting.sections.reviewer import reviewer_section

    analysis = analyze_experiment(discover_inputs([run_dir]),
                                  AnalysisSettings(reference=None, n_resamples=200, rng_seed=3))
    section = reviewer_section(analysis)
    assert [table.key for table in section.tables] == ["reviewer-dev", "reviewer-arms-dev"]
    assert [figure.key for figure in section.figures] == ["forest-dev"]
    report = ReportData(title="t", subtitle="s", version="0", reference=analysis.reference, sections=(section,))
    text = render_report(report, tmp_path / "report.md", "md").read_text(encoding="utf-8")
    paired = gv.pair(baseline=files(run_dir, "baseline"), variant=files(run_dir, "gatedv"))
    expected = analyze(paired, n_resamples=200, rng_seed=3, by=("domain",))
    gatedv_row = next(line for line in text.splitlines() if line.startswith("| gatedv |"))
    interval = expected.seed_level.bootstrap.confidence_interval
    assert f"[{fmt.format_delta_p(interval.low)}, {fmt.format_delta_p(interval.high)}]" in gatedv_row
    assert f"{expected.permutation.p_value:.3g}" in gatedv_row and "3/3, p = 0.125" in gatedv_row
    assert fmt.format_interval(*expected.bca_interval) in gatedv_row
    assert "Holm" in text and "Benjamini–Hochberg" in text and "With 3 seed pairs" in text
    assert "per group of documents (domain)" in text
    assert (tmp_path / "report_figures" / "forest-dev.svg").read_text(encoding="utf-8").startswith("<svg")


def test_reviewer_section_without_document_groups_has_no_forest_plot(tmp_path):
    """Two documents: every domain is below the smallest group, so there is nothing to plot, and that is fine."""
    from gatedv_stats.analysis.experiment import AnalysisSettings, analyze_experiment
    from gatedv_stats.io.discovery import discover_inputs
    from gatedv_stats.reporting.sections.reviewer import reviewer_section

    for run in synthetic_runs(PPLS, n_docs=2, rng_seed=3, seeds=[11, 12, 13]):
        docs = run.docs.assign(domain=["a.org", "b.org"])
        write_loss_file(tmp_path / f"{run.arm}_{run.seed}.parquet", docs, {**run.meta, "eval_set": "dev"})
    analysis = analyze_experiment(discover_inputs([tmp_path]),
                                  AnalysisSettings(reference=None, n_resamples=50, rng_seed=3))
    section = reviewer_section(analysis)
    assert [table.key for table in section.tables] == ["reviewer-dev", "reviewer-arms-dev"]
    assert section.figures == ()
