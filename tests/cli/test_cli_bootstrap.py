"""`gatedv bootstrap` end to end: both input modes, the JSON keys, and every bad-input case."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest

from gatedv_stats.io.lossfiles import write_loss_file
from gatedv_stats.testing import synthetic_runs
from helpers import assert_input_error, invoke

# The paper's keys, then the verdict and its seed-and-document interval, standard errors and notes.
JSON_KEYS = {"baseline", "variant", "delta_p", "improved_pairs", "n_pairs", "nll_diff_mean", "nll_diff_ci",
             "ci_level", "ci_method", "bootstrap_samples", "bootstrap_seed", "wins", "n_docs", "win_rate",
             "verdict", "verdict_explanation", "verdict_detail", "nll_diff_seed_document_ci",
             "nll_diff_seed_document_df", "delta_p_seed_document_ci", "variance_components", "standard_errors",
             "nll_diff_ci_kind", "nll_diff_seed_document_ci_kind", "confidence_level", "cluster", "n_clusters",
             "win_rate_ci", "unit", "notes", "noise_floor"}
ARM_KEYS = {"arm", "seeds", "nll", "ppl", "ppl_mean", "ppl_sd"}
N_DOCS = 40


@pytest.fixture
def run_files(tmp_path):
    """Three paired seeds of baseline and gatedv as Parquet loss files; returns (baseline paths, variant paths)."""
    runs = synthetic_runs({"baseline": [30.0, 30.5, 29.8], "gatedv": [29.4, 29.9, 29.6]}, n_docs=N_DOCS, rng_seed=3,
                          seeds=[11, 12, 13])
    paths: dict[str, list[str]] = {"baseline": [], "gatedv": []}
    for run in runs:
        path = tmp_path / f"{run.arm}_{run.seed}.parquet"
        write_loss_file(path, run.docs, {**run.meta, "eval_set": "dev"})
        paths[run.arm].append(str(path))
    return paths["baseline"], paths["gatedv"]


def write_csv(path, frame: pd.DataFrame) -> str:
    frame.to_csv(path, index=False)
    return str(path)


def good_frame(seed: int, arm: str = "baseline", n_docs: int = 6) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"doc_id": [f"d{i}" for i in range(n_docs)], "n_targets": 256,
                         "loss_sum": rng.uniform(800, 900, n_docs), "arm": arm, "seed": seed})


def test_json_has_exactly_the_issue_keys_and_matches_the_text_table(run_files):
    baseline, variant = run_files
    result = invoke("bootstrap", "--baseline", *baseline, "--variant", *variant, "--samples", "300", "--json")
    assert result.exit_code == 0, result.stderr
    payload = json.loads(result.stdout)
    assert set(payload) == JSON_KEYS
    assert set(payload["baseline"]) == ARM_KEYS and set(payload["variant"]) == ARM_KEYS
    assert payload["baseline"]["seeds"] == [11, 12, 13] and payload["n_pairs"] == 3
    assert payload["n_docs"] == N_DOCS and payload["bootstrap_samples"] == 300 and payload["bootstrap_seed"] == 0
    assert payload["ci_level"] == 0.95
    assert payload["baseline"]["ppl"] == pytest.approx([30.0, 30.5, 29.8], rel=1e-12)
    assert payload["delta_p"] == pytest.approx(np.mean([29.4, 29.9, 29.6]) / np.mean([30.0, 30.5, 29.8]) - 1, rel=1e-12)
    assert payload["improved_pairs"] == 3
    low, high = payload["nll_diff_ci"]
    assert low <= payload["nll_diff_mean"] <= high
    assert payload["win_rate"] == payload["wins"] / N_DOCS

    text = invoke("bootstrap", "--baseline", *baseline, "--variant", *variant, "--samples", "300")
    assert text.exit_code == 0
    assert "30.100 ± 0.361" in text.stdout  # mean and SD of 30.0, 30.5, 29.8
    assert "3/3" in text.stdout and "\u2212" in text.stdout


def test_long_table_mode_equals_file_mode(run_files, tmp_path):
    baseline, variant = run_files
    frames = [pd.read_parquet(path).assign(arm=arm, seed=seed)
              for arm, paths in (("baseline", baseline), ("gatedv", variant))
              for seed, path in zip((11, 12, 13), paths)]
    table = write_csv(tmp_path / "long.csv", pd.concat(frames).sample(frac=1.0, random_state=0))
    by_files = json.loads(invoke("bootstrap", "--baseline", *baseline, "--variant", *variant, "--samples", "200",
                                 "--json").stdout)
    by_table = invoke("bootstrap", table, "--baseline-arm", "baseline", "--variant-arm", "gatedv", "--samples", "200",
                      "--json")
    assert by_table.exit_code == 0, by_table.stderr
    assert json.loads(by_table.stdout) == by_files  # CSV keeps every digit of a float64


def test_repeated_options_and_directories_are_accepted(run_files, tmp_path):
    baseline, variant = run_files
    repeated = invoke("bootstrap", "--baseline", baseline[0], "--baseline", baseline[1], "--baseline", baseline[2],
                      "--variant", *variant, "--samples", "100", "--json")
    directory = invoke("bootstrap", str(tmp_path), "--baseline-arm", "baseline", "--variant-arm", "gatedv",
                       "--eval-set", "dev", "--samples", "100", "--json")
    assert repeated.exit_code == 0 and directory.exit_code == 0, (repeated.stderr, directory.stderr)
    assert json.loads(repeated.stdout) == json.loads(directory.stdout)


@pytest.mark.parametrize(("cell_column", "value", "message"), [
    ("loss_sum", "abc", "row 3: loss_sum 'abc' is not a number"),
    ("loss_sum", "", "row 3: loss_sum is missing or NaN"),
    ("loss_sum", "nan", "row 3: loss_sum is missing or NaN"),
    ("loss_sum", "inf", "row 3: loss_sum is infinite"),
    ("loss_sum", "-1.5", "row 3: loss_sum is negative (-1.5)"),
    ("n_targets", "0", "row 3: n_targets must be >= 1"),
    ("n_targets", "-4", "row 3: n_targets must be >= 1 (-4)"),
    ("n_targets", "2.5", "row 3: n_targets is not an integer (2.5)"),
    ("n_targets", "many", "row 3: n_targets 'many' is not a number"),
])
def test_bad_cells_name_file_row_and_field(tmp_path, cell_column, value, message):
    frame = good_frame(1).astype({cell_column: object})
    frame.loc[2, cell_column] = value
    bad = write_csv(tmp_path / "bad.csv", frame)
    good = write_csv(tmp_path / "good.csv", good_frame(1, "gatedv"))
    assert_input_error(invoke("bootstrap", "--baseline", bad, "--variant", good), "bad.csv", message)


def test_missing_or_misnamed_column(tmp_path):
    good = write_csv(tmp_path / "good.csv", good_frame(1, "gatedv"))
    misnamed = write_csv(tmp_path / "misnamed.csv", good_frame(1).rename(columns={"loss_sum": "losssum"}))
    assert_input_error(invoke("bootstrap", "--baseline", misnamed, "--variant", good), "misnamed.csv",
                       "missing column 'loss_sum' (did you mean 'losssum'?)")
    missing = write_csv(tmp_path / "missing.csv", good_frame(1).drop(columns=["n_targets"]))
    assert_input_error(invoke("bootstrap", "--baseline", missing, "--variant", good), "missing.csv",
                       "missing column 'n_targets'; its per-document columns are doc_id, loss_sum")


def test_duplicate_doc_id(tmp_path):
    frame = good_frame(1)
    frame.loc[4, "doc_id"] = "d1"
    bad = write_csv(tmp_path / "dup.csv", frame)
    good = write_csv(tmp_path / "good.csv", good_frame(1, "gatedv"))
    assert_input_error(invoke("bootstrap", "--baseline", bad, "--variant", good), "dup.csv", "duplicate doc_id 'd1'",
                       "rows 2, 5")


def test_empty_unreadable_and_absent_files(tmp_path):
    good = write_csv(tmp_path / "good.csv", good_frame(1, "gatedv"))
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    assert_input_error(invoke("bootstrap", "--baseline", str(empty), "--variant", good), "empty.csv", "empty file")
    header_only = tmp_path / "header.csv"
    header_only.write_text("doc_id,n_targets,loss_sum,arm,seed\n")
    assert_input_error(invoke("bootstrap", "--baseline", str(header_only), "--variant", good), "header.csv", "no rows")
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"this is not parquet at all")
    assert_input_error(invoke("bootstrap", "--baseline", str(garbage), "--variant", good), "garbage.parquet",
                       "cannot read")
    assert_input_error(invoke("bootstrap", "--baseline", str(tmp_path / "absent.csv"), "--variant", good), "absent.csv",
                       "no such file")


def test_missing_arm_or_seed_metadata(tmp_path):
    good = write_csv(tmp_path / "good.csv", good_frame(1, "gatedv"))
    no_seed = write_csv(tmp_path / "noseed.csv", good_frame(1).drop(columns=["seed"]))
    assert_input_error(invoke("bootstrap", "--baseline", no_seed, "--variant", good), "noseed.csv",
                       "no 'seed' recorded")


def test_documents_that_differ_between_paired_runs(tmp_path):
    base = write_csv(tmp_path / "base.csv", good_frame(1, n_docs=12))
    fewer = write_csv(tmp_path / "fewer.csv", good_frame(1, "gatedv", n_docs=12).iloc[:9])
    assert_input_error(invoke("bootstrap", "--baseline", base, "--variant", fewer),
                       "documents differ between paired runs", "3 doc_ids missing from", "fewer.csv",
                       "(first: d10, d11, d9)")


def test_n_targets_that_disagree(tmp_path):
    base = write_csv(tmp_path / "base.csv", good_frame(1))
    other = good_frame(1, "gatedv")
    other.loc[3, "n_targets"] = 255
    variant = write_csv(tmp_path / "variant.csv", other)
    assert_input_error(invoke("bootstrap", "--baseline", base, "--variant", variant),
                       "n_targets disagrees for 1 documents", "d3: 256 vs 255")


def test_seeds_in_one_arm_only_and_allow_unpaired(tmp_path):
    baseline = [write_csv(tmp_path / f"b{seed}.csv", good_frame(seed)) for seed in (1, 2, 3)]
    variant = [write_csv(tmp_path / f"v{seed}.csv", good_frame(seed, "gatedv")) for seed in (1, 2, 4)]
    assert_input_error(invoke("bootstrap", "--baseline", *baseline, "--variant", *variant),
                       "seeds present in one arm only: baseline 3; gatedv 4")
    result = invoke("bootstrap", "--baseline", *baseline, "--variant", *variant, "--allow-unpaired", "--samples", "50",
                    "--json")
    assert result.exit_code == 0, result.stderr
    assert "warning: dropped unpaired seeds 3, 4" in result.stderr
    assert json.loads(result.stdout)["baseline"]["seeds"] == [1, 2]


def test_one_seed_reports_everything_but_the_sd(tmp_path):
    baseline = write_csv(tmp_path / "b.csv", good_frame(1))
    variant = write_csv(tmp_path / "v.csv", good_frame(2, "gatedv").assign(seed=1))
    result = invoke("bootstrap", "--baseline", baseline, "--variant", variant, "--samples", "50", "--json")
    assert result.exit_code == 0, result.stderr
    assert "standard deviation over seeds is undefined" in result.stderr
    payload = json.loads(result.stdout)
    assert payload["baseline"]["ppl_sd"] is None and payload["n_pairs"] == 1
    assert math.isfinite(payload["delta_p"]) and all(map(math.isfinite, payload["nll_diff_ci"]))


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--level", "1.5", "--level: must lie strictly between 0 and 1"),
    ("--samples", "1", "--samples: must be at least 2"),
    ("--samples", "10000000000000", "--samples: must be at most 10,000,000"),
    ("--method", "basic", "--method: must be one of percentile, bca"),
])
def test_bad_options(run_files, option, value, message):
    baseline, variant = run_files
    assert_input_error(invoke("bootstrap", "--baseline", *baseline, "--variant", *variant, option, value), message)


def test_bca_needs_two_documents(tmp_path):
    baseline = write_csv(tmp_path / "b.csv", good_frame(1, n_docs=1))
    variant = write_csv(tmp_path / "v.csv", good_frame(1, "gatedv", n_docs=1))
    assert_input_error(invoke("bootstrap", "--baseline", baseline, "--variant", variant, "--method", "bca"),
                       "the BCa interval needs at least two documents")


def test_long_table_needs_the_arm_names(run_files, tmp_path):
    assert_input_error(invoke("bootstrap", str(tmp_path), "--baseline-arm", "baseline"),
                       "--variant-arm", "arms found: baseline, gatedv")
    assert_input_error(invoke("bootstrap", str(tmp_path), "--baseline-arm", "baseline", "--variant-arm", "nope"),
                       "variant: no run with arm 'nope'")


def test_a_file_or_directory_given_twice_is_refused_naming_it(run_files, tmp_path):
    baseline, variant = run_files
    assert_input_error(invoke("bootstrap", "--baseline", baseline[0], baseline[0], "--variant", *variant[:2]),
                       f"error: {baseline[0]}: given twice among the inputs")
    assert_input_error(invoke("bootstrap", str(tmp_path), f"{tmp_path}/.", "--baseline-arm", "baseline",
                              "--variant-arm", "gatedv"),
                       f"error: {tmp_path}/.: given twice among the inputs (also as {tmp_path})")


@pytest.mark.parametrize(("level", "shown"), [("0.999", "99.9%"), ("1e-9", "0.0000001%"), ("0.95", "95%")])
def test_the_confidence_level_is_printed_one_way_everywhere(run_files, level, shown):
    baseline, variant = run_files
    result = invoke("bootstrap", "--baseline", *baseline, "--variant", *variant, "--samples", "100", "--level", level)
    assert result.exit_code == 0, result.output
    levels = re.findall(r"(\S+%) (?:Wilson )?interval", result.stdout)
    assert len(levels) == 5 and set(levels) == {shown}, levels  # verdict, ΔP, two intervals for D, wins


def test_a_missing_domain_is_refused_naming_its_row(tmp_path):
    """A domain column with a gap would make breakdowns and clusters compare a label with a missing value."""
    frame = good_frame(1).assign(domain=lambda f: [f"d{i % 3}" for i in range(len(f))]).astype({"domain": object})
    frame.loc[2, "domain"] = None
    frame.to_parquet(tmp_path / "bad.parquet")
    good_frame(1, "gatedv").assign(domain=frame["domain"].fillna("d2")).to_parquet(tmp_path / "good.parquet")
    for options in (["--cluster", "domain"], []):
        result = invoke("bootstrap", "--baseline", str(tmp_path / "bad.parquet"), "--variant",
                        str(tmp_path / "good.parquet"), *options)
        assert_input_error(result, "bad.parquet", "row 3: domain is missing")


def test_a_file_named_and_also_found_in_a_directory_given_is_read_once(run_files, tmp_path):
    baseline, variant = run_files
    args = ["--baseline-arm", "baseline", "--variant-arm", "gatedv", "--samples", "100", "--json"]
    once = invoke("bootstrap", str(tmp_path), *args)
    twice = invoke("bootstrap", str(tmp_path), baseline[0], *args)
    assert once.exit_code == 0 and twice.exit_code == 0, (once.stderr, twice.stderr)
    assert json.loads(twice.stdout) == json.loads(once.stdout)
    named_twice = invoke("bootstrap", baseline[0], baseline[0], *args)
    assert named_twice.exit_code == 2 and "given twice among the inputs" in named_twice.stderr

