"""Sequential seeds and the research ledger used together on a shared baseline: a design run at the ledger's level
(started at the first look, entered at the stop with its stage-wise p-value, so that "stop: better" is a keep and
every other stop a discard), a design entered afterwards with `ledger add --design`, candidates decided in parallel
(levels fixed at their start), the dependence of candidates that share a reference's runs, e-LOND's e-values, a
plan at the ledger's level, and the refusals at these seams, each one line with nothing written."""

from __future__ import annotations

import json
import math
import shutil

import pytest

import gatedv_stats as gv
from gatedv_stats.analysis.ledger import read_history
from gatedv_stats.analysis.sequential import load_design
from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.io.designfiles import write_run_design
from gatedv_stats.io.lossfiles import write_loss_file
from gatedv_stats.stats.e_values import likelihood_ratio_e_value
from gatedv_stats.stats.online_fdr import next_level, online_procedure
from gatedv_stats.testing import synthetic_runs
from helpers import assert_input_error, invoke, invoke_json

AA = {"baseline": [30.0, 30.3, 29.8, 30.1, 29.9, 30.2, 30.05, 29.95, 30.15, 29.85]}
# one baseline shared by every candidate: a clearly better one, one that changes nothing, a worse one
STUDY = {"baseline": [30.0, 30.25, 29.9, 30.1, 30.05, 29.95],
         "good": [29.1, 29.4, 29.0, 29.2, 29.15, 29.05],
         "same": [30.02, 30.22, 29.93, 30.08, 30.06, 29.94],
         "bad": [31.0, 31.3, 30.9, 31.1, 31.05, 30.95]}
MAX_SEEDS = 6


def _write(folder, ppls):
    folder.mkdir(parents=True, exist_ok=True)
    for run in synthetic_runs(ppls, n_docs=60, rng_seed=3, noise=0.01):
        write_loss_file(folder / f"{run.arm}-{run.seed}.parquet", run.docs, {**run.meta, "eval_set": "heldout"})
    return folder


@pytest.fixture(scope="module")
def shared_study(tmp_path_factory):
    """The study's loss files and the floor of its A/A runs, written once for the module: its tests only read them."""
    folder = tmp_path_factory.mktemp("study")
    _write(folder / "aa", AA)
    gv.noise_floor(folder / "aa", out=folder / "floor.json")
    return _write(folder / "study", STUDY), folder / "floor.json"


@pytest.fixture()
def study(shared_study, tmp_path):
    """The shared study's folder, with its floor copied to tmp_path/floor.json beside the test's designs and
    ledgers."""
    folder, floor = shared_study
    shutil.copyfile(floor, tmp_path / "floor.json")
    return folder


def files(study, arm, n_pairs):
    return [study / f"{arm}-{seed}.parquet" for seed in range(n_pairs)]


def decide(study, tmp_path, arm, n_pairs, **settings):
    return gv.sequential(baseline=files(study, "baseline", n_pairs), variant=files(study, arm, n_pairs),
                         design=tmp_path / f"{arm}.json", max_seeds=MAX_SEEDS, sesoi=0.01,
                         noise_floor=tmp_path / "floor.json", **settings)


def run_to_stop(study, tmp_path, arm, **settings):
    for n_pairs in range(1, MAX_SEEDS + 1):
        result = decide(study, tmp_path, arm, n_pairs, **settings)
        if result.stop:
            return result
    raise AssertionError("the design did not stop at its budget")


