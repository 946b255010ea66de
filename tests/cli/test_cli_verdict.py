"""The verdict on the command line: its JSON against the statistics it rests on, clusters, the smallest effect of
interest, provenance refusal and its override, and comparisons across tokenizers (per byte)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

import gatedv_stats as gv
from gatedv_stats.io.lossfiles import write_loss_file
from gatedv_stats.stats import metrics
from gatedv_stats.stats.crossed import cluster_sums
from gatedv_stats.stats.resampling import document_bootstrap
from gatedv_stats.stats.seed_document import seed_document_interval
from helpers import invoke

N_DOCS, N_SEEDS = 48, 4


def write_study(folder, *, delta=-0.03, meta=None, variant_meta=None, n_targets=None, rng_seed=3):
    """Baseline and variant loss files with a crossed seed × document structure and 8 domains."""
    rng = np.random.default_rng(rng_seed)
    n = np.asarray(n_targets if n_targets is not None else rng.integers(100, 300, N_DOCS))
    base = (3.0 + rng.normal(0, 0.3, N_DOCS)) * n * np.ones((N_SEEDS, 1))
    y = delta + rng.normal(0, 0.01, (N_SEEDS, 1)) + rng.normal(0, 0.03, N_DOCS) + rng.normal(0, 0.03, (N_SEEDS, N_DOCS))
    paths = {"baseline": [], "variant": []}
    for side, sums in (("baseline", base), ("variant", base + y * n)):
        for s in range(N_SEEDS):
            docs = pd.DataFrame({"doc_id": [f"doc{i:03d}" for i in range(N_DOCS)], "n_targets": n, "loss_sum": sums[s],
                                 "domain": [f"site{i % 8}.org" for i in range(N_DOCS)], "n_bytes": n * 4})
            extra = {**(meta or {}), **((variant_meta or {}) if side == "variant" else {})}
            path = folder / f"{side}_{s}.parquet"
            write_loss_file(path, docs, {"arm": "baseline" if side == "baseline" else "gatedv", "seed": s, **extra})
            paths[side].append(str(path))
    return paths


def pair_args(paths):
    return ["--baseline", *paths["baseline"], "--variant", *paths["variant"]]


def test_bootstrap_json_carries_the_verdict_and_the_seed_and_document_interval(tmp_path):
    paths = write_study(tmp_path)
    result = invoke("bootstrap", *pair_args(paths), "--samples", "300", "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    paired = gv.pair(baseline=paths["baseline"], variant=paths["variant"])
    expected = seed_document_interval(paired.baseline, paired.variant, paired.n_units)
    assert payload["nll_diff_seed_document_ci"] == pytest.approx(list(expected.confidence_interval), rel=1e-12)
    assert payload["nll_diff_seed_document_df"] == pytest.approx(expected.df)
    assert payload["standard_errors"]["nll_diff_mean"] == pytest.approx(expected.se)
    assert payload["variance_components"]["seed"] == pytest.approx(expected.seed_var)
    high = payload["nll_diff_seed_document_ci"][1]
    assert payload["verdict"] == ("better" if high < 0 else "no detectable difference")
    assert payload["verdict"] == "better"  # delta −0.03 nats per token with 4 seeds and 48 documents
    assert payload["nll_diff_ci_kind"] == "models fixed: documents resampled"
    bca = json.loads(invoke("bootstrap", *pair_args(paths), "--samples", "300", "--method", "bca", "--json").stdout)
    assert bca["ci_method"] == "bca" and bca["nll_diff_seed_document_ci"] == payload["nll_diff_seed_document_ci"]
    low, high = payload["win_rate_ci"]
    assert low < payload["win_rate"] < high
    text = invoke("bootstrap", *pair_args(paths), "--samples", "300").stdout
    assert text.splitlines()[2] == "verdict: better" and "models fixed: documents resampled" in text


def test_clusters_resample_domains_and_carry_the_document_variance(tmp_path):
    paths = write_study(tmp_path)
    payload = json.loads(invoke("bootstrap", *pair_args(paths), "--cluster", "domain", "--samples", "300",
                                "--json").stdout)
    paired = gv.pair(baseline=paths["baseline"], variant=paths["variant"])
    labels = paired.doc_columns["domain"].to_numpy()
    sums = cluster_sums(metrics.document_differences(paired.baseline, paired.variant), paired.n_units, labels)
    expected = document_bootstrap(sums.values, sums.n_units, n_resamples=300)
    assert payload["nll_diff_ci"] == pytest.approx(list(expected.confidence_interval), rel=1e-12)
    fit = seed_document_interval(paired.baseline, paired.variant, paired.n_units, clusters=labels)
    assert payload["nll_diff_seed_document_ci"] == pytest.approx(list(fit.confidence_interval), rel=1e-12)
    assert (payload["cluster"], payload["n_clusters"]) == ("domain", 8)


def test_a_smallest_effect_of_interest_can_make_arms_equivalent(tmp_path):
    paths = write_study(tmp_path, delta=0.0)
    payload = json.loads(invoke("bootstrap", *pair_args(paths), "--samples", "200", "--sesoi", "0.2",
                                "--json").stdout)
    assert payload["verdict"] == "equivalent" and payload["verdict_detail"]["tost_p_value"] < 0.05
    plain = json.loads(invoke("bootstrap", *pair_args(paths), "--samples", "200", "--json").stdout)
    assert plain["verdict"] in ("no detectable difference", "better", "worse")


@pytest.mark.parametrize(("field", "values"), [("eval_set_sha256", ("a" * 64, "b" * 64)),
                                                ("eval_set", ("dev", "heldout")),
                                                ("tokenizer_sha256", ("c" * 64, "d" * 64))])
def test_runs_evaluated_differently_are_refused_unless_allowed(tmp_path, field, values):
    paths = write_study(tmp_path, meta={field: values[0]}, variant_meta={field: values[1]})
    unit = ["--unit", "token"] if field == "tokenizer_sha256" else []
    refused = invoke("bootstrap", *pair_args(paths), "--samples", "100", *unit)
    assert refused.exit_code == 2 and refused.stderr.count("\n") == 1, refused.output
    assert refused.stderr.startswith("error: ") and field in refused.stderr
    if field != "tokenizer_sha256":
        assert "baseline_0.parquet" in refused.stderr and "variant_0.parquet" in refused.stderr
    allowed = invoke("bootstrap", *pair_args(paths), "--samples", "100", "--allow-mismatch", field, *unit)
    assert allowed.exit_code == 0, allowed.output
    assert f"warning: compared although {field} differs" in allowed.stderr


def test_different_tokenizers_are_compared_per_byte(tmp_path):
    paths = write_study(tmp_path, meta={"tokenizer_sha256": "c" * 64}, variant_meta={"tokenizer_sha256": "d" * 64})
    payload = json.loads(invoke("bootstrap", *pair_args(paths), "--samples", "100", "--json").stdout)
    paired = gv.pair(baseline=paths["baseline"], variant=paths["variant"])
    assert paired.unit == "byte" and list(paired.n_units) == list(paired.doc_columns["n_bytes"])
    expected = seed_document_interval(paired.baseline, paired.variant, paired.doc_columns["n_bytes"].to_numpy())
    assert payload["unit"] == "byte"
    assert payload["bits_per_byte_diff"] == pytest.approx(expected.estimate / math.log(2), rel=1e-12)
    assert payload["bits_per_byte_diff_ci"] == pytest.approx([end / math.log(2)
                                                              for end in expected.confidence_interval])
    assert any("tokenizers differ" in note for note in payload["notes"])


@pytest.mark.parametrize(("flag", "value"), [("--sesoi", "0"), ("--sesoi", "1.5"), ("--cluster", "topic"),
                                             ("--allow-mismatch", "lr"), ("--unit", "word")])
def test_bad_verdict_options(tmp_path, flag, value):
    paths = write_study(tmp_path)
    result = invoke("bootstrap", *pair_args(paths), "--samples", "100", flag, value)
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {flag}: "), result.output


def strict(text: str) -> dict:
    def refuse(constant):
        raise ValueError(f"non-strict JSON constant {constant}")
    return json.loads(text, parse_constant=refuse)


def test_all_zero_bytes_one_document_and_bca_are_said_plainly(tmp_path):
    rng = np.random.default_rng(0)
    for s in range(3):
        for arm, shift in (("baseline", 0.0), ("gatedv", -0.5)):
            docs = pd.DataFrame({"doc_id": ["only"], "n_targets": [256], "loss_sum": [800.0 + shift + rng.normal()],
                                 "n_bytes": [0]})
            write_loss_file(tmp_path / f"{arm}_{s}.parquet", docs, {"arm": arm, "seed": s})
    base = [str(tmp_path / f"baseline_{s}.parquet") for s in range(3)]
    var = [str(tmp_path / f"gatedv_{s}.parquet") for s in range(3)]
    result = invoke("bootstrap", "--baseline", *base, "--variant", *var, "--samples", "50", "--json")
    assert result.exit_code == 0, result.output
    assert strict(result.stdout)["ci_method"] == "percentile"
    bca = invoke("bootstrap", "--baseline", *base, "--variant", *var, "--samples", "50", "--method", "bca")
    assert bca.exit_code == 2 and bca.stderr == "error: the BCa interval needs at least two documents\n"
    assert "warning: one document: the document bootstrap cannot vary" in result.stderr
    assert "n_bytes is 0 for every document" in result.stderr
    analyzed = strict(invoke("analyze", "--baseline", *base, "--variant", *var, "--samples", "50", "--json").stdout)
    assert analyzed["bits_per_byte"] is None


def test_identical_arms_get_the_identical_arms_verdict_and_an_arm_is_not_compared_with_itself(tmp_path):
    paths = write_study(tmp_path, delta=0.0)
    table = pd.concat([pd.read_parquet(path).assign(arm=arm, seed=s) for s, path in enumerate(paths["baseline"])
                       for arm in ("baseline", "gatedv")])
    table.to_csv(tmp_path / "identical.csv", index=False)
    result = invoke("bootstrap", tmp_path / "identical.csv", "--baseline-arm", "baseline", "--variant-arm", "gatedv",
                    "--samples", "50", "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["n_pairs"] == N_SEEDS and payload["verdict"] == "no detectable difference"
    assert payload["verdict_explanation"].startswith("The arms are identical") and "D = 0 exactly" in \
        payload["verdict_explanation"]
    for command in (["bootstrap", tmp_path / "identical.csv"],
                    ["analyze", "--baseline", tmp_path / "identical.csv", "--variant", tmp_path / "identical.csv"]):
        result = invoke(*command, "--baseline-arm", "gatedv", "--variant-arm", "gatedv")
        assert result.exit_code == 2 and result.stderr.startswith(
            "error: --baseline-arm and --variant-arm both name 'gatedv': an arm compared with itself"), result.output
        assert len(result.stderr.splitlines()) == 1


def test_one_cluster_gives_the_paired_t_over_seeds_for_that_cluster(tmp_path):
    """Every document in one domain: no cluster-to-cluster spread can be estimated, so the interval is the paired t
    over the seeds' differences, said to hold for this cluster only, and the cluster bootstrap cannot vary."""
    from scipy import stats

    from gatedv_stats.io.lossfiles import read_loss_file

    paths = write_study(tmp_path)
    for path in paths["baseline"] + paths["variant"]:
        run = read_loss_file(path)
        write_loss_file(path, run.docs.assign(domain="one.org"), run.meta)
    result = invoke("bootstrap", *pair_args(paths), "--cluster", "domain", "--samples", "300", "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    paired = gv.pair(baseline=paths["baseline"], variant=paths["variant"])
    per_seed = (paired.variant - paired.baseline).sum(axis=1) / paired.n_units.sum()
    expected = stats.ttest_1samp(per_seed, 0.0).confidence_interval(0.95)
    assert payload["nll_diff_seed_document_ci"] == pytest.approx([expected.low, expected.high], rel=1e-9)
    assert payload["n_clusters"] == 1 and "on this one cluster" in payload["verdict_explanation"]
    low, high = payload["nll_diff_ci"]
    assert low == high
    assert "warning: one domain cluster: the cluster bootstrap cannot vary" in result.stderr


def test_a_baseline_with_zero_loss_has_no_relative_bits_per_byte_change(tmp_path):
    """Loss 0 is a valid loss (a document the model predicts exactly): analyze and report say there is no relative
    change instead of failing on 0 / 0."""
    from gatedv_stats.io.lossfiles import read_loss_file

    paths = write_study(tmp_path / "exp")
    for path in paths["baseline"]:
        run = read_loss_file(path)
        write_loss_file(path, run.docs.assign(loss_sum=0.0), run.meta)
    result = invoke("analyze", *pair_args(paths), "--samples", "200", "--permutations", "200", "--json")
    assert result.exit_code == 0, result.output
    bits = json.loads(result.stdout)["bits_per_byte"]
    assert bits["baseline_mean"] == 0.0 and bits["relative_change"] is None and bits["relative_change_ci"] is None
    assert bits["difference"] > 0
    text = invoke("analyze", *pair_args(paths), "--samples", "200", "--permutations", "200").stdout
    assert "no relative change: the baseline's loss is 0" in text
    assert invoke("report", tmp_path / "exp", "--format", "md", "--out", tmp_path / "r.md").exit_code == 0
