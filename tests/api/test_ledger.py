"""`gv.Ledger`: candidates entered in order through `gv.compare`, kept or discarded by the ledger's online procedure,
the procedure and α fixed at creation, concurrent writers serialised, item scores and a noise floor, and the report's
section."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import gatedv_stats as gv
from gatedv_stats.analysis.ledger import read_history
from gatedv_stats.analysis.ledger_entries import add_entry
from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.core.files import file_sha256
from gatedv_stats.io.itemfiles import write_item_file
from gatedv_stats.io.lossfiles import write_loss_file
from gatedv_stats.stats.online_fdr import online_decisions, online_procedure
from gatedv_stats.testing import synthetic_runs
from item_runs import item_run

# the reference, a clearly better candidate, a neutral one and a worse one, 3 seeds each
ARMS = {"baseline": [30.0, 30.5, 29.8], "good": [29.1, 29.6, 28.9], "same": [30.02, 30.45, 29.83],
        "bad": [31.0, 31.4, 30.9]}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """The runs' loss files, written once for the module: its tests only read them."""
    folder = tmp_path_factory.mktemp("runs")
    for run in synthetic_runs(ARMS, n_docs=40, rng_seed=2, noise=0.01):
        write_loss_file(folder / f"{run.arm}-{run.seed}.parquet", run.docs, {**run.meta, "eval_set": "heldout"})
    return folder


def files(study, arm):
    return sorted(study.glob(f"{arm}-*.parquet"))


def test_candidates_are_entered_in_order_with_their_files_and_the_running_best(study, tmp_path):
    ledger = gv.Ledger(tmp_path / "study.ledger", procedure="addis")
    first = ledger.add(files(study, "good"), against=files(study, "baseline"), note="wider gate")
    assert (first.step, first.decision, first.candidate, first.reference) == (1, "keep", "good", "baseline")
    assert first.candidate_files == [{"path": str(path), "sha256": file_sha256(path)} for path in files(study, "good")]
    assert first.p_value < first.level and first.delta_p < 0 and first.low < first.estimate < first.high
    ledger.add(files(study, "bad"), against=files(study, "good"))
    ledger.add(files(study, "same"), against=files(study, "good"))
    frame = ledger.to_frame()
    assert frame[["step", "candidate", "against", "decision", "best"]].values.tolist() == [
        [1, "good", "baseline", "keep", "good"], [2, "bad", "good", "discard", "good"],
        [3, "same", "good", "discard", "good"]]
    assert frame["p_value"].iloc[1] > 0.99  # a worse candidate: discarded by ADDIS at no cost in wealth
    assert frame["wealth"].iloc[1] == frame["wealth"].iloc[0]
    data = ledger.to_dict()
    assert data["n_entries"] == 3 and data["head"] == ledger.entries()[-1].hash and data["running_best"] == [1, 1, 1]
    assert "wider gate" in ledger.summary() and "best" in ledger.summary().splitlines()[2]
    assert "Running best" in ledger._repr_html_() and "3 entries, 1 kept" in repr(ledger)
    history = read_history(ledger.path)
    decisions = online_decisions([entry.p_value for entry in history.entries], online_procedure("addis"))
    assert [(d.level, d.keep, d.wealth) for d in decisions] == [(e.level, e.keep, e.wealth) for e in history.entries]


def test_the_running_best_follows_the_candidates_that_beat_it():
    from gatedv_stats.analysis.ledger import LedgerEntry, LedgerHistory

    def entry(step, candidate, reference, estimate, decision):
        return LedgerEntry({"step": step, "candidate": candidate, "reference": reference, "estimate": estimate,
                            "decision": decision, "scale": {"metric": "loss", "higher_is_better": False,
                                                            "log_ratio": True, "proportion": False}})

    history = LedgerHistory("l", online_procedure(), "now", (
        entry(1, "a", "base", -0.02, "keep"), entry(2, "b", "base", -0.01, "keep"),  # same reference, less good
        entry(3, "c", "base", -0.03, "keep"), entry(4, "d", "c", -0.001, "keep"),  # beat the best itself
        entry(5, "e", "c", -0.05, "discard")))
    assert [None if best is None else best.row["candidate"] for best in history.running_best()] == [
        "a", "a", "c", "d", "d"]


def test_the_procedure_and_alpha_are_fixed_when_the_ledger_is_created(study, tmp_path):
    path = tmp_path / "study.ledger"
    early = gv.Ledger(path, procedure="lord++")  # asked before the ledger existed
    gv.Ledger(path, procedure="saffron", alpha=0.1).add(files(study, "good"), against=files(study, "baseline"))
    for procedure, alpha, parameter in (("lord++", None, "procedure"), (None, 0.05, "alpha"),
                                        ("addis", 0.1, "procedure")):
        with pytest.raises(ParameterError) as refused:
            gv.Ledger(path, procedure=procedure, alpha=alpha)
        assert refused.value.parameter == parameter
        assert "created with saffron at α = 0.1" in str(refused.value) or "created with α = 0.1" in str(refused.value)
    with pytest.raises(ParameterError, match="created with saffron at α = 0.1"):
        early.add(files(study, "same"), against=files(study, "baseline"))
    assert len(gv.Ledger(path).entries()) == 1 and gv.Ledger(path, alpha=0.1).to_dict()["procedure"]["w0"] == 0.05
    with pytest.raises(ParameterError, match="procedure: 'holm': expected one of"):
        gv.Ledger(tmp_path / "other.ledger", procedure="holm")


