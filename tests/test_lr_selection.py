"""Learning-rate selection: paper Table 2 and the tie rule."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from gatedv_stats.errors import InputError
from gatedv_stats.stats.lr_selection import select_lr

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