def test_with_a_ledger_stop_better_is_a_keep_and_every_other_stop_a_discard(study, tmp_path):
    ledger = tmp_path / "study.ledger"
    outcomes = {}
    for arm in ("good", "same", "bad"):
        first = decide(study, tmp_path, arm, 1, ledger=ledger, note=arm)
        start = read_history(ledger).entries[-2 if first.stop else -1]
        level = start.level
        assert start.is_start and first.design.alpha == pytest.approx(2.0 * level)
        assert first.design.ledger["level"] == level and first.design.ledger["step"] == start.step
        assert f"at level {level:.3g} a budget of {MAX_SEEDS} seed pairs gives power" in first.summary()
        stopped = run_to_stop(study, tmp_path, arm, ledger=ledger, note=arm)
        entry = stopped.ledger_entry
        assert not entry.is_start and entry.start_step == start.step and entry.level == level
        assert entry.p_value == stopped.look.p_value and entry.p_source == "stage-wise"
        assert entry.estimate == stopped.look.median_unbiased and entry.verdict == stopped.decision
        assert entry.design_sha256 == stopped.design.sha256
        outcomes[arm] = (stopped.look.direction == "better", entry.decision)
    assert outcomes["good"] == (True, "keep") and outcomes["bad"][1] == outcomes["same"][1] == "discard"
    assert all((decision == "keep") == better for better, decision in outcomes.values())
    history = read_history(ledger)
    assert len(history.entries) == 6 and len(history.decided) == 3 and not history.running
    # the same stopping look again enters nothing more, and the stopped design takes no further look
    again = decide(study, tmp_path, "good", stopped_pairs(tmp_path, "good"), ledger=ledger)
    assert again.already_recorded and again.ledger_entry.step == read_history(ledger).decided[0].step
    assert len(read_history(ledger).entries) == 6


def stopped_pairs(tmp_path, arm):
    return load_design(tmp_path / f"{arm}.json").looks[-1].n_pairs


def test_candidates_decided_in_parallel_have_their_levels_fixed_at_their_start(study, tmp_path):
    ledger = tmp_path / "parallel.ledger"
    good = decide(study, tmp_path, "good", 1, ledger=ledger)  # both start before either stops
    same = decide(study, tmp_path, "same", 1, ledger=ledger)
    lond = online_procedure("lond")
    assert good.ledger_entry.level == pytest.approx(next_level([], lond))
    assert same.ledger_entry.level == pytest.approx(next_level([None], lond))  # the first still running
    good_stop = run_to_stop(study, tmp_path, "good", ledger=ledger)
    same_stop = run_to_stop(study, tmp_path, "same", ledger=ledger)
    assert good_stop.ledger_entry.level == good.ledger_entry.level
    assert same_stop.ledger_entry.level == same.ledger_entry.level  # not raised by the keep that finished meanwhile
    assert good_stop.ledger_entry.decision == "keep"
    third = gv.Ledger(ledger).add(files(study, "bad", 2), against=files(study, "baseline", 2))
    assert third.level == pytest.approx(next_level([good_stop.look.p_value, same_stop.look.p_value], lond))


def test_a_design_made_without_a_ledger_enters_it_afterwards_with_its_stagewise_p(study, tmp_path):
    stopped = run_to_stop(study, tmp_path, "good")
    n_pairs = stopped.look.n_pairs
    ledger = gv.Ledger(tmp_path / "after.ledger")
    entry = ledger.add(files(study, "good", n_pairs), against=files(study, "baseline", n_pairs),
                       design=tmp_path / "good.json", note="decided first")
    assert entry.p_value == stopped.look.p_value and entry.p_source == "stage-wise" and entry.start_step is None
    assert entry.low == stopped.look.interval.low and entry.confidence_level == pytest.approx(0.95)
    fixed = gv.compare(baseline=files(study, "baseline", n_pairs), variant=files(study, "good", n_pairs))
    assert entry.p_value != pytest.approx(fixed.comparison.seed_document.p_value / 2)  # not the fixed-sample p
    with pytest.raises(InputError, match="already entered these good files against these baseline files"):
        ledger.add(files(study, "good", n_pairs), against=files(study, "baseline", n_pairs),
                   design=tmp_path / "good.json")
    assert len(ledger.entries()) == 1


