"""Score tables of any pipeline (a judge model's score per document) through every command: `bootstrap`, `arms`,
`plan`, `noise-floor`, `decide`, `ledger add` and `report` take them with `--metric NAME` and its direction, through
the code that serves loss files and item scores."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.multitest import multipletests

from helpers import assert_input_error, invoke, invoke_json

N_DOCS, SEEDS = 60, (0, 1, 2, 3)
SHIFTS = {"baseline": 0.0, "judged": 0.8, "same": 0.0}  # the judge's score of each arm, above the baseline's
SCORE = ("--metric", "judge_score", "--higher-is-better")


def score_table(arms: dict[str, float], seeds: tuple[int, ...], rng_seed: int) -> pd.DataFrame:
    """A long table arm, seed, doc_id, judge_score, source: each document's quality, an arm's shift, a seed's
    offset and noise."""
    rng = np.random.default_rng(rng_seed)
    quality = rng.uniform(2.0, 8.0, N_DOCS)
    rows = []
    for arm, shift in arms.items():
        for seed in seeds:
            offset = rng.normal(0.0, 0.2)
            scores = quality + shift + offset + rng.normal(0.0, 0.8, N_DOCS)
            rows += [{"arm": arm, "seed": seed, "doc_id": f"d{i:02d}", "judge_score": float(scores[i]),
                      "source": ("web", "code", "books")[i % 3]} for i in range(N_DOCS)]
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def scores(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("scores") / "scores.csv"
    score_table(SHIFTS, SEEDS, 0).to_csv(path, index=False)
    return path


def pair_of(scores: Path) -> list[str]:
    return [str(scores), "--baseline-arm", "baseline", "--variant-arm", "judged"]


def test_bootstrap_gives_the_verdict_on_the_difference_computed_independently(scores):
    data = invoke_json("bootstrap", *pair_of(scores), *SCORE)
    table = pd.read_csv(scores)
    wide = table.pivot_table(index=["seed", "doc_id"], columns="arm", values="judge_score")
    assert data["difference"] == pytest.approx(float((wide["judged"] - wide["baseline"]).mean()), rel=1e-12)
    assert (data["verdict"], data["unit"], data["n_documents"]) == ("better", "document", N_DOCS)
    text = invoke("bootstrap", *pair_of(scores), *SCORE)
    assert text.exit_code == 0, text.output
    assert "judge_score (higher is better): judged vs baseline, 4 seed pairs × 60 documents" in text.stdout
    lower = invoke_json("bootstrap", *pair_of(scores), "--metric", "judge_score", "--lower-is-better")
    assert lower["verdict"] == "worse" and lower["difference"] == data["difference"]


def test_the_direction_comes_from_the_caller_or_the_file_and_is_never_guessed(scores, tmp_path):
    assert_input_error(invoke("bootstrap", *pair_of(scores), "--metric", "judge_score"),
                       "no direction for the metric 'judge_score'")
    recorded = tmp_path / "recorded.csv"
    recorded.write_bytes(scores.read_bytes())
    Path(f"{recorded}.json").write_text(json.dumps({"higher_is_better": True}), encoding="utf-8")
    assert invoke_json("bootstrap", *pair_of(recorded), "--metric", "judge_score")["verdict"] == "better"
    assert_input_error(invoke("bootstrap", *pair_of(scores), "--metric", "bleu", "--higher-is-better"),
                       "not an item-score file or one of the score tables", "with doc_id and a bleu column")


def test_arms_adjusts_every_arm_with_holm_and_benjamini_hochberg(scores):
    data = invoke_json("arms", scores, "--reference", "baseline", *SCORE)
    rows = data["arms"]
    assert [row["variant_arm"] for row in rows] == ["judged", "same"]
    raw = [row["p_value"] for row in rows]
    assert [row["p_holm"] for row in rows] == pytest.approx(list(multipletests(raw, method="holm")[1]))
    assert [row["p_bh"] for row in rows] == pytest.approx(list(multipletests(raw, method="fdr_bh")[1]))
    assert [row["verdict"] for row in rows] == ["better", "no detectable difference"]


def test_a_breakdown_by_a_group_column_of_the_documents(scores):
    result = invoke("analyze", *pair_of(scores), *SCORE, "--by", "source")
    assert result.exit_code == 0, result.output
    assert all(group in result.stdout for group in ("web", "code", "books"))


def test_plan_sizes_a_study_in_the_scores_units(scores):
    data = invoke_json("plan", *pair_of(scores), *SCORE, "--effect", "0.3")
    assert data["effect"] == 0.3 and data["n_documents"] == N_DOCS and data["n_seeds"] == len(SEEDS)
    assert data["seeds_required"] is None or data["seeds_required"] >= 1


def test_a_floor_of_aa_runs_gives_one_seed_pair_a_verdict(scores, tmp_path):
    aa = tmp_path / "aa.csv"
    score_table({"baseline": 0.0}, (10, 11, 12, 13, 14), 1).to_csv(aa, index=False)
    floor = tmp_path / "floor.json"
    made = invoke("noise-floor", aa, *SCORE, "--out", floor)
    assert made.exit_code == 0, made.output
    assert "noise floor of baseline (judge_score)" in made.stdout and "5 A/A runs" in made.stdout
    one = tmp_path / "one.csv"
    table = pd.read_csv(scores)
    table[table["seed"] == 0].to_csv(one, index=False)
    data = invoke_json("bootstrap", *pair_of(one), *SCORE, "--noise-floor", floor)
    assert data["n_seeds"] == 1 and data["verdict"] == "better"
    assert_input_error(invoke("bootstrap", *pair_of(one), "--noise-floor", floor), "judge_score")


def test_decide_looks_at_seed_pairs_as_they_come_and_the_ledger_takes_its_stop(scores, tmp_path):
    table = pd.read_csv(scores)
    design, ledger = tmp_path / "design.json", tmp_path / "study.ledger"
    codes, files = [], {}
    for k in (2, 3, 4):
        for arm in ("baseline", "judged"):
            files[arm] = tmp_path / f"{arm}-{k}.csv"
            table[(table["seed"] < k) & (table["arm"] == arm)].to_csv(files[arm], index=False)
        result = invoke("decide", "--baseline", files["baseline"], "--variant", files["judged"], *SCORE, "--design",
                        design, "--max-seeds", 4, "--sesoi", 0.3)
        codes.append(result.exit_code)
        if result.exit_code == 0:
            break
    assert codes[-1] == 0 and all(code == 10 for code in codes[:-1]), codes
    stopped = json.loads(design.read_text(encoding="utf-8"))
    assert (stopped["design"]["metric"], stopped["design"]["unit"]) == ("judge_score", "document")
    entry = invoke_json("ledger", ledger, "add", "--candidate", files["judged"], "--against", files["baseline"],
                        *SCORE, "--design", design)
    assert entry["scale"]["metric"] == "judge_score" and entry["p_source"] == "stage-wise"
    assert entry["decision"] in ("keep", "discard")


def test_ledger_add_and_report_of_a_score_table(scores, tmp_path):
    ledger = tmp_path / "study.ledger"
    table = pd.read_csv(scores)
    for arm in ("baseline", "judged"):
        table[table["arm"] == arm].to_csv(tmp_path / f"{arm}.csv", index=False)
    entry = invoke_json("ledger", ledger, "add", "--candidate", tmp_path / "judged.csv", "--against",
                        tmp_path / "baseline.csv", *SCORE)
    assert (entry["candidate"], entry["reference"], entry["scale"]["metric"]) == ("judged", "baseline", "judge_score")
    out = tmp_path / "report.md"
    result = invoke("report", scores, *SCORE, "--ledger", ledger, "--format", "md", "--out", out)
    assert result.exit_code == 0, result.output
    text = out.read_text(encoding="utf-8")
    assert "judge\\_score" in text and "## Research ledger" in text and "judged" in text
