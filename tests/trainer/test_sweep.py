"""Grids from TOML: run layout, skip / resume / evaluate-only, divergence, select-lr and the confirmation grid."""

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import cli
import trainer.run.train as train_module
from gatedv_stats.core.validation import MAX_SEED
from helpers import sweep_json
from trainer.grid.cluster import ExperimentStatus, RunStatus, Submission, SubmitResult
from trainer.grid.experiment import load_experiment
from trainer.grid.grid_run import RunOutcome
from trainer.grid.sweep import SweepResult
from trainer.run.recipe import Runtime
from trainer.run.train import train

ROOT = Path(__file__).resolve().parents[2]
GRID = """
name = "grid"
data = "{data}"
config = "tiny"
variants = ["baseline", "gatedv"]
seeds = [1]
lrs = [0.001, 0.02]
updates = 2
eval_every = 2
batch_size = 2
out = "runs"

[select]
confirm_seeds = [5, 6]
"""


def _sweep(path, *args):
    return {(run["variant"], run["lr"]): run for run in sweep_json(path, "--device", "cpu", *args)["runs"]}


@pytest.fixture(scope="module")
def grid(prepared_data, tmp_path_factory):
    """The grid swept once, with one run interrupted beforehand."""
    path = tmp_path_factory.mktemp("experiment") / "grid.toml"
    path.write_text(GRID.format(data=prepared_data))
    experiment = load_experiment(path)
    interrupted = experiment.runs()[-1]
    train(interrupted.spec, interrupted.run_dir, runtime=Runtime(device="cpu", progress=False), stop_after=1)
    return path, _sweep(path)


@pytest.mark.slow
def test_every_run_is_trained_into_its_directory_with_loss_files(grid):
    path, runs = grid
    assert {key: run["action"] for key, run in runs.items()} == {
        ("baseline", 0.001): "trained", ("baseline", 0.02): "trained",
        ("gatedv", 0.001): "trained", ("gatedv", 0.02): "resumed"}
    for (variant, lr), run in runs.items():
        run_dir = path.parent / "runs" / variant / f"lr{lr:g}" / "seed1"
        assert run["run_dir"] == str(run_dir) and run["status"] == "finished"
        assert {"run.json", "checkpoint.pt", "curve.csv", "dev.parquet", "heldout.parquet"} <= {
            p.name for p in run_dir.iterdir()}
        assert run["dev_nll"] == pd.read_csv(run_dir / "curve.csv")["dev_nll"].iloc[-1]


@pytest.mark.slow
def test_a_second_sweep_skips_finished_runs_and_only_evaluates_what_is_missing(grid):
    path, _ = grid
    (path.parent / "runs" / "gatedv" / "lr0.001" / "seed1" / "heldout.parquet").unlink()
    actions = {key: run["action"] for key, run in _sweep(path).items()}
    assert actions == {("baseline", 0.001): "skipped", ("baseline", 0.02): "skipped",
                       ("gatedv", 0.001): "evaluated", ("gatedv", 0.02): "skipped"}
    assert (path.parent / "runs" / "gatedv" / "lr0.001" / "seed1" / "heldout.parquet").is_file()


@pytest.mark.slow
def test_select_lr_picks_the_lowest_final_dev_nll_and_writes_the_confirmation_grid(grid):
    path, _ = grid
    result = CliRunner().invoke(cli.app, ["select-lr", str(path), "--json"])
    assert result.exit_code == 0, result.stderr
    selection = json.loads(result.stdout)
    for variant in ("baseline", "gatedv"):
        curves = {lr: path.parent / "runs" / variant / f"lr{lr:g}" / "seed1" / "curve.csv" for lr in (0.001, 0.02)}
        finals = {lr: pd.read_csv(curve)["dev_nll"].iloc[-1] for lr, curve in curves.items()}
        assert selection["selected"][variant] == min(finals, key=lambda lr: (finals[lr], lr))
        assert selection["ppl"][variant]["0.02"] == pytest.approx(math.exp(finals[0.02]))
    assert selection["selection_seed"] == 1
    confirm = load_experiment(selection["confirmation_grid"])
    assert confirm.seeds == (5, 6) and confirm.variants == ("baseline", "gatedv")
    assert confirm.lrs == {variant: (selection["selected"][variant],) for variant in ("baseline", "gatedv")}
    assert confirm.data.resolve() == load_experiment(path).data.resolve()
    assert confirm.out.resolve() == (path.parent / "runs-confirm").resolve()
    assert (confirm.updates, confirm.eval_every, confirm.batch_size, confirm.size) == (2, 2, 2, "tiny")


