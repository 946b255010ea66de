"""`gatedv demo` end to end with tiny settings: paired runs, loss files, bootstrap and report."""

import json
import shutil

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import cli
from demo import DemoResult
from trainer.run.recipe import RECIPES


@pytest.mark.slow
def test_demo_runs_end_to_end(prepared_data, tmp_path):
    out = tmp_path / "demo"
    shutil.copytree(prepared_data, out / "data")  # a prepared data directory in place is used as it is
    result = CliRunner().invoke(cli.app, ["demo", "--out", str(out), "--updates", "2", "--seeds", "2",
                                          "--device", "cpu", "--json"])
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["seeds"] == [1, 2] and summary["updates"] == 2
    assert summary["corpus"] == "builtin:python-stdlib" and summary["eval_docs"] == {"dev": 8, "heldout": 8}
    for eval_set in ("dev", "heldout"):
        # Independent arithmetic from the loss files the demo wrote (docs/method-statistics.md §5).
        ppl, nll = {}, {}
        for arm in ("baseline", "gatedv"):
            frames = [pd.read_parquet(out / "runs" / arm / f"lr{RECIPES['tiny'].lr:g}" / f"seed{seed}" /
                                      f"{eval_set}.parquet") for seed in (1, 2)]
            nll[arm] = np.array([f["loss_sum"].sum() / f["n_targets"].sum() for f in frames])
            ppl[arm] = np.exp(nll[arm]).mean()
        comparison = summary["comparisons"][eval_set]
        assert comparison["n_pairs"] == 2 and comparison["n_docs"] == 8
        np.testing.assert_allclose(comparison["delta_p"], ppl["gatedv"] / ppl["baseline"] - 1, rtol=1e-9)
        np.testing.assert_allclose(comparison["nll_diff_mean"], (nll["gatedv"] - nll["baseline"]).mean(), rtol=1e-9)
    assert [path.rsplit("/", 1)[-1] for path in summary["reports"]] == ["report.html", "report.md"]
    markdown = (out / "report.md").read_text()
    assert "gatedv" in markdown and "baseline" in markdown
    assert (out / "report.html").stat().st_size > 10_000
    # Stage times: every stage in order, disjoint parts of the wall time, and printed in the summary's last line.
    stages = summary["stage_seconds"]
    assert list(stages) == ["prepare", "training", "evaluation", "analysis", "report"]
    assert all(seconds > 0 for seconds in stages.values()) and sum(stages.values()) <= summary["wall_seconds"]
    printed = DemoResult(**{**summary, "comparisons": {}}).summary().splitlines()[-1]
    assert printed.startswith(f"wall time {summary['wall_seconds']:.0f} s (prepare {stages['prepare']:.1f} s, "
                              f"training {stages['training']:.1f} s, evaluation {stages['evaluation']:.1f} s, ")
    assert f"report {stages['report']:.1f} s); training " in printed


def test_bad_demo_options_are_one_line(tmp_path):
    runner = CliRunner()
    few = runner.invoke(cli.app, ["demo", "--out", str(tmp_path), "--seeds", "1"])
    assert few.exit_code == 2 and few.stderr.strip() == (
        "error: --seeds: a paired comparison needs at least 2 seeds, got 1")
    none = runner.invoke(cli.app, ["demo", "--out", str(tmp_path), "--updates", "0"])
    assert none.exit_code == 2 and none.stderr.strip() == "error: --updates: must be at least 1, got 0"
    many = runner.invoke(cli.app, ["demo", "--out", str(tmp_path), "--seeds", "99999999999999999999"])
    assert many.exit_code == 2 and many.stderr.strip() == (
        "error: --seeds: the demo runs at most 100 seeds, got 99999999999999999999")
    idle = runner.invoke(cli.app, ["demo", "--out", str(tmp_path), "--jobs", "0", "--device", "cpu"])
    assert idle.exit_code == 2 and idle.stderr.strip() == "error: --jobs: must be at least 1, got 0"
    assert not (tmp_path / "data").exists()


@pytest.mark.slow
def test_a_demo_with_fewer_seeds_than_an_earlier_one_in_its_directory_uses_only_its_own(prepared_data, tmp_path):
    out = tmp_path / "demo"
    shutil.copytree(prepared_data, out / "data")
    args = ["demo", "--out", str(out), "--updates", "2", "--device", "cpu", "--jobs", "1", "--json"]
    assert CliRunner().invoke(cli.app, [*args, "--seeds", "3"]).exit_code == 0
    result = CliRunner().invoke(cli.app, [*args, "--seeds", "2"])
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["seeds"] == [1, 2]
    assert [summary["comparisons"][name]["n_pairs"] for name in ("dev", "heldout")] == [2, 2]
    assert "seed3" not in (out / "report.md").read_text()