def test_concurrent_writers_serialise_into_one_chain(study, tmp_path):
    path = tmp_path / "study.ledger"
    results = {f"{arm} vs {reference}": gv.compare(baseline=files(study, reference), variant=files(study, arm))
               for arm, reference in (("good", "baseline"), ("same", "baseline"), ("bad", "baseline"),
                                      ("same", "good"), ("bad", "good"), ("baseline", "good"))}
    start, errors = threading.Barrier(6), []

    def write(name):
        start.wait()
        try:
            add_entry(path, results[name].comparison, results[name].paired, note=name)
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=write, args=(name,)) for name in results]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    history = read_history(path)
    assert [entry.step for entry in history.entries] == [1, 2, 3, 4, 5, 6]
    assert sorted(entry.note for entry in history.entries) == sorted(results)
    decisions = online_decisions([entry.p_value for entry in history.entries], history.procedure)
    assert [(d.level, d.keep, d.wealth) for d in decisions] == [(e.level, e.keep, e.wealth) for e in history.entries]


def test_item_scores_one_seed_pairs_and_noise_floors(study, tmp_path):
    rng = np.random.default_rng(0)
    p = rng.uniform(0.3, 0.7, 120)
    for arm, shift in (("baseline", 0.0), ("gatedv", 0.2)):
        for seed in range(3):
            run = item_run(arm, seed, (rng.random(120) < p + shift).astype(float))
            write_item_file(tmp_path / f"{arm}-{seed}.parquet", run.units,
                            {"arm": arm, "seed": seed, "task": "hellaswag", "n_shot": 0, "metrics": ["acc"]})
    ledger = gv.Ledger(tmp_path / "tasks.ledger")
    entry = ledger.add(sorted(tmp_path.glob("gatedv-*")), against=sorted(tmp_path.glob("baseline-*")), metric="acc")
    assert entry.task == "hellaswag" and entry.scale == {"metric": "acc", "higher_is_better": True,
                                                         "log_ratio": False, "proportion": True}
    assert entry.estimate > 0 and entry.delta_p is None and "points" in entry.entry.estimate_text()
    one_seed = [files(study, "good")[0]], [files(study, "baseline")[0]]
    with pytest.raises(InputError, match="no test over training seeds"):
        ledger.add(*one_seed)
    aa = synthetic_runs({"baseline": [30.0, 30.3, 29.8, 30.1, 29.9, 30.2, 30.05, 29.95]}, n_docs=40, rng_seed=2,
                        noise=0.01)
    floor = gv.noise_floor(aa, out=tmp_path / "floor.json")
    losses = gv.Ledger(tmp_path / "losses.ledger")
    entry = losses.add(*one_seed, noise_floor=tmp_path / "floor.json")
    assert entry.n_pairs == 1 and entry.noise_floor == str(tmp_path / "floor.json")
    assert entry.noise_floor_sha256 == file_sha256(tmp_path / "floor.json")
    in_memory = gv.Ledger(tmp_path / "memory.ledger")
    assert in_memory.add(*one_seed, noise_floor=floor).noise_floor_sha256 == file_sha256(tmp_path / "floor.json")


def test_a_suite_of_tasks_is_not_one_entry(tmp_path):
    from item_runs import write_tasks

    folder = write_tasks(tmp_path / "tasks")
    with pytest.raises(ParameterError, match="candidate: the item scores hold several tasks"):
        gv.Ledger(tmp_path / "l.ledger").add(sorted(folder.glob("*_gatedv_*")), sorted(folder.glob("*_baseline_*")),
                                             metric="acc")


@pytest.mark.slow
def test_the_report_shows_the_ledger(study, tmp_path):
    ledger = gv.Ledger(tmp_path / "study.ledger", procedure="addis")
    ledger.add(files(study, "good"), against=files(study, "baseline"), note="wider gate")
    ledger.add(files(study, "bad"), against=files(study, "good"))
    path = gv.report(study, tmp_path / "report.md", ledger=ledger.path)
    text = path.read_text()
    section = text[text.index("## Research ledger"):text.index("## Provenance")]
    assert "ADDIS at FDR ≤ 0.05" in section and "winner's curse" in section and "bio-creep" in section
    assert "| 2 | bad | good |" in section and "good (step 1)" in section and "Step 1: wider gate" in section
    assert (tmp_path / "report_figures" / "ledger-wealth.svg").is_file()
    with pytest.raises(InputError, match="one of the inputs"):
        gv.report(study, ledger.path, fmt="md", ledger=ledger.path)


@pytest.mark.slow
def test_the_ledger_section_renders_in_every_format_with_a_valid_figure(study, tmp_path):
    from gatedv_stats.reporting.plots import validate_spec
    from gatedv_stats.reporting.sections.ledger import ledger_section

    ledger = gv.Ledger(tmp_path / "fwer.ledger", procedure="alpha-spending")
    ledger.add(files(study, "good"), against=files(study, "baseline"), note="50% wider & deeper_gate")
    section = ledger_section(read_history(ledger.path))
    validate_spec(section.figures[0].spec)
    assert "family-wise error rate" in section.intro[0]
    latex = gv.report(study, tmp_path / "report.tex", ledger=ledger.path).read_text()
    assert r"\section{Research ledger}" in latex or "Research ledger" in latex
    assert r"50\% wider \& deeper\_gate" in latex and "√" not in latex
    html = gv.report(study, tmp_path / "report.html", ledger=ledger.path).read_text()
    assert "Research ledger" in html and "ledger-wealth" in html
