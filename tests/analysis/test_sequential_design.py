"""A sequential design over seed pairs: made at its first look, sealed, one look recorded per call, refused when it
would change or was edited by hand, for loss files and item scores; and `gatedv decide`, whose exit status drives a
shell loop (0: stop, 10: continue)."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import numpy as np
import pytest

import gatedv_stats as gv
from gatedv_stats.analysis.noise_floor import NoiseFloor
from gatedv_stats.analysis.sequential import create_design, load_design, look
from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.core.files import canonical_sha256
from gatedv_stats.io.designfiles import write_design_file
from gatedv_stats.io.floorfiles import read_floor_file
from gatedv_stats.io.itemfiles import write_item_file
from gatedv_stats.io.lossfiles import write_loss_file
from gatedv_stats.stats import sequential as gs
from gatedv_stats.stats import sequential_t as gst
from gatedv_stats.stats.sequential import DECISIONS
from gatedv_stats.testing import synthetic_runs
from helpers import assert_input_error, invoke
from item_runs import item_run

AA = {"baseline": [30.0, 30.3, 29.8, 30.1, 29.9, 30.2, 30.05, 29.95, 30.15, 29.85]}
# a variant about 2% better on every seed, the seeds' spread about the floor's
STUDY = {"baseline": [30.0, 30.25, 29.9, 30.1, 30.05, 29.95], "gatedv": [29.35, 29.7, 29.35, 29.5, 29.4, 29.35]}
LINE = re.compile(r"^(continue: train seed pair \d+|stop: (better|worse|equivalent|no useful gain|no detectable "
                  r"difference) \(.+\))$")


def write_runs(folder, ppls, *, seeds=None, n_docs=80):
    for run in synthetic_runs(ppls, n_docs=n_docs, rng_seed=3, seeds=seeds, noise=0.01):
        write_loss_file(folder / f"{run.arm}-{run.seed}.parquet", run.docs, {**run.meta, "eval_set": "heldout"})
    return folder


def floor_of(path):
    return NoiseFloor.from_dict(read_floor_file(path))


def seed_files(folder, seeds):
    return [folder / f"{arm}-{seed}.parquet" for arm in ("baseline", "gatedv") for seed in seeds]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """The study's loss files and the floor of its A/A runs, written once for the module: its tests only read them
    (each writes its designs under its own tmp_path)."""
    folder = tmp_path_factory.mktemp("study")
    write_runs(folder / "aa", AA)
    floor = gv.noise_floor(folder / "aa", out=folder / "floor.json").written
    return write_runs(folder / "study", STUDY), floor


def test_looks_are_recorded_one_per_seed_pair_until_one_stops(study, tmp_path):
    folder, floor = study
    design = tmp_path / "design.json"
    taken = []
    for n_seeds in range(1, 7):
        options = {"max_seeds": 6, "sesoi": 0.005, "noise_floor": floor} if n_seeds == 1 else {}
        result = gv.sequential(seed_files(folder, range(n_seeds)), design=design, baseline_arm="baseline",
                               variant_arm="gatedv", **options)
        taken.append(result)
        assert LINE.match(result.line) and result.decision in DECISIONS and result.look.n_pairs == n_seeds
        assert result.new_design == (n_seeds == 1) and result.written == str(design)
        if result.stop:
            break
    assert [look.decision for look in taken[:-1]] == ["continue"] * (len(taken) - 1) and taken[-1].stop
    assert taken[-1].decision == "better" and taken[-1].look.interval.high < 0.0
    recorded = load_design(design)
    assert [look.n_pairs for look in recorded.looks] == list(range(1, len(taken) + 1))
    assert recorded.first_look == 1 and recorded.seed_variance_source == "noise floor"
    assert all(look.design_sha256 == recorded.sha256 for look in recorded.looks)
    spent = [look.alpha_spent for look in recorded.looks]
    assert spent == sorted(spent) and spent[-1] <= 0.025 + 1e-12
    frame = taken[-1].to_frame()
    assert list(frame["look"]) == list(range(1, len(taken) + 1)) and frame["decision"].iloc[-1] == "better"
    payload = json.loads(json.dumps(taken[-1].to_dict()))  # strict JSON: no infinity anywhere
    assert payload["stop"] and payload["design_sha256"] == recorded.sha256 and len(payload["looks"]) == len(taken)


def test_the_same_seed_pairs_again_return_the_recorded_look_and_a_design_cannot_change(study, tmp_path):
    folder, floor = study
    design = tmp_path / "design.json"
    first = gv.sequential(seed_files(folder, [0]), design=design, baseline_arm="baseline", variant_arm="gatedv",
                          max_seeds=4, sesoi=0.005, noise_floor=floor)
    before = design.read_text()
    again = gv.sequential(seed_files(folder, [0]), design=design, baseline_arm="baseline", variant_arm="gatedv")
    assert again.already_recorded and again.written is None and again.look == first.look
    assert design.read_text() == before
    for name, value in (("max_seeds", 5), ("alpha", 0.1), ("spending", "pocock"), ("sesoi", 0.01)):
        with pytest.raises(ParameterError, match=rf"^{name}: .*fixes {name} .*\(1 look taken\); a design cannot "
                                                 "change once it has started"):
            gv.sequential(seed_files(folder, [0, 1]), design=design, baseline_arm="baseline", variant_arm="gatedv",
                          **{name: value})
    with pytest.raises(InputError, match="the next look needs those and more"):
        gv.sequential(seed_files(folder, [1, 2]), design=design, baseline_arm="baseline", variant_arm="gatedv")
    with pytest.raises(InputError, match="the budget is 4 seed pairs"):
        gv.sequential(seed_files(folder, range(5)), design=design, baseline_arm="baseline", variant_arm="gatedv")
    edited = json.loads(before)
    edited["design"]["max_seeds"] = 5
    design.write_text(json.dumps(edited))
    with pytest.raises(InputError, match="does not match the sha256 it records \\(sha256\\)"):
        gv.sequential(seed_files(folder, [0, 1]), design=design, baseline_arm="baseline", variant_arm="gatedv")


def test_a_new_design_needs_its_budget_and_without_a_floor_two_seed_pairs(study, tmp_path):
    folder, _ = study
    with pytest.raises(ParameterError, match="a new design needs the budget of seed pairs, max_seeds"):
        gv.sequential(seed_files(folder, [0, 1]), design=tmp_path / "d.json", baseline_arm="baseline",
                      variant_arm="gatedv")
    with pytest.raises(InputError, match="a look needs 2 seed pairs without a noise floor"):
        gv.sequential(seed_files(folder, [0]), design=tmp_path / "d.json", baseline_arm="baseline",
                      variant_arm="gatedv", max_seeds=4)
    result = gv.sequential(seed_files(folder, [0, 1]), design=tmp_path / "d.json", baseline_arm="baseline",
                           variant_arm="gatedv", max_seeds=4)
    assert result.design.first_look == 2 and result.design.seed_variance_source == "first look"
    assert result.design.drift is None and result.look.futility is None  # no SESOI: no futility boundary
    with pytest.raises(ParameterError, match="max_seeds: must be at least 2"):
        gv.sequential(seed_files(folder, [0, 1]), design=tmp_path / "e.json", baseline_arm="baseline",
                      variant_arm="gatedv", max_seeds=1)


def test_a_stopped_design_takes_no_more_looks_but_futility_is_non_binding(study):
    folder, floor = study
    paired = gv.pair(seed_files(folder, [0, 1]), baseline_arm="baseline", variant_arm="gatedv")
    design = create_design(gv.pair(seed_files(folder, [0]), baseline_arm="baseline", variant_arm="gatedv"),
                           max_seeds=3, sesoi=0.005, floor=floor_of(floor))
    first = look(design, gv.pair(seed_files(folder, [0]), baseline_arm="baseline", variant_arm="gatedv"))
    for decision, allowed in (("better", False), ("no useful gain", True)):
        stopped = design.with_look(replace(first, decision=decision))
        if allowed:
            assert "non-binding" in " ".join(look(stopped, paired).notes)
        else:
            with pytest.raises(InputError, match=f"the design stopped at look 1 \\({decision}\\)"):
                look(stopped, paired)


def test_documents_that_cap_the_information_are_named_before_the_first_look(study, tmp_path):
    folder, floor = study
    few = write_runs(tmp_path / "few", {"baseline": [30.0], "gatedv": [29.9]}, seeds=[0], n_docs=8)
    design = create_design(gv.pair(few, baseline_arm="baseline", variant_arm="gatedv"), max_seeds=8, sesoi=0.001,
                           floor=floor_of(floor))
    assert any("add documents, not seeds" in note or "may cap the information" in note for note in design.notes)
    assert design.document_term_high is not None and design.document_term <= design.document_term_high
    assert design.power_at_sesoi < design.power


@pytest.mark.slow
def test_item_scores_are_decided_on_their_metric(tmp_path):
    rng = np.random.default_rng(4)
    p = rng.uniform(0.3, 0.7, 300)
    for seed in range(5):
        for arm, shift in (("baseline", 0.0), ("gatedv", 0.25)):
            run = item_run(arm, seed, (rng.random(p.size) < p + shift).astype(float), task="arc_easy")
            write_item_file(tmp_path / f"{arm}-{seed}.parquet", run.units,
                            {"arm": arm, "seed": seed, "task": "arc_easy", "n_shot": 0, "metrics": ["acc"]})
    for n_seeds in range(2, 6):
        files = [tmp_path / f"{arm}-{seed}.parquet" for arm in ("baseline", "gatedv") for seed in range(n_seeds)]
        result = gv.sequential(files, design=tmp_path / "items.json", baseline_arm="baseline", variant_arm="gatedv",
                               metric="acc", **({"max_seeds": 5, "sesoi": 0.03} if n_seeds == 2 else {}))
        if result.stop:
            break
    assert result.design.metric == "acc" and result.design.higher_is_better and result.design.unit == "item"
    assert result.decision == "better" and result.look.interval.low > 0.0 and "points" in result.line
    assert any("no futility boundary" in note for note in result.design.notes)  # no floor


def test_without_a_floor_the_looks_read_boundaries_calibrated_to_their_joint_t_law(study, tmp_path):
    folder, _ = study
    design = tmp_path / "design.json"
    for n_seeds in range(2, 7):
        result = gv.sequential(seed_files(folder, range(n_seeds)), design=design, baseline_arm="baseline",
                               variant_arm="gatedv", **({"max_seeds": 6, "sesoi": 0.005} if n_seeds == 2 else {}))
        if result.stop:
            break
    recorded = load_design(design)
    assert recorded.fractions == tuple(gst.effective_fractions(range(2, 7), 0.025, "obf"))
    counts = [taken.n_pairs for taken in recorded.looks]
    assert len(counts) >= 3 and recorded.looks[-1].stop
    spent = [gs.spending(recorded.fractions[n - 2], 0.025, "obf") for n in counts]
    critical = [gs.t_critical(bound, n - 1.0) for bound, n in zip(gst.joint_t_bounds(counts, spent), counts)]
    for taken, expected in zip(recorded.looks, critical):
        assert taken.df == taken.n_pairs - 1.0 and taken.alpha_spent == spent[taken.index - 1]
        assert taken.critical == pytest.approx(expected, rel=1e-9)
        assert taken.interval.high - taken.estimate == pytest.approx(expected * taken.se, rel=1e-9)



def test_a_design_file_from_before_the_joint_t_reading_keeps_the_marginal_reading_it_started_with(study, tmp_path):
    folder, _ = study
    design = tmp_path / "design.json"
    gv.sequential(seed_files(folder, range(2)), design=design, baseline_arm="baseline", variant_arm="gatedv",
                  max_seeds=6, sesoi=0.005)
    content = json.loads(design.read_text())
    assert content["design"].pop("t_boundaries") == "joint"  # as a file written before the field existed
    write_design_file(design, content["design"], content["looks"])
    earlier = load_design(design)
    assert earlier.t_boundaries == "marginal" and earlier.sha256 == canonical_sha256(content["design"])
    taken = look(earlier, gv.pair(seed_files(folder, range(3)), baseline_arm="baseline", variant_arm="gatedv"))
    fractions = [earlier.fractions[n - 2] for n in (2, 3)]
    efficacy, _ = gs.efficacy_bounds(fractions, 0.025, "obf")  # the recursion's z boundaries, read marginally
    assert taken.df != taken.n_pairs - 1.0
    assert taken.critical == pytest.approx(gs.t_critical(float(efficacy[-1]), taken.df), rel=1e-12)


# --- gatedv decide ---


def test_decide_exits_10_to_continue_and_0_to_stop(study, tmp_path):
    folder, floor = study
    design = tmp_path / "design.json"
    codes = []
    for n_seeds in range(1, 7):
        args = ["decide", "--baseline", *seed_files(folder, range(n_seeds))[:n_seeds], "--variant",
                *seed_files(folder, range(n_seeds))[n_seeds:], "--design", design]
        if n_seeds == 1:
            args += ["--max-seeds", "6", "--sesoi", "0.005", "--noise-floor", floor]
        result = invoke(*args)
        codes.append(result.exit_code)
        first_line = result.stdout.splitlines()[0]
        assert LINE.match(first_line), result.output
        if result.exit_code == 0:
            assert first_line.startswith("stop: better (")
            break
        assert result.exit_code == 10 and first_line == f"continue: train seed pair {n_seeds + 1}"
    assert codes[-1] == 0 and set(codes[:-1]) <= {10}
    payload = json.loads(invoke("decide", *seed_files(folder, range(len(codes))), "--baseline-arm", "baseline",
                                "--variant-arm", "gatedv", "--design", design, "--json").stdout)
    assert payload["already_recorded"] and payload["stop"] and payload["decision"] == "better"
    changed = invoke("decide", *seed_files(folder, range(len(codes))), "--baseline-arm", "baseline",
                     "--variant-arm", "gatedv", "--design", design, "--max-seeds", "8")
    assert_input_error(changed, "error: --max-seeds: ", "fixes max_seeds 6", "a design cannot change")
    assert "decide" in invoke("--help").stdout