@pytest.mark.slow
def test_select_lr_refuses_a_bad_confirmation_seed_and_writes_nothing(grid, tmp_path):
    path, _ = grid
    out = tmp_path / "confirm.toml"
    result = CliRunner().invoke(cli.app, ["select-lr", str(path), "--seeds", "5,-1", "--out", str(out)])
    assert result.exit_code == 2 and not out.exists()
    assert result.stderr.strip() == "error: --seeds: must be an integer from 0 to 9223372036854775807 (got -1)"


@pytest.mark.slow
def test_a_diverged_run_is_recorded_skipped_and_never_selected(prepared_data, tmp_path, monkeypatch):
    path = tmp_path / "diverge.toml"
    path.write_text(GRID.format(data=prepared_data).replace('["baseline", "gatedv"]', '["baseline"]')
                    .replace("[0.001, 0.02]", "[0.001, 0.002]").replace("updates = 2", "updates = 1")
                    .replace("eval_every = 2", "eval_every = 1"))
    calls = []
    original = train_module.next_token_loss

    def first_call_nan(model, batch):
        calls.append(1)
        return original(model, batch) * (math.nan if len(calls) == 1 else 1.0)

    monkeypatch.setattr(train_module, "next_token_loss", first_call_nan)
    runs = _sweep(path)
    # a diverged run's NLL is null: strict JSON
    assert runs[("baseline", 0.001)]["status"] == "diverged" and runs[("baseline", 0.001)]["dev_nll"] is None
    assert runs[("baseline", 0.002)]["action"] == "trained"
    assert _sweep(path)[("baseline", 0.001)]["action"] == "skipped"
    selected = CliRunner().invoke(cli.app, ["select-lr", str(path), "--json", "--out", str(tmp_path / "c.toml")])
    assert selected.exit_code == 0, selected.stderr
    assert json.loads(selected.stdout)["selected"] == {"baseline": 0.002}


@pytest.mark.slow
def test_a_grid_whose_every_rate_diverged_warns_and_is_never_selected(prepared_data, tmp_path, monkeypatch):
    path = tmp_path / "diverge.toml"
    path.write_text(GRID.format(data=prepared_data).replace('["baseline", "gatedv"]', '["baseline"]')
                    .replace("[0.001, 0.02]", "[0.001, 0.002]").replace("updates = 2", "updates = 1")
                    .replace("eval_every = 2", "eval_every = 1"))
    original = train_module.next_token_loss
    monkeypatch.setattr(train_module, "next_token_loss", lambda model, batch: original(model, batch) * math.nan)
    swept = CliRunner().invoke(cli.app, ["sweep", str(path), "--device", "cpu", "--json"])
    assert swept.exit_code == 0, swept.stderr
    run_dirs = [tmp_path / "runs" / "baseline" / lr / "seed1" for lr in ("lr0.001", "lr0.002")]
    expected = [f"{run_dir} diverged at update 1 (last good checkpoint: update 0)" for run_dir in run_dirs]
    assert [line for line in swept.stderr.splitlines() if "warning" in line] == [f"warning: {line}"
                                                                                 for line in expected]
    assert json.loads(swept.stdout)["warnings"] == expected
    out = tmp_path / "c.toml"
    selected = CliRunner().invoke(cli.app, ["select-lr", str(path), "--out", str(out)])
    assert selected.exit_code == 2 and not out.exists()
    assert selected.stderr.strip() == ("error: select-lr: every learning rate of baseline diverged on selection seed "
                                       "1; no rate to select (add lower rates to the grid)")


