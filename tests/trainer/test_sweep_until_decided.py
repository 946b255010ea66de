"""`gatedv sweep --until-decided`: rounds of seed pairs on the embedded corpus, each variant stopped once its
sequential comparison is decided; an interrupted sweep resumes its designs unchanged, a changed design is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gatedv_cli.until_decided import SequentialSettings, design_directory, sweep_until_decided
from helpers import assert_input_error, invoke, invoke_json, sweep_json, tiny_grid
from trainer.grid.experiment import load_experiment
from trainer.grid.sweep import run_experiment
from trainer.run.recipe import Runtime

RECIPE = {"lrs": [0.003], "updates": 4, "eval_every": 4, "batch_size": 2}
# the third variant is the baseline's own value activation: it trains to the baseline's weights
VARIANTS = {"baseline": {}, "gatedv": {}, "same": {"value_act": "linear"}}


@pytest.fixture
def grid(prepared_data, tmp_path):
    path = tmp_path / "loop.toml"
    path.write_text(tiny_grid(prepared_data, name="loop", variants=VARIANTS, seeds=[1, 2, 3, 4], **RECIPE))
    return path


@pytest.fixture
def floor(prepared_data, tmp_path):
    """A noise floor from four A/A runs of the grid's setup."""
    path = tmp_path / "aa.toml"
    path.write_text(tiny_grid(prepared_data, name="aa", seeds=[101, 102, 103, 104], out="aa", **RECIPE))
    sweep_json(path, "--device", "cpu")
    invoke_json("noise-floor", *sorted((tmp_path / "aa").rglob("heldout.parquet")), "--out", tmp_path / "floor.json")
    return tmp_path / "floor.json"


def _trained(grid: Path, variant: str) -> list[int]:
    runs = (grid.parent / "runs" / variant / "lr0.003").glob("seed*")
    return sorted(int(run.name.removeprefix("seed")) for run in runs if (run / "heldout.parquet").is_file())


@pytest.mark.slow
def test_with_a_floor_a_variant_that_changes_nothing_stops_at_its_first_seed_pair(grid, floor):
    ledger = grid.parent / "study.ledger"
    swept = sweep_json(grid, "--until-decided", "--noise-floor", floor, "--sesoi", "0.5", "--device", "cpu",
                       "--ledger", ledger)
    states = {state["variant"]: state for state in swept["variants"]}
    assert states["same"]["stopped"] and states["same"]["n_pairs"] == 1
    assert states["same"]["decision"] in ("equivalent", "no useful gain")
    assert _trained(grid, "same") == [1]  # seeds 2-4 of a decided variant are never trained
    assert _trained(grid, "baseline") == list(range(1, max(s["n_pairs"] for s in swept["variants"]) + 1))
    assert swept["runs_trained"] < swept["fixed_runs"] == 12
    design = json.loads((design_directory(grid) / "same.json").read_text())
    assert len(design["looks"]) == 1 and design["design"]["max_seeds"] == 4
    # each variant started in the ledger at its first look, at a level fixed then (the show replays and checks
    # them), and entered at its stop, "stop: better" as a keep and every other stop as a discard
    history = invoke_json("ledger", ledger, "show")
    rows = history["entries"]
    assert sorted(row["kind"] or "entry" for row in rows) == ["entry", "entry", "start", "start"]
    assert history["n_running"] == 0
    for variant, state in states.items():
        entry = next(row for row in rows if row["candidate"] == variant and row["kind"] is None)
        start = next(row for row in rows if row["step"] == entry["start_step"])
        made = json.loads((design_directory(grid) / f"{variant}.json").read_text())["design"]
        assert made["alpha"] == pytest.approx(2 * start["level"]) and entry["level"] == start["level"]
        assert (entry["decision"] == "keep") == (state["decision"] == "better") and entry["p_source"] == "stage-wise"
    # the variants' runs record their design, so a fixed-sample entry of them is refused
    run = grid.parent / "runs" / "same" / "lr0.003" / "seed1"
    assert json.loads((run / "sequential.json").read_text())["design_sha256"] == design["design_sha256"]
    refused = invoke("ledger", grid.parent / "other.ledger", "add", "--candidate", run / "heldout.parquet",
                     "--against", grid.parent / "runs" / "baseline" / "lr0.003" / "seed1" / "heldout.parquet",
                     "--noise-floor", floor)
    assert_input_error(refused, "decided sequentially by", "enter them with --design")


