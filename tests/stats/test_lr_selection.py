"""Learning-rate selection: paper Table 2 and the tie rule."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from gatedv_stats.core.errors import InputError
from gatedv_stats.stats.lr_selection import select_lr
from helpers import full_disk_line, tree

RATES = [1e-5, 1e-4, 3e-4, 6e-4]
TABLE2 = {"baseline": [36.853, 20.938, 20.558, 21.558], "gatedv": [37.451, 20.632, 20.062, 21.005]}


def table2(seed: int = 20270201) -> pd.DataFrame:
    return pd.DataFrame([{"arm": arm, "lr": lr, "seed": seed, "dev_nll": math.log(ppl)}
                         for arm, ppls in TABLE2.items() for lr, ppl in zip(RATES, ppls)])


def test_paper_table2_selects_3e_4_for_both_arms():
    result = select_lr(table2())
    assert result.selected == {"baseline": 3e-4, "gatedv": 3e-4} and result.selection_seed == 20270201
    assert result.ppl.loc["gatedv", 1e-4] == pytest.approx(20.632, rel=1e-12)
    text = result.summary()
    assert "20.558*" in text and "20.062*" in text and "36.853 " in text
    assert result.to_dict()["selected"] == {"baseline": 3e-4, "gatedv": 3e-4}


def test_ties_favour_the_lower_rate_and_other_seeds_are_ignored():
    table = table2()
    table.loc[(table.arm == "baseline") & (table.lr == 6e-4), "dev_nll"] = math.log(20.558)  # exact tie
    table.loc[(table.arm == "gatedv") & (table.lr == 1e-4), "dev_nll"] = math.log(20.062)
    other_seed = table2(seed=20270211).assign(dev_nll=lambda f: f.dev_nll[::-1].to_numpy())
    result = select_lr(pd.concat([other_seed, table]), selection_seed=20270201)
    assert result.selected == {"baseline": 3e-4, "gatedv": 1e-4}
    assert select_lr(pd.concat([other_seed, table])).selection_seed == 20270201  # smallest shared seed


def test_curve_tables_use_each_runs_final_step():
    early = table2().assign(step=100, dev_nll=lambda f: f.dev_nll[::-1].to_numpy())
    final = table2().assign(step=200)
    assert select_lr(pd.concat([final, early])).selected == {"baseline": 3e-4, "gatedv": 3e-4}


def test_bad_tables():
    with pytest.raises(InputError, match="missing column 'dev_nll'"):
        select_lr(table2().drop(columns=["dev_nll"]))
    with pytest.raises(InputError, match="appears twice"):
        select_lr(pd.concat([table2(), table2().iloc[:1]]))
    with pytest.raises(InputError, match="selection seed 7 has no runs of baseline, gatedv"):
        select_lr(table2(), selection_seed=7)


# --- select-lr over a grid's run directories (hand-written run.json and curve.csv, nothing trained) --------------

SELECTION_GRID = """
name = "selection"
data = "data"
config = "tiny"
variants = ["baseline"]
seeds = [1]
lrs = [0.002, 0.004]
updates = 8
eval_every = 4
batch_size = 2
eval_sets = ["dev"]
out = "runs"

[select]
confirm_seeds = [2, 3]
"""


def _finished_grid(tmp_path, finals=None):
    """SELECTION_GRID with both runs finished: run.json of each run's spec, a curve at steps 0, 4, 8."""
    import json

    from trainer.grid.experiment import load_experiment

    path = tmp_path / "grid.toml"
    path.write_text(SELECTION_GRID)
    experiment = load_experiment(path)
    finals = finals or {0.002: 5.5, 0.004: 5.0}
    for run in experiment.runs():
        run.run_dir.mkdir(parents=True)
        (run.run_dir / "run.json").write_text(json.dumps({**run.spec.to_dict(), "status": "finished", "update": 8}))
        pd.DataFrame({"arm": run.variant, "seed": run.seed, "lr": run.lr, "step": [0, 4, 8],
                      "dev_nll": [9.0, 6.0, finals[run.lr]]}).to_csv(run.run_dir / "curve.csv", index=False)
    return path, experiment


def _select(path, *args):
    from typer.testing import CliRunner

    import cli

    return CliRunner().invoke(cli.app, ["select-lr", str(path), *args])