@pytest.mark.parametrize(("change", "message"), [
    (("config = \"tiny\"", "config = \"tiny\"\nupdate = 3"), "unknown key(s) update"),
    (("seeds = [1]", ""), "missing key 'seeds'"),
    (("seeds = [1]", "seeds = [\"one\"]"), "seeds must be an integer, got 'one'"),
    (("seeds = [1]", "seeds = []"), "seeds must be a non-empty list"),
    (("lrs = [0.001, 0.02]", "lrs = { baseline = [0.001] }"), "lrs must name exactly the variants"),
    (("lrs = [0.001, 0.02]", "lrs = [-0.1]"), ": lrs: must be a positive number, got -0.1"),
    (("lrs = [0.001, 0.02]", "lrs = { baseline = [0.001], gatedv = [0.0] }"),
     ": lrs.gatedv: must be a positive number, got 0.0"),
    (("updates = 2", "updates = 0"), ": updates: must be at least 1, got 0"),
    (("updates = 2", "updates = 2\nwarmup = 2"), ": warmup: 2 must be below the number of updates (2)"),
    (("eval_every = 2", "eval_every = 0"), ": eval_every: must be at least 1, got 0"),
    (("batch_size = 2", "batch_size = 0"), ": batch_size: must be at least 1, got 0"),
    (("seeds = [1]", "seeds = [1, 9223372036854775808]"),
     ": seeds: must be an integer from 0 to 9223372036854775807 (got 9223372036854775808)"),
    (("seeds = [1]", "seeds = [1, -1]"), ": seeds: must be an integer from 0 to 9223372036854775807 (got -1)"),
    (("[select]", "[select]\nseed = -1"), ": select.seed: must be an integer from 0 to 9223372036854775807 (got -1)"),
    (("confirm_seeds = [5, 6]", "confirm_seeds = [5, 99999999999999999999]"),
     ": select.confirm_seeds: must be an integer from 0 to 9223372036854775807 (got 99999999999999999999)"),
    (("out = \"runs\"", "out = \"runs\"\neval_sets = [\"dev\", \"bogus\"]"),
     ": eval_sets: unknown evaluation set(s) 'bogus' (choose from dev, heldout)"),
    (("\"gatedv\"]", "\"gatedvv\"]"), "variants: unknown variant 'gatedvv'"),
    (("out = \"runs\"", "out = \"runs\"\neval_sets = [\"heldout\"]"), "eval_sets must include 'dev'"),
    (("name = \"grid\"", "name = grid"), "invalid TOML"),
])
def test_bad_experiment_files_are_one_line(prepared_data, tmp_path, change, message):
    path = tmp_path / "bad.toml"
    text = GRID.format(data=prepared_data)
    assert change[0] in text
    path.write_text(text.replace(change[0], change[1], 1))
    result = CliRunner().invoke(cli.app, ["sweep", str(path)])
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {path}: ")
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_select_lr_needs_a_finished_grid(prepared_data, tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text(GRID.format(data=prepared_data))
    result = CliRunner().invoke(cli.app, ["select-lr", str(path)])
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"error: {tmp_path / 'runs' / 'baseline' / 'lr0.001' / 'seed1'}: run is not "
                                     "started; finish the grid with `gatedv sweep` first")
    jobs = CliRunner().invoke(cli.app, ["sweep", str(path), "--jobs", "0"])
    assert jobs.exit_code == 2 and jobs.stderr.strip() == "error: --jobs: must be at least 1, got 0"


def test_the_tables_keep_the_largest_seed_apart_from_its_rate():
    outcome = RunOutcome("baseline", 0.004, MAX_SEED, "runs/x", "trained", "finished", 9.1)
    row = SweepResult("grid", (outcome,)).summary().splitlines()[-1]
    assert row.split() == ["baseline", "0.004", str(MAX_SEED), "trained", "9.100000", "runs/x"]
    status = RunStatus("baseline", 0.004, MAX_SEED, "runs/x", "failed", 2, 4, "17", "jobs/17.err")
    row, log = ExperimentStatus("grid", (status,)).summary().splitlines()[-2:]
    assert row.split() == ["baseline", "0.004", str(MAX_SEED), "failed", "2/4", "17", "runs/x"]
    assert log.index("log:") == row.index("failed")  # under the state column
    submitted = Submission("baseline", 0.004, MAX_SEED, "runs/x", "not started", "18")
    row = SubmitResult("grid", "local", (submitted,)).summary().splitlines()[-1]
    assert row.split() == ["baseline", "0.004", str(MAX_SEED), "18", "not", "started", "runs/x"]