def test_refusals_at_the_seams_name_what_differs_and_write_nothing(study, tmp_path):
    stopped = run_to_stop(study, tmp_path, "good")
    n_pairs = stopped.look.n_pairs
    ledger = gv.Ledger(tmp_path / "seams.ledger")
    with pytest.raises(InputError, match="is a design of variant arm good, the files give bad"):
        ledger.add(files(study, "bad", n_pairs), against=files(study, "baseline", n_pairs),
                   design=tmp_path / "good.json")
    with pytest.raises(InputError, match=f"(good|baseline)-{n_pairs - 1}.parquet: .*stopping look .* was taken on it"):
        ledger.add(files(study, "good", n_pairs - 1), against=files(study, "baseline", n_pairs - 1),
                   design=tmp_path / "good.json")
    with pytest.raises(InputError, match=f"(good|baseline)-{n_pairs}.parquet: not among the files"):
        ledger.add(files(study, "good", n_pairs + 1), against=files(study, "baseline", n_pairs + 1),
                   design=tmp_path / "good.json")
    unfinished = decide(study, tmp_path, "same", 1)
    assert not unfinished.stop
    with pytest.raises(InputError, match="the design has not stopped"):
        ledger.add(files(study, "same", 1), against=files(study, "baseline", 1), design=tmp_path / "same.json")
    assert not ledger.path.exists()  # nothing was written, not even an empty ledger
    # a ledger at another α, and a design of its own α given a ledger
    gv.Ledger(tmp_path / "seams.ledger").add(files(study, "bad", 2), against=files(study, "baseline", 2))
    with pytest.raises(ParameterError, match="alpha: .* was created with α = 0.05"):
        decide(study, tmp_path, "fresh-bad".split("-")[1], 1, ledger=ledger.path, alpha=0.1)
    with pytest.raises(ParameterError, match="same.json was made without a ledger, at its own α = 0.05"):
        decide(study, tmp_path, "same", 2, ledger=ledger.path)
    assert len(read_history(ledger.path).entries) == 1
    # runs that a sequential sweep decided cannot enter with a fixed-sample p
    for path in files(study, "same", 2):
        run_dir = tmp_path / "runs" / path.stem
        run_dir.mkdir(parents=True)
        (run_dir / "heldout.parquet").write_bytes(path.read_bytes())
        write_run_design(run_dir, tmp_path / "same.json", "0" * 64)
    with pytest.raises(InputError, match="decided sequentially by .*same.json .*enter them with --design"):
        ledger.add(sorted((tmp_path / "runs").glob("*/heldout.parquet")), against=files(study, "baseline", 2))
    assert len(read_history(ledger.path).entries) == 1


def test_candidates_that_share_a_reference_are_dependent_and_say_so(study, tmp_path):
    addis = gv.Ledger(tmp_path / "addis.ledger", procedure="addis")
    first = addis.add(files(study, "good", 3), against=files(study, "baseline", 3))
    second = addis.add(files(study, "same", 3), against=files(study, "baseline", 3))
    assert first.shared_reference is None and second.shared_reference == [1]
    assert any("shares runs with step 1" in warning and "does not cover" in warning for warning in second.warnings)
    assert "step 2: the reference shares runs with an earlier entry's: the tests are dependent" in addis.summary()
    assert addis.to_dict()["notes"] == ["step 2: the reference shares runs with an earlier entry's: the tests are "
                                        "dependent, which ADDIS's guarantee (for independent tests) does not cover; "
                                        "LOND controls the FDR under this positive dependence and e-LOND under any (a "
                                        "new ledger: --procedure lond)"]
    lond = gv.Ledger(tmp_path / "lond.ledger")
    lond.add(files(study, "good", 3), against=files(study, "baseline", 3))
    shared = lond.add(files(study, "same", 3), against=files(study, "baseline", 3))
    assert shared.shared_reference == [1] and not any("shares runs" in warning for warning in shared.warnings)
    report = gv.report(study, tmp_path / "report.md", ledger=addis.path).read_text()
    assert "Step 2: the reference shares runs with an earlier entry's" in report[report.index("## Research ledger"):]


def test_e_lond_tests_likelihood_ratio_e_values_at_its_smallest_effect(study, tmp_path):
    with pytest.raises(ParameterError, match="an e-LOND ledger tests e-values, .* give it \\(sesoi\\)"):
        gv.Ledger(tmp_path / "e.ledger", procedure="e-lond").add(files(study, "good", 3),
                                                                  against=files(study, "baseline", 3))
    ledger = gv.Ledger(tmp_path / "e.ledger", procedure="e-lond", sesoi=0.02)
    entry = ledger.add(files(study, "good", 3), against=files(study, "baseline", 3))
    assert entry.e_value == pytest.approx(likelihood_ratio_e_value(entry.estimate, entry.se ** 2, math.log1p(0.02),
                                                                   False))
    assert entry.decision == ("keep" if entry.e_value >= 1.0 / entry.level else "discard")
    stopped = run_to_stop(study, tmp_path, "bad", ledger=ledger.path)
    design, look = stopped.design, stopped.look
    information = design.information[look.n_pairs - design.first_look]
    assert stopped.ledger_entry.e_value == pytest.approx(
        likelihood_ratio_e_value(look.estimate, 1.0 / information, math.log1p(0.02), False))
    assert stopped.ledger_entry.e_value == look.e_value and stopped.ledger_entry.decision == "discard"
    # the design's "better" is the e-process reaching 1/level, so that it is a keep
    good = run_to_stop(study, tmp_path, "good", ledger=ledger.path)
    assert good.look.direction == "better" and good.ledger_entry.decision == "keep"
    assert good.look.e_value * good.design.ledger["level"] >= 1.0 and good.ledger_entry.p_source == "e-process"