def _assert_refused(path, tmp_path, message, *options):
    """select-lr exits 2 with `error: message` and writes no confirmation grid."""
    out = tmp_path / "confirm.toml"
    result = _select(path, *options, "--out", str(out))
    assert result.exit_code == 2 and not out.exists()
    assert result.stderr == f"error: {message}\n"


def test_select_lr_refuses_a_curve_that_is_not_its_runs_and_writes_nothing(tmp_path):
    path, experiment = _finished_grid(tmp_path)
    out = tmp_path / "confirm.toml"
    picked = _select(path, "--json", "--out", str(out))
    assert picked.exit_code == 0, picked.stderr
    out.unlink()
    curve = experiment.runs()[1].run_dir / "curve.csv"  # lr 0.004, the rate selected
    rows = pd.read_csv(curve)
    for column, value, held in (("lr", 0.002, "arm baseline lr 0.002 seed 1"),
                                ("arm", "gatedv", "arm gatedv lr 0.004 seed 1"),
                                ("seed", 7, "arm baseline lr 0.004 seed 7")):
        rows.assign(**{column: value}).to_csv(curve, index=False)
        _assert_refused(path, tmp_path, f"{curve}: holds {held}, not the run of its directory (arm baseline lr 0.004 "
                                        "seed 1)")


def test_select_lr_refuses_a_curve_without_its_final_update(tmp_path):
    path, experiment = _finished_grid(tmp_path, finals={0.002: 5.5, 0.004: 5.0})
    curve = experiment.runs()[0].run_dir / "curve.csv"  # lr 0.002: its last recorded NLL is the lowest
    rows = pd.read_csv(curve)
    rows.iloc[:2].assign(dev_nll=[9.0, 4.0]).to_csv(curve, index=False)
    _assert_refused(path, tmp_path, f"{curve}: ends at step 4, not at the run's final update 8; the curve is "
                                    "incomplete")


def test_select_lr_refuses_a_run_json_of_another_run(tmp_path):
    import json

    path, experiment = _finished_grid(tmp_path)
    record_path = experiment.runs()[0].run_dir / "run.json"
    record = json.loads(record_path.read_text())
    record_path.write_text(json.dumps({**record, "lr": 0.004}))
    _assert_refused(path, tmp_path, f"{record_path}: records a different run than the experiment asks for here (lr "
                                    "0.004 != 0.002)")


def test_select_lr_refuses_a_confirmation_seed_given_twice_and_writes_nothing(tmp_path):
    path, _ = _finished_grid(tmp_path)
    _assert_refused(path, tmp_path, "--seeds: lists a value twice", "--seeds", "1,1")
    out = tmp_path / "confirm.toml"
    written = _select(path, "--seeds", "2,1", "--out", str(out))
    assert written.exit_code == 0, written.stderr
    from trainer.grid.experiment import load_experiment

    assert load_experiment(out).seeds == (2, 1) and load_experiment(out).lrs == {"baseline": (0.004,)}


def test_select_lr_on_a_full_disk_keeps_the_confirmation_grid_written_before(tmp_path, full_disk):
    path, _ = _finished_grid(tmp_path)
    out = tmp_path / "confirm.toml"
    assert _select(path, "--out", str(out)).exit_code == 0
    before = tree(tmp_path)
    full_disk(after=0)
    full_disk_line(_select(path, "--out", str(out)), f"{out}: could not be written",
                   "the previous confirm.toml is kept")
    assert tree(tmp_path) == before


def _grid_curves(runs: dict, updates: float | None = 500) -> pd.DataFrame:
    """Curves of (arm, lr, seed) -> (last step, final NLL, run status or None), one row every 100 steps and the
    last; each run's record columns as `read_curve_inputs` gives them beside a run.json (or without one)."""
    rows = []
    for (arm, lr, seed), (last, final, status) in runs.items():
        for step in sorted({*range(0, last, 100), last}):
            rows.append({"arm": arm, "lr": lr, "seed": seed, "step": step,
                         "dev_nll": final + (last - step) / 100,
                         **({} if updates is None else {"run_file": f"runs/{arm}-{lr}-{seed}/run.json",
                                                        "run_status": status, "run_updates": float(updates)})})
    return pd.DataFrame(rows)


