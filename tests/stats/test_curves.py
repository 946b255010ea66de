"""Curve files and the training-curve comparisons (Figures 2 and 3) against loops over the same table."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pandas as pd
import pytest

from gatedv_stats.core.errors import InputError
from gatedv_stats.io.curvefiles import read_curve_file, read_curve_inputs
from gatedv_stats.io.lossfiles import MAX_TARGET_NLL
from gatedv_stats.stats.curves import curve_delta_p, final_quarter_ppl


def curve_table(seeds=(1, 2, 3), steps=(0, 100, 200, 300, 400), lrs=(0.001,)) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = [{"arm": arm, "seed": seed, "lr": lr, "step": step,
             "dev_nll": 9.0 - step / 100 + offset + rng.uniform(-0.05, 0.05)}
            for arm, offset in (("baseline", 0.0), ("gatedv", -0.02)) for lr in lrs for seed in seeds for step in steps]
    return pd.DataFrame(rows)


def test_curve_delta_p_matches_a_loop(tmp_path):
    table = curve_table()
    table.sample(frac=1.0, random_state=1).to_csv(tmp_path / "curve.csv", index=False)
    curves = read_curve_file(tmp_path / "curve.csv")
    result = curve_delta_p(curves, "baseline", "gatedv")
    assert result.steps.tolist() == [0, 100, 200, 300, 400] and result.seeds.tolist() == [1, 2, 3]
    for k, step in enumerate(result.steps):
        def ppl(arm, seed):
            row = table[(table.arm == arm) & (table.seed == seed) & (table.step == step)]
            return math.exp(float(row["dev_nll"].iloc[0]))
        expected = statistics.fmean(ppl("gatedv", s) for s in (1, 2, 3)) / statistics.fmean(
            ppl("baseline", s) for s in (1, 2, 3)) - 1
        assert result.delta_p[k] == pytest.approx(expected, rel=1e-12)
        pair = result.per_pair[(result.per_pair.seed == 2) & (result.per_pair.step == step)]
        assert float(pair["delta_p"].iloc[0]) == pytest.approx(ppl("gatedv", 2) / ppl("baseline", 2) - 1, rel=1e-12)
    assert len(result.per_pair) == 15 and result.to_dict()["steps"] == [0, 100, 200, 300, 400]
    assert list(result.frame().columns) == ["step", "baseline_ppl_mean", "variant_ppl_mean", "delta_p"]


def test_only_steps_every_paired_run_recorded_are_compared():
    table = curve_table()
    table = table[~((table.arm == "gatedv") & (table.seed == 3) & (table.step == 200))]
    assert curve_delta_p(table, "baseline", "gatedv").steps.tolist() == [0, 100, 300, 400]


def test_several_rates_need_a_choice_and_seeds_must_pair():
    table = curve_table(lrs=(0.001, 0.002))
    with pytest.raises(InputError, match="arm baseline was trained at several learning rates"):
        curve_delta_p(table, "baseline", "gatedv")
    chosen = curve_delta_p(table, "baseline", "gatedv", baseline_lr=0.002, variant_lr=0.001)
    assert (chosen.baseline_lr, chosen.variant_lr) == (0.002, 0.001)
    unpaired = curve_table()
    unpaired = unpaired[~((unpaired.arm == "gatedv") & (unpaired.seed == 1))]
    with pytest.raises(InputError, match="seeds present in one arm only: 1"):
        curve_delta_p(unpaired, "baseline", "gatedv")
    assert curve_delta_p(unpaired, "baseline", "gatedv", allow_unpaired=True).seeds.tolist() == [2, 3]
    with pytest.raises(InputError, match="no runs of arm 'q-silu'"):
        curve_delta_p(unpaired, "baseline", "q-silu")


def test_final_quarter_table_matches_a_loop():
    table = curve_table(steps=tuple(range(0, 1001, 100)))
    result = final_quarter_ppl(table, ["gatedv"])
    assert result["step"].tolist() == [800, 900, 1000]  # steps ≥ 0.75 × 1000
    for _, row in result.iterrows():
        ppls = [math.exp(v) for v in table[(table.arm == "gatedv") & (table.step == row.step)]["dev_nll"]]
        assert row.ppl_mean == pytest.approx(statistics.fmean(ppls), rel=1e-12)
        assert row.ppl_sd == pytest.approx(statistics.stdev(ppls), rel=1e-9)
        assert row.n_seeds == 3


@pytest.mark.parametrize(("change", "message"), [
    (lambda f: f.drop(columns=["dev_nll"]), "missing column 'dev_nll'"),
    (lambda f: f.assign(dev_nll=["x"] + [1.0] * (len(f) - 1)),
     "row 1: dev_nll 'x' is not a finite non-negative number"),
    (lambda f: f.assign(step=[0.5] + [1] * (len(f) - 1)), "row 1: step 0.5 is not a non-negative integer"),
    (lambda f: pd.concat([f, f.iloc[:1]]), "appears twice"),
    (lambda f: f.iloc[:0], "no rows"),
])
def test_bad_curve_files(tmp_path, change, message):
    change(curve_table()).to_csv(tmp_path / "curve.csv", index=False)
    with pytest.raises(InputError, match=message):
        read_curve_file(tmp_path / "curve.csv")


def test_directories_are_searched_for_curve_files(tmp_path):
    table = curve_table()
    for arm in ("baseline", "gatedv"):
        (tmp_path / arm).mkdir()
        table[table.arm == arm].to_csv(tmp_path / arm / "curve.csv", index=False)
    combined = read_curve_inputs([tmp_path])
    assert len(combined) == len(table) and sorted(combined.arm.unique()) == ["baseline", "gatedv"]
    assert read_curve_inputs([tmp_path, tmp_path / "gatedv" / "curve.csv"]).equals(combined)  # named twice: once
    copy = tmp_path / "copy" / "curve.csv"
    copy.parent.mkdir()
    copy.write_bytes((tmp_path / "gatedv" / "curve.csv").read_bytes())
    with pytest.raises(InputError, match=f"^step 0 of arm gatedv seed 1 lr 0.001 is recorded twice: "
                                         f"{tmp_path / 'copy' / 'curve.csv'} and {tmp_path / 'gatedv' / 'curve.csv'}$"):
        read_curve_inputs([tmp_path])


def test_curve_seeds_are_read_exactly_and_dev_nll_within_the_statistics_range(tmp_path):
    table = curve_table(seeds=(2**53 + 1, 2**53 + 2))
    table.to_csv(tmp_path / "curve.csv", index=False)
    assert read_curve_file(tmp_path / "curve.csv")["seed"].unique().tolist() == [2**53 + 1, 2**53 + 2]
    table.assign(seed=[1e30] * len(table)).to_csv(tmp_path / "curve.csv", index=False)
    with pytest.raises(InputError, match="curve.csv: row 1: seed: 1e[+]30 is not an integer from 0 to 2**63 - 1"
                                         .replace("2**63 - 1", str(2**63 - 1))):
        read_curve_file(tmp_path / "curve.csv")
    table.assign(dev_nll=[MAX_TARGET_NLL] + [MAX_TARGET_NLL + 1e-9] * (len(table) - 1)).to_csv(tmp_path / "curve.csv",
                                                                                            index=False)
    with pytest.raises(InputError, match=f"curve.csv: row 2: dev_nll {MAX_TARGET_NLL + 1e-9!r} is not at most "
                                         f"{MAX_TARGET_NLL:g} nats per target"):
        read_curve_file(tmp_path / "curve.csv")
    extreme = curve_table().assign(dev_nll=lambda f: np.where(f["seed"] % 2 == 1, MAX_TARGET_NLL, 0.0))
    extreme.to_csv(tmp_path / "curve.csv", index=False)
    curves = read_curve_file(tmp_path / "curve.csv")
    with np.errstate(divide="raise", over="raise", invalid="raise"):  # as every command runs
        assert np.isfinite(curve_delta_p(curves, "baseline", "gatedv").delta_p).all()
        assert np.isfinite(final_quarter_ppl(curves)[["ppl_mean", "ppl_sd"]].to_numpy()).all()


def test_a_curve_row_of_another_run_than_the_run_json_beside_it_is_an_error(tmp_path):
    import json
    import re

    run = tmp_path / "gatedv" / "lr0.004" / "seed1"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"variant": "gatedv", "seed": 1, "lr": 0.004, "updates": 400,
                                              "status": "finished"}))
    table = curve_table(seeds=(1,), lrs=(0.004,)).query("arm == 'gatedv'").reset_index(drop=True)
    table.to_csv(run / "curve.csv", index=False)
    (tmp_path / "loose").mkdir()
    curve_table(seeds=(1,), lrs=(0.002,)).to_csv(tmp_path / "loose" / "curve.csv", index=False)
    curves = read_curve_inputs([tmp_path])
    recorded = curves[["lr", "run_file", "run_status", "run_updates"]].drop_duplicates()
    assert recorded.to_numpy().tolist() == [[0.002, None, None, pytest.approx(np.nan, nan_ok=True)],
                                            [0.004, str(run / "run.json"), "finished", 400.0]]
    for column, value, held in (("lr", 0.003, "arm gatedv lr 0.003 seed 1"),
                                ("arm", "ghost", "arm ghost lr 0.004 seed 1"),
                                ("seed", 7, "arm gatedv lr 0.004 seed 7")):
        changed = table.copy()
        changed.loc[2, column] = value  # the row of step 200
        changed.to_csv(run / "curve.csv", index=False)
        with pytest.raises(InputError, match="^" + re.escape(f"{run / 'curve.csv'}: step 200 holds {held}, not the "
                                                             f"run of {run / 'run.json'} (arm gatedv lr 0.004 "
                                                             "seed 1)") + "$"):
            read_curve_inputs([tmp_path])
