"""Pairing item scores of two arms: seeds, items, hashes and the task's configuration."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.pairing.pair import pair_families, pair_with_reference, pilot_pair
from gatedv_stats.stats.scale import MetricScale
from item_runs import item_run, pair_items, paired_runs

RNG = np.random.default_rng(0)
BASE = RNG.integers(0, 2, (3, 12)).astype(float)
VAR = RNG.integers(0, 2, (3, 12)).astype(float)


def pair(runs, **kwargs):
    return pair_items(runs, baseline_arm="baseline", variant_arm="gatedv", metric="acc", **kwargs)


def shuffled(run, seed):
    return dataclasses.replace(run, units=run.units.sample(frac=1.0, random_state=seed).reset_index(drop=True))


def test_arrays_follow_sorted_seeds_and_item_ids_whatever_the_input_order():
    runs = paired_runs(BASE, VAR, seeds=[7, 2, 5])
    paired = pair([shuffled(run, k) for k, run in enumerate(reversed(runs))])
    assert paired.seeds.tolist() == [2, 5, 7] and paired.doc_ids.tolist() == sorted(paired.doc_ids)
    order = [1, 2, 0]  # seeds 2, 5, 7 were rows 1, 2, 0
    np.testing.assert_array_equal(paired.baseline, BASE[order])
    np.testing.assert_array_equal(paired.variant, VAR[order])
    assert paired.higher_is_better and paired.task == "hellaswag" and paired.proportion
    assert paired.sources["variant"] == ["hellaswag-gatedv-2", "hellaswag-gatedv-5", "hellaswag-gatedv-7"]


def test_grouping_columns_travel_with_their_items():
    subtasks = np.array(["a", "b", "c"] * 4)
    paired = pair([shuffled(run, 3) for run in paired_runs(BASE, VAR, subtasks=subtasks)])
    assert list(paired.doc_columns.columns) == ["subtask"]
    assert paired.doc_columns["subtask"].tolist() == subtasks.tolist()


@pytest.mark.parametrize("column", ["doc_hash", "prompt_hash", "target_hash"])
def test_a_differing_hash_names_the_item_and_the_field(column):
    runs = paired_runs(BASE, VAR)
    items = runs[4].units.copy()
    items.loc[5, column] = "other"
    runs[4] = dataclasses.replace(runs[4], units=items)
    with pytest.raises(InputError, match=f"{column} differs for 1 items .* item005.*allow_mismatch {column}"):
        pair(runs)
    assert any(column in note for note in pair(runs, allow_mismatch=(column,)).notes)


def test_hashes_are_compared_only_where_files_carry_them():
    runs = paired_runs(BASE, VAR)
    runs[0] = item_run("baseline", 0, BASE[0], hashes=False)
    assert pair(runs).notes == ()


@pytest.mark.parametrize(("field", "change"), [("task_config_sha256", {"meta": {"task_config_sha256": "x"}}),
                                               ("n_shot", {"n_shot": 5})])
def test_a_different_task_configuration_or_shot_count_is_refused(field, change):
    runs = paired_runs(BASE, VAR)
    runs[3] = item_run("gatedv", 0, VAR[0], **change)
    with pytest.raises(InputError, match=f"{field} differs.*allow_mismatch {field}"):
        pair(runs)
    assert any(field in note for note in pair(runs, allow_mismatch=(field,)).notes)


def test_unknown_mismatch_field_is_a_parameter_error():
    with pytest.raises(ParameterError, match="allow_mismatch: weights is not one of"):
        pair(paired_runs(BASE, VAR), allow_mismatch=("weights",))


def test_unpaired_seeds_are_refused_unless_dropped():
    runs = paired_runs(BASE, VAR)[:-1]  # the variant lacks seed 2
    with pytest.raises(InputError, match="seeds present in one arm only: baseline 2"):
        pair(runs)
    paired = pair(runs, allow_unpaired=True)
    assert paired.seeds.tolist() == [0, 1] and "dropped unpaired seeds 2" in paired.notes[0]


def test_other_items_are_refused_naming_them():
    runs = paired_runs(BASE, VAR)
    runs[4] = item_run("gatedv", 1, VAR[1, :-1])
    with pytest.raises(InputError, match="items differ .* 1 doc_ids missing from hellaswag-gatedv-1 "
                                         "\\(first: item011\\)"):
        pair(runs)


def test_metric_and_direction_are_checked():
    runs = paired_runs(BASE, VAR)
    with pytest.raises(InputError, match="no metric 'acc_norm'"):
        pair_items(runs, baseline_arm="baseline", variant_arm="gatedv", metric="acc_norm")
    runs[5] = item_run("gatedv", 2, VAR[2], higher_is_better=False)
    with pytest.raises(InputError, match="disagree on whether a higher acc is better"):
        pair(runs)


def test_several_tasks_are_paired_each_and_a_pilot_needs_one():
    runs = paired_runs(BASE, VAR) + paired_runs(VAR, BASE, task="arc_easy")
    pairs = pair_families([run for run in runs if run.arm == "baseline"], [run for run in runs if run.arm == "gatedv"],
                          MetricScale(metric="acc"))
    assert [paired.task for paired in pairs] == ["arc_easy", "hellaswag"]
    np.testing.assert_array_equal(pairs[0].baseline, VAR)
    with pytest.raises(InputError, match="the pilot holds several tasks \\(arc_easy, hellaswag\\)"):
        pilot_pair(runs, MetricScale(metric="acc"))
    pairs = pair_with_reference(runs, "baseline", MetricScale(metric="acc"))
    assert [(p.task, p.variant_arm) for p in pairs] == [("arc_easy", "gatedv"), ("hellaswag", "gatedv")]
    with pytest.raises(ParameterError, match="reference: no runs of arm 'x'"):
        pair_with_reference(runs, "x", MetricScale(metric="acc"))