def test_the_paper_study_examples_load():
    examples = {path.stem: load_experiment(path) for path in (ROOT / "examples").glob("*.toml")}
    sizes = {name: (experiment.size, len(experiment.runs())) for name, experiment in examples.items()}
    assert sizes == {
        "small-confirmation": ("small", 2 * 5), "small-placement": ("small", 4 * 3),
        "small-lr-grid": ("small", 2 * 4 * 3),
        "small-moment-controls": ("small", 4 * 2 * 3), "medium-lr-selection": ("medium", 2 * 4),
        "medium-confirmation": ("medium", 2 * 2 * 3), "medium-value-gates": ("medium", 6 * 3),
        "tiny-lr-grid": ("tiny", 6), "small-placement-controls": ("small", 5 * 3), "large-context": ("large", 2 * 3)}
    # Table 5 and Table 7 reuse the runs of the grids they compare against.
    assert examples["small-moment-controls"].out == examples["small-lr-grid"].out
    assert examples["medium-value-gates"].out == examples["medium-lr-selection"].out
    assert examples["small-placement-controls"].out == examples["small-placement"].out
    assert examples["small-placement-controls"].knobs == {"k-silu": {"key_act": "silu"}}
    assert examples["medium-lr-selection"].confirm_seeds == (20270211, 20270212, 20270213)
    assert examples["small-confirmation"].spec("gatedv", 0.0048, 1).updates == 32_768


@pytest.mark.parametrize(("rates", "key"), [
    ("[0.004, 0.0040000001]", "lrs"),
    ("{ baseline = [0.001], gatedv = [0.02, 0.0200000004] }", "lrs.gatedv"),
])
def test_rates_that_share_a_run_directory_are_refused_by_sweep_status_and_select_lr(prepared_data, tmp_path, rates,
                                                                                    key):
    path = tmp_path / "collide.toml"
    path.write_text(GRID.format(data=prepared_data).replace("[0.001, 0.02]", rates))
    first, second = ("0.004", "0.0040000001") if key == "lrs" else ("0.02", "0.0200000004")
    expected = (f"error: {path}: {key}: {first} and {second} share the run directory name lr{first} (rates are "
                "named to six significant digits); give rates that differ there\n")
    for args in (["sweep", str(path), "--device", "cpu"], ["sweep", str(path), "--status"], ["select-lr", str(path)]):
        result = CliRunner().invoke(cli.app, args)
        assert result.exit_code == 2 and result.stderr == expected, args
    assert not (tmp_path / "runs").exists() and not (tmp_path / "collide-confirm.toml").exists()


@pytest.mark.parametrize("executor", ["pool", "local"])
def test_a_data_directory_that_is_not_prepared_is_refused_before_any_run_starts(prepared_data, tmp_path, executor):
    path = tmp_path / "nodata.toml"
    path.write_text(GRID.format(data=tmp_path / "missing"))
    result = CliRunner().invoke(cli.app, ["sweep", str(path), "--device", "cpu", "--executor", executor])
    assert result.exit_code == 2 and not (tmp_path / "runs").exists()
    assert result.stderr == (f"error: {path}: data: {tmp_path / 'missing'}: not a prepared data directory (no "
                             "manifest.json; run `gatedv prepare`)\n")


@pytest.mark.slow
def test_a_finished_runs_unreadable_or_foreign_loss_file_is_evaluated_again(grid):
    path, _ = grid
    runs = path.parent / "runs"
    truncated = runs / "baseline" / "lr0.001" / "seed1" / "dev.parquet"
    foreign = runs / "gatedv" / "lr0.02" / "seed1" / "heldout.parquet"
    truncated.write_bytes(truncated.read_bytes()[:100])
    foreign.write_bytes((runs / "gatedv" / "lr0.001" / "seed1" / "heldout.parquet").read_bytes())
    status = CliRunner().invoke(cli.app, ["sweep", str(path), "--status", "--json"])
    assert status.exit_code == 0, status.stderr
    states = {(run["variant"], run["lr"]): run["state"] for run in json.loads(status.stdout)["runs"]}
    assert states == {("baseline", 0.001): "interrupted", ("baseline", 0.02): "finished",
                      ("gatedv", 0.001): "finished", ("gatedv", 0.02): "interrupted"}
    actions = {key: run["action"] for key, run in _sweep(path).items()}
    assert actions == {("baseline", 0.001): "evaluated", ("baseline", 0.02): "skipped",
                       ("gatedv", 0.001): "skipped", ("gatedv", 0.02): "evaluated"}
    from gatedv_stats.core.files import file_sha256
    from gatedv_stats.io.lossfiles import read_loss_file

    for loss_file, arm, lr in ((truncated, "baseline", 0.001), (foreign, "gatedv", 0.02)):
        meta = read_loss_file(loss_file).meta
        assert (meta["arm"], meta["lr"], meta["step"]) == (arm, lr, 2)
        assert meta["checkpoint_sha256"] == file_sha256(loss_file.parent / "checkpoint.pt")
    status = CliRunner().invoke(cli.app, ["sweep", str(path), "--status", "--json"])
    assert json.loads(status.stdout)["counts"] == {"finished": 4}