def test_report_selection_leaves_out_curves_of_unfinished_runs_and_says_why():
    from gatedv_stats.analysis.training import analyze_curves, analyze_lr_selection

    finished = {("baseline", 0.002, 1): (500, 5.2, "finished"), ("baseline", 0.004, 1): (500, 5.0, "finished"),
                ("gatedv", 0.004, 1): (500, 5.9, "finished")}
    curves = _grid_curves({**finished, ("gatedv", 0.008, 1): (186, 5.4, "running")})
    result = analyze_lr_selection([], curves)
    assert result.selection.selected == {"baseline": 0.004, "gatedv": 0.004}
    assert math.isnan(result.selection.ppl.loc["gatedv"].get(0.008, math.nan))
    assert result.notes == ("gatedv seed 1 at LR 0.008 is left out of the selection: its run has not finished "
                            "(runs/gatedv-0.008-1/run.json says status 'running'; its curve ends at step 186 of "
                            "500).",)
    at_008 = [analysis for analysis in analyze_curves(curves, "baseline") if analysis.lr == 0.008][0]
    assert at_008.notes == ("gatedv seed 1 at LR 0.008: its run has not finished (runs/gatedv-0.008-1/run.json says "
                            "status 'running'; its curve ends at step 186 of 500); it is drawn as far as it goes.",)
    # No status recorded: the curve must end at the recorded final update.
    short = analyze_lr_selection([], _grid_curves({**finished, ("gatedv", 0.008, 1): (400, 5.4, None)}))
    assert short.selection.selected["gatedv"] == 0.004
    assert short.notes == ("gatedv seed 1 at LR 0.008 is left out of the selection: its curve ends at step 400, not "
                           "at the run's final update 500 (runs/gatedv-0.008-1/run.json).",)
    # No run.json: a curve of an arm that stops before the arm's other curves is not compared with them.
    bare = _grid_curves({**finished, ("gatedv", 0.008, 1): (186, 5.4, None)}, updates=None)
    unrecorded = analyze_lr_selection([], bare)
    assert unrecorded.selection.selected["gatedv"] == 0.004
    assert unrecorded.notes == ("gatedv seed 1 at LR 0.008 is left out of the selection: its curve ends at step 186, "
                                "before step 500 that another gatedv curve reaches, and no run.json beside it records "
                                "the run's final update.",)
    # Left out, the only other rate of every arm: no selection, and the reason says which run and why.
    alone = analyze_lr_selection([], _grid_curves({("gatedv", 0.004, 1): (500, 5.9, "finished"),
                                                   ("gatedv", 0.008, 1): (186, 5.4, "running")}))
    assert alone.selection is None and alone.notes == result.notes
    assert "curves of finished runs at two or more learning rates" in alone.omitted


def test_report_of_a_grid_with_an_unfinished_run_selects_among_finished_ones_with_a_note(tmp_path):
    import json

    from experiments import report, write_runs

    root = tmp_path / "exp"
    write_runs(root / "loss", {"baseline": [20.0], "gatedv": [19.5]}, eval_set="heldout", lr=0.004, seeds=[1])
    runs = {("baseline", 0.002, 1): (500, 5.2, "finished"), ("baseline", 0.004, 1): (500, 5.0, "finished"),
            ("gatedv", 0.004, 1): (500, 5.9, "finished"), ("gatedv", 0.008, 1): (186, 5.4, "running")}
    for (arm, lr, seed), (last, _, status) in runs.items():
        run_dir = root / arm / f"lr{lr}" / f"seed{seed}"
        run_dir.mkdir(parents=True)
        (run_dir / "run.json").write_text(json.dumps({"variant": arm, "seed": seed, "lr": lr, "updates": 500,
                                                      "status": status, "update": last}))
        _grid_curves({(arm, lr, seed): runs[(arm, lr, seed)]}, updates=None).to_csv(run_dir / "curve.csv",
                                                                                    index=False)
    md = report([root], tmp_path / "report.md", "md")
    record = str(root / "gatedv" / "lr0.008" / "seed1" / "run.json").replace("_", "\\_")
    assert (f"gatedv seed 1 at LR 0.008 is left out of the selection: its run has not finished ({record} says "
            "status 'running'; its curve ends at step 186 of 500).") in md
    selection = md[md.index("## Learning-rate selection"):md.index("## Paired comparison")]
    assert "| Variant | LR 0.002 | LR 0.004 | \n" in selection  # no column of the unfinished run's rate
    assert "| baseline | 181.272 | **148.413** | \n" in selection and "| gatedv | — | 365.037 | \n" in selection
    assert f"gatedv seed 1 at LR 0.008: its run has not finished ({record} says status" in md