def test_a_plan_at_the_ledgers_level(study, tmp_path):
    ledger = gv.Ledger(tmp_path / "plan.ledger")
    ledger.add(files(study, "bad", 3), against=files(study, "baseline", 3))
    at_level = gv.plan(effect=0.02, noise_floor=tmp_path / "floor.json", ledger=ledger.path)
    level = next_level([entry.row["p_value"] for entry in ledger.entries()], online_procedure("lond"))
    assert at_level.plan.alpha == pytest.approx(2.0 * level)
    assert str(at_level).startswith(f"planned at one-sided level {level:.3g}")
    fixed = gv.plan(effect=0.02, noise_floor=tmp_path / "floor.json")
    assert at_level.seeds_required > fixed.seeds_required
    pilot = [*files(study, "good", 3), *files(study, "baseline", 3)]  # without a floor: from pilot runs
    from_pilot = gv.plan(pilot, effect=0.02, ledger=ledger.path)
    assert from_pilot.plan.alpha == pytest.approx(2.0 * level) and str(from_pilot).startswith("planned at")
    assert from_pilot.seeds_required >= gv.plan(pilot, effect=0.02).seeds_required
    with pytest.raises(ParameterError, match="alpha: a plan for a research ledger"):
        gv.plan(effect=0.02, noise_floor=tmp_path / "floor.json", ledger=ledger.path, alpha=0.05)


def test_decide_reports_the_stagewise_p_and_enters_the_ledger_on_the_command_line(study, tmp_path):
    ledger = tmp_path / "cli.ledger"
    common = ("--design", tmp_path / "cli.json", "--max-seeds", MAX_SEEDS, "--sesoi", 0.01, "--noise-floor",
              tmp_path / "floor.json", "--ledger", ledger)
    for n_pairs in range(1, MAX_SEEDS + 1):
        result = invoke("decide", "--baseline", *files(study, "baseline", n_pairs), "--variant",
                        *files(study, "good", n_pairs), *common, "--json")
        data = json.loads(result.stdout)
        if result.exit_code == 0:
            break
        assert result.exit_code == 10 and data["p_value"] is None
    assert data["stop"] and data["decision"] == "better" and data["p_value"] < data["look"]["alpha_spent"]
    assert data["median_unbiased_estimate"] > data["naive_estimate"]  # pulled toward 0 from a benefit (D < 0)
    assert data["ledger_entry"]["decision"] == "keep"
    shown = invoke_json("ledger", ledger, "show")
    assert shown["n_entries"] == 1 and shown["n_running"] == 0
    assert_input_error(invoke("decide", "--baseline", *files(study, "baseline", 2), "--variant",
                              *files(study, "same", 2), "--design", tmp_path / "other.json", "--max-seeds", 4,
                              "--ledger", ledger, "--alpha", "0.1"), "--alpha:", "α = 0.05")
    assert not (tmp_path / "other.json").exists()
    n_pairs = data["look"]["n_pairs"]
    assert_input_error(invoke("ledger", tmp_path / "fresh.ledger", "add", "--design", tmp_path / "cli.json",
                              "--candidate", *files(study, "bad", n_pairs), "--against",
                              *files(study, "baseline", n_pairs)), "is a design of variant arm good",
                       "the files give bad")
    assert_input_error(invoke("ledger", ledger, "add", "--design", tmp_path / "cli.json", "--candidate",
                              *files(study, "good", n_pairs), "--against", *files(study, "baseline", n_pairs)),
                       "was already entered at step")
    assert not (tmp_path / "fresh.ledger").exists() and invoke_json("ledger", ledger, "show")["n_entries"] == 1
