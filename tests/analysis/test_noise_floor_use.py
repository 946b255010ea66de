"""A noise floor measured from runs, written, read back and used: refusals in one line naming the field, the
one-seed verdict for loss files and item scores, the plan from a floor, and the command line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import gatedv_stats as gv
from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.io.floorfiles import read_floor_file, write_floor_file
from gatedv_stats.io.itemfiles import write_item_file
from gatedv_stats.io.lossfiles import write_loss_file
from gatedv_stats.testing import synthetic_runs
from helpers import invoke
from item_runs import item_run

AA = {"baseline": [30.0, 30.3, 29.8, 30.1, 29.9, 30.2, 30.05, 29.95, 30.15, 29.85]}


def write_runs(folder, ppls, *, seeds=None, eval_set="heldout", config=None, n_docs=60):
    for run in synthetic_runs(ppls, n_docs=n_docs, rng_seed=3, seeds=seeds, noise=0.01):
        meta = {**run.meta, "eval_set": eval_set, **({"config": config} if config else {})}
        write_loss_file(folder / f"{run.arm}-{run.seed}.parquet", run.docs, meta)
    return folder


@pytest.fixture(scope="module")
def floor_file(tmp_path_factory):
    """A floor of 10 A/A runs, measured once for the module: its tests only read it."""
    folder = tmp_path_factory.mktemp("floor")
    write_runs(folder / "aa", AA, config={"n_layers": 2, "d_model": 64})
    return gv.noise_floor(folder / "aa", out=folder / "floor.json").written


def test_a_floor_from_aa_runs_records_its_setup_and_reads_back_whole(floor_file):
    content = read_floor_file(floor_file)
    means = [np.log(p) for p in AA["baseline"]]
    assert content["seed_variance"] == pytest.approx(2 * np.var(means, ddof=1), rel=1e-6)
    assert content["df"] == 9 and content["unit"] == "token" and content["metric"] == "loss"
    assert content["setup"] == {"eval_set": "heldout", "size": {"n_layers": 2, "d_model": 64}}
    assert len(content["inputs"]) == 10 and all(len(item["sha256"]) == 64 for item in content["inputs"])


def test_a_floor_edited_by_hand_or_of_another_format_is_refused(floor_file, tmp_path):
    content = json.loads(Path(floor_file).read_text())
    content["df"] = 99
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(content))
    with pytest.raises(InputError, match="edited.json: damaged: its content does not match the sha256 it records"):
        read_floor_file(edited)
    (tmp_path / "other.json").write_text(json.dumps({"format": "something"}))
    with pytest.raises(InputError, match="not a noise-floor file"):
        read_floor_file(tmp_path / "other.json")
    write_floor_file(tmp_path / "bad.json", {"seed_variance": -1.0, "df": 3, "metric": "loss", "unit": "token",
                                             "setup": {}, "source": "A/A runs"})
    with pytest.raises(InputError, match="'seed_variance' must be a positive number"):
        read_floor_file(tmp_path / "bad.json")


def test_reruns_too_few_seeds_and_mixed_configurations_are_refused(tmp_path):
    runs = synthetic_runs({"baseline": [30.0, 30.3, 29.8]}, n_docs=20, rng_seed=1, seeds=[1, 1, 2])
    with pytest.raises(InputError, match="seed 1 appears more than once; reruns of one seed"):
        gv.noise_floor(runs)
    with pytest.raises(InputError, match="at least 3 runs"):
        gv.noise_floor(synthetic_runs({"baseline": [30.0, 30.3]}, n_docs=20, rng_seed=1))
    with pytest.raises(InputError, match="several configurations \\(baseline, gatedv\\)"):
        gv.noise_floor(synthetic_runs({"baseline": [30.0, 30.3], "gatedv": [29.0]}, n_docs=20, rng_seed=1))
    write_runs(tmp_path / "a", {"baseline": [30.0, 30.3]}, config={"n_layers": 2})
    write_runs(tmp_path / "a", {"baseline": [29.9]}, seeds=[5], config={"n_layers": 4})
    with pytest.raises(InputError, match="the runs differ in size"):
        gv.noise_floor(tmp_path / "a")


def test_one_seed_pair_gets_a_verdict_from_the_floor_and_another_setup_is_refused(floor_file, tmp_path):
    study = write_runs(tmp_path / "study", {"baseline": [30.0], "gatedv": [28.5]}, seeds=[11],
                       config={"n_layers": 2, "d_model": 64})
    without = gv.compare(study, baseline_arm="baseline", variant_arm="gatedv")
    assert without.verdict is None and "noise floor" in without.verdict_explanation
    result = gv.compare(study, baseline_arm="baseline", variant_arm="gatedv", noise_floor=floor_file)
    assert result.verdict_text == "better" and result.seed_document.floor_use.how == "floor"
    assert result.to_dict()["noise_floor"]["floor"]["df"] == 9
    other = write_runs(tmp_path / "dev", {"baseline": [30.0], "gatedv": [28.5]}, seeds=[11], eval_set="dev",
                       config={"n_layers": 2, "d_model": 64})
    with pytest.raises(ParameterError, match=r"measured with eval_set heldout, the study has dev.*allow_mismatch "
                                             r"eval_set uses it anyway"):
        gv.compare(other, baseline_arm="baseline", variant_arm="gatedv", noise_floor=floor_file)
    accepted = gv.compare(other, baseline_arm="baseline", variant_arm="gatedv", noise_floor=floor_file,
                          allow_mismatch=["eval_set"])
    assert any("noise floor used although" in note for note in accepted.notes)


def test_item_scores_take_a_floor_of_their_metric(tmp_path):
    rng = np.random.default_rng(0)
    p = rng.uniform(0.3, 0.7, 400)
    for seed in range(6):
        run = item_run("baseline", seed, (rng.random(p.size) < p).astype(float), task="arc_easy")
        write_item_file(tmp_path / "aa" / f"b{seed}.parquet", run.units,
                        {"arm": "baseline", "seed": seed, "task": "arc_easy", "n_shot": 0, "metrics": ["acc"]})
    floor = gv.noise_floor(tmp_path / "aa", metric="acc")
    assert floor.floor.unit == "item" and floor.floor.setup["task"] == "arc_easy" and floor.seed.df == 5
    for arm, shift in (("baseline", 0.0), ("gatedv", 0.3)):
        run = item_run(arm, 9, (rng.random(p.size) < p + shift).astype(float), task="arc_easy")
        write_item_file(tmp_path / "study" / f"{arm}.parquet", run.units,
                        {"arm": arm, "seed": 9, "task": "arc_easy", "n_shot": 0, "metrics": ["acc"]})
    result = gv.compare(tmp_path / "study", baseline_arm="baseline", variant_arm="gatedv", metric="acc",
                        noise_floor=floor)
    assert result.verdict_text == "better" and result.n_pairs == 1
    with pytest.raises(ParameterError, match="measured with metric loss, the study has acc"):
        gv.compare(tmp_path / "study", baseline_arm="baseline", variant_arm="gatedv", metric="acc",
                   noise_floor=gv.noise_floor(synthetic_runs(AA, n_docs=20, rng_seed=1)))


def test_a_plan_from_the_floor_needs_no_pilot_and_says_when_seeds_cannot_help(floor_file, tmp_path):
    plan = gv.plan(effect=0.02, noise_floor=floor_file)
    assert plan.seeds_required is not None and plan.power_by_seeds[plan.seeds_required] >= 0.8
    assert plan.seeds_required == 1 or plan.power_by_seeds.get(plan.seeds_required - 1, 0.8) < 0.8 or \
        plan.seeds_required - 1 not in plan.power_by_seeds
    noisy = write_runs(tmp_path / "noisy", {"baseline": [30.0], "gatedv": [29.9]}, seeds=[3], n_docs=8,
                       config={"n_layers": 2, "d_model": 64})
    small = gv.plan(noisy, effect=0.001, noise_floor=floor_file)
    assert small.seeds_required is None and "add documents, not seeds" in small.summary()


def test_the_commands_write_and_use_a_floor(floor_file, tmp_path):
    study = write_runs(tmp_path / "study", {"baseline": [30.0], "gatedv": [28.5]}, seeds=[11],
                       config={"n_layers": 2, "d_model": 64})
    result = invoke("bootstrap", study, "--baseline-arm", "baseline", "--variant-arm", "gatedv", "--noise-floor",
                    floor_file)
    assert result.exit_code == 0 and "verdict: better" in result.stdout and "noise floor" in result.stdout
    planned = invoke("plan", "--effect", "0.02", "--noise-floor", floor_file)
    assert planned.exit_code == 0 and "paired seeds needed" in planned.stdout
    edited = tmp_path / "edited.json"
    edited.write_text(Path(floor_file).read_text().replace('"df": 9', '"df": 19'))
    refused = invoke("bootstrap", study, "--baseline-arm", "baseline", "--variant-arm", "gatedv", "--noise-floor",
                     edited)
    assert refused.exit_code == 2 and refused.stderr.count("\n") == 1 and "sha256" in refused.stderr


@pytest.mark.slow
def test_a_floor_from_earlier_paired_studies_and_its_use_in_arms_and_the_report(floor_file, tmp_path):
    config = {"n_layers": 2, "d_model": 64}
    first = write_runs(tmp_path / "s1", {"baseline": [30.0, 30.3, 29.9], "gatedv": [29.5, 29.9, 29.3]}, config=config)
    second = write_runs(tmp_path / "s2", {"baseline": [30.1, 29.8], "v2": [29.7, 29.5]}, seeds=[4, 5], config=config)
    pooled = gv.noise_floor([first, second], studies=True)
    per_seed = [np.log([29.5, 29.9, 29.3]) - np.log([30.0, 30.3, 29.9]), np.log([29.7, 29.5]) - np.log([30.1, 29.8])]
    by_hand = (2 * np.var(per_seed[0], ddof=1) + np.var(per_seed[1], ddof=1)) / 3
    assert pooled.floor.estimate.source == "paired studies" and pooled.seed.df == 3
    assert pooled.seed.variance == pytest.approx(by_hand, rel=1e-3)
    study = write_runs(tmp_path / "one", {"baseline": [30.0], "gatedv": [28.5], "same": [30.0]}, seeds=[11],
                       config=config)
    arms = gv.arms(study, reference="baseline", noise_floor=floor_file, n_permutations=100)
    assert dict(zip(arms.to_frame()["arm"], arms.to_frame()["verdict"]))["gatedv"] == "better"
    report = gv.report(study, tmp_path / "report.md", noise_floor=floor_file, n_resamples=200)
    assert "their variance from the noise floor" in report.read_text()