@pytest.mark.slow
def test_an_interrupted_sweep_resumes_the_same_designs_and_a_changed_design_is_refused(prepared_data, tmp_path):
    # without a floor a variant that trains to the baseline's weights has no seed variance to design with
    grid = tmp_path / "loop.toml"
    grid.write_text(tiny_grid(prepared_data, name="loop", seeds=[1, 2, 3, 4], **RECIPE,
                              variants={"baseline": {}, "gatedv": {}, "narrow": {"d_ff": 8}}))
    experiment = load_experiment(grid)
    rounds = []

    def train_then_stop(restricted):
        if len(rounds) == 2:
            raise KeyboardInterrupt  # stopped in the third round's training
        rounds.append(restricted.seeds)
        return run_experiment(restricted, runtime=Runtime(device="cpu", progress=False))

    with pytest.raises(KeyboardInterrupt):
        sweep_until_decided(experiment, grid, SequentialSettings(sesoi=0.01), train_then_stop)
    assert rounds == [(1, 2), (1, 2, 3)]
    first = {variant: json.loads((design_directory(grid) / f"{variant}.json").read_text())
             for variant in ("gatedv", "narrow")}
    assert all([look["n_pairs"] for look in design["looks"]] == [2, 3] for design in first.values())

    changed = invoke("sweep", grid, "--until-decided", "--sesoi", "0.02", "--device", "cpu")
    assert_input_error(changed, "--sesoi", "fixes sesoi 0.01")

    resumed = sweep_json(grid, "--until-decided", "--device", "cpu")
    for variant, before in first.items():
        after = json.loads((design_directory(grid) / f"{variant}.json").read_text())
        assert after["design"] == before["design"] and after["looks"][:2] == before["looks"]
        assert [look["n_pairs"] for look in after["looks"]] == list(range(2, 2 + len(after["looks"])))
    assert all(state["stopped"] for state in resumed["variants"])

    status = invoke_json("sweep", grid, "--until-decided", "--status")
    assert status["variants"] == resumed["variants"]


def test_a_grid_with_several_rates_or_without_its_baseline_is_refused(tmp_path):
    grid = tmp_path / "loop.toml"  # refused before its data is opened
    grid.write_text(tiny_grid(tmp_path / "data", variants=VARIANTS, seeds=[1, 2, 3, 4], **RECIPE))
    several = tmp_path / "several.toml"
    several.write_text(tiny_grid(tmp_path / "data", variants=VARIANTS, seeds=[1, 2, 3, 4],
                                 **{**RECIPE, "lrs": [0.003, 0.006]}))
    assert_input_error(invoke("sweep", several, "--until-decided"), "2 learning rates", "gatedv select-lr")
    assert_input_error(invoke("sweep", grid, "--until-decided", "--baseline-arm", "other"), "'other'",
                       "--baseline-arm")
    assert_input_error(invoke("sweep", grid, "--until-decided", "--max-seeds", "5"), "--max-seeds", "4 seeds")
    assert_input_error(invoke("sweep", grid, "--sesoi", "0.01"), "--sesoi", "only with --until-decided")


@pytest.mark.slow
def test_a_round_runs_as_local_jobs_waited_for(prepared_data, tmp_path):
    grid = tmp_path / "loop.toml"
    grid.write_text(tiny_grid(prepared_data, name="loop", variants={"baseline": {}, "gatedv": {}}, seeds=[1, 2, 3],
                              **RECIPE))
    swept = sweep_json(grid, "--until-decided", "--sesoi", "0.01", "--executor", "local", "--gpus-per-run", "0",
                       "--device", "cpu")
    state = swept["variants"][0]
    assert state["stopped"] and state["n_pairs"] >= 2
    design = json.loads((design_directory(grid) / "gatedv.json").read_text())
    assert [look["n_pairs"] for look in design["looks"]] == list(range(2, state["n_pairs"] + 1))
    for variant in ("baseline", "gatedv"):  # every run the looks rest on was a job of its own
        assert all((grid.parent / "runs" / variant / "lr0.003" / f"seed{seed}" / "job.json").is_file()
                   for seed in range(1, state["n_pairs"] + 1))
