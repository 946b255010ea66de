"""Entering candidates in a research ledger, each inside one write transaction of its file (`io.ledgerfile`) in which
the whole history is replayed and checked: a fixed-sample comparison (`add_entry`), a sequential candidate started at
the level the ledger gives it (`start_sequential`) and a stopped sequential design's candidate (`enter_design`).

The tests of the stream, in the order they started (`stats.online_fdr`): an entry without a start is a test that
starts and finishes at its own row; a start row starts a test that its entry, naming the start, finishes. A test's
level is fixed at its start from the tests finished by then. The value each test brings is its one-sided p-value,
or for e-LOND its e-value (`stats.e_values`) at the smallest effect of interest the ledger was created with.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from gatedv_stats.analysis.comparison import Comparison
from gatedv_stats.analysis.ledger import LedgerEntry, LedgerSettings, checked_procedure, read_history
from gatedv_stats.analysis.sequential_design import Look, SequentialDesign
from gatedv_stats.core.errors import InputError
from gatedv_stats.core.files import canonical_sha256, file_sha256
from gatedv_stats.io.designfiles import read_run_design
from gatedv_stats.io.ledgerfile import LedgerWriter, ledger_settings, ledger_writer
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.stats.e_values import likelihood_ratio_e_value
from gatedv_stats.stats.intervals import finite_or_none, log_interval_as_change
from gatedv_stats.stats.online_fdr import OnlineDecision, OnlineProcedure, online_decisions
from gatedv_stats.stats.scale import Scale
from gatedv_stats.stats.verdict import one_sided_p


def add_entry(path: str | os.PathLike[str], comparison: Comparison, paired: Paired,
              settings: LedgerSettings = LedgerSettings(), *, noise_floor: str | None = None,
              noise_floor_sha256: str | None = None, note: str | None = None) -> LedgerEntry:
    """Record one fixed-sample comparison in the ledger at `path` (created with `settings` when new): its one-sided
    p is tested at the level the procedure gives the next test. Runs that a sequential sweep decided are refused
    (their design's stage-wise p is what the ledger takes: `enter_design`)."""
    _refuse_sequential_runs(paired)
    fit = comparison.seed_document
    if fit is None:
        raise InputError(f"{paired.variant_arm} against {paired.baseline_arm}: no test over training seeds (one seed "
                         "pair without a noise floor, or no spread between the arms), so nothing to enter in the "
                         "ledger; give more seed pairs or the setup's noise floor")
    content = {**_pair_content(paired), "estimate": fit.estimate, "low": fit.confidence_interval.low,
               "high": fit.confidence_interval.high, "confidence_level": fit.confidence_level, "se": fit.se,
               "df": fit.df, "p_value": one_sided_p(fit.estimate, fit.se, fit.df, paired.scale.higher_is_better),
               "verdict": comparison.verdict_text, "p_source": "fixed-sample", "noise_floor": noise_floor,
               "noise_floor_sha256": noise_floor_sha256, "note": note}

    def entry(writer: LedgerWriter, stream: _Stream) -> dict:
        _refuse_twice(writer, content)
        e_value = e_value_at(writer.settings.get("sesoi"), fit.estimate, fit.se ** 2, paired.scale)
        return stream.decided(content, e_value, None)

    return _write(path, settings, entry)


def start_sequential(path: str | os.PathLike[str], paired: Paired, settings: LedgerSettings,
                     make_design: Callable[[float, dict], SequentialDesign], *,
                     note: str | None = None) -> tuple[SequentialDesign, LedgerEntry]:
    """Start a sequential candidate at its first look: the level the ledger gives the next test is fixed, the
    design is made at it (`make_design(level, ledger)`, which also writes the design file, inside the ledger's
    transaction) and the start is recorded with the design's hash."""
    made: list[SequentialDesign] = []

    def start(writer: LedgerWriter, stream: _Stream) -> dict:
        content = {**_pair_content(paired), "kind": "start", "note": note}
        _refuse_twice(writer, content)
        opened = stream.opened()
        link = {"path": os.path.abspath(writer.where), "genesis": canonical_sha256(writer.settings),
                "step": len(writer.entries) + 1, "level": opened.level, "alpha": stream.procedure.alpha,
                "procedure": stream.procedure.procedure, "sesoi": writer.settings.get("sesoi")}
        design = make_design(opened.level, link)
        made.append(design)
        return {**content, "design": design.path, "design_sha256": design.sha256, "level": opened.level,
                "decision": "running", "wealth": opened.wealth}

    entry = _write(path, settings, start)
    return made[0], entry


def enter_design(path: str | os.PathLike[str], design: SequentialDesign, paired: Paired,
                 settings: LedgerSettings = LedgerSettings(), *, note: str | None = None) -> LedgerEntry:
    """Enter a stopped sequential design's candidate: its stage-wise p (or, for e-LOND, its e-process at the stop),
    the median-unbiased estimate and the repeated interval. A design started in this ledger finishes its start, at
    the level fixed then; any other is a new test. `paired` must hold the files of the design's stopping look."""
    look = _stopping_look(design, paired)
    link = design.ledger
    content = {**_pair_content(paired), "low": look.interval.low, "high": look.interval.high,
               "estimate": look.estimate if look.median_unbiased is None else look.median_unbiased,
               "confidence_level": 1.0 - design.alpha, "se": look.se, "df": look.df,
               "p_value": look.p_value, "verdict": look.decision,
               "p_source": "stage-wise" if look.p_value is not None else "e-process", "design": design.path,
               "design_sha256": design.sha256, "n_pairs": look.n_pairs, "note": note,
               "noise_floor": None if design.floor is None else design.floor.get("path"),
               "noise_floor_sha256": None if design.floor is None else design.floor.get("sha256")}
    information = design.information[look.n_pairs - design.first_look]

    def entry(writer: LedgerWriter, stream: _Stream) -> dict:
        start = None
        if link is not None:
            if link["genesis"] != canonical_sha256(writer.settings):
                raise InputError(f"{design.path or 'the design'} was started in the ledger {link['path']} (step "
                                 f"{link['step']}), not in {writer.where}: enter it there")
            start = _open_start(writer, link["step"], design)
        else:
            _refuse_twice(writer, content)
        # the e-process at the stop
        e_value = e_value_at(writer.settings.get("sesoi"), look.estimate, 1.0 / information, design.scale)
        return stream.decided(content, e_value, start)

    return _write(path, settings, entry)


def next_ledger_level(path: str | os.PathLike[str], settings: LedgerSettings = LedgerSettings()) -> tuple[float, str]:
    """The level the ledger at `path` would give a candidate starting now (a new ledger's first, by `settings`), and
    the procedure's description with the step, for a plan made at it."""
    if ledger_settings(path) is None:
        chosen = settings.requested()
        return _Stream(chosen, (), (), ()).opened().level, f"{chosen.describe()}, step 1 of a new ledger"
    history = read_history(path, procedure=settings.procedure, alpha=settings.alpha)
    rows = [entry.row for entry in history.entries]
    return (_Stream.replayed(history.path, rows, history.procedure).opened().level,
            f"{history.procedure.describe()}, step {len(rows) + 1}")


def withdraw_design(design: SequentialDesign, reason: str) -> LedgerEntry:
    """Finish the start of a design that cannot stop (a run diverged): p = 1 (e = 0), a discard, with `reason`."""
    link = design.ledger
    assert link is not None  # only a design started in a ledger has a start to finish
    content: dict = {
        "candidate": design.variant_arm, "reference": design.baseline_arm, "task": design.task, "unit": design.unit,
        "scale": asdict(design.scale), "n_pairs": design.looks[-1].n_pairs if design.looks else 0,
        "candidate_files": [], "reference_files": [], "p_value": 1.0, "verdict": "withdrawn", "p_source": "withdrawn",
        "design": design.path, "design_sha256": design.sha256, "note": reason}

    def entry(writer: LedgerWriter, stream: _Stream) -> dict:
        start = _open_start(writer, link["step"], design)
        return stream.decided(content, 0.0 if stream.procedure.e_values else None, start)

    return _write(link["path"], LedgerSettings(), entry)


# --- the stream of tests ---


@dataclass(frozen=True)
class _Stream:
    """The ledger's tests in start order, replayed over its history (recorded levels and decisions checked)."""

    procedure: OnlineProcedure
    values: tuple[float | None, ...]  # each test's p-value (e-value), None while it runs
    running: tuple[frozenset[int], ...]  # the earlier tests still running at each one's start
    starts: tuple[int, ...]  # the step of the row that started each test

    @classmethod
    def replayed(cls, where: str, rows: Sequence[dict], procedure: OnlineProcedure) -> _Stream:
        tests: list[list] = []  # [start step, finish step or None, value or None] per test
        for row in rows:
            if row.get("kind") == "start":
                tests.append([row["step"], None, None])
            elif row.get("start_step") is not None:
                test = next(test for test in tests if test[0] == row["start_step"])
                test[1], test[2] = row["step"], _value_of(row, procedure)
            else:
                tests.append([row["step"], row["step"], _value_of(row, procedure)])
        running = tuple(frozenset(u for u in range(t) if tests[u][1] is None or tests[u][1] > tests[t][0])
                        for t in range(len(tests)))
        stream = cls(procedure, tuple(test[2] for test in tests), running, tuple(test[0] for test in tests))
        by_step = {row["step"]: row for row in rows}
        for test, decision in zip(tests, online_decisions(stream.values, procedure, running)):
            started, finished = by_step[test[0]], by_step.get(test[1])
            if not math.isclose(started["level"], decision.level, rel_tol=1e-9, abs_tol=1e-15) or (
                    finished is not None and finished["decision"] != ("keep" if decision.keep else "discard")):
                raise InputError(f"{where}: entry {(finished or started)['step']}'s recorded level or decision "
                                 f"differs from {procedure.describe()} replayed over the history (written by another "
                                 "version of the procedure?)")
        return stream

    def opened(self, value: float | None = None) -> OnlineDecision:
        """The decision on a test that starts now (with its `value`, or running): its level, the wealth after it."""
        pending = frozenset(t for t, earlier in enumerate(self.values) if earlier is None)
        return online_decisions([*self.values, value], self.procedure, [*self.running, pending])[-1]

    def decided(self, content: dict, e_value: float | None, start: int | None) -> dict:
        """The entry's row: a new test that starts and finishes now, or the test started at step `start`."""
        value = e_value if self.procedure.e_values else content["p_value"]
        if start is None:
            decision = self.opened(value)
        else:
            t = self.starts.index(start)
            decision = online_decisions([*self.values[:t], value, *self.values[t + 1:]], self.procedure,
                                        self.running)[t]
        return {**content, "e_value": e_value, "start_step": start, "level": decision.level,
                "decision": "keep" if decision.keep else "discard", "wealth": decision.wealth, "kind": None}


def _write(path: str | os.PathLike[str], settings: LedgerSettings,
           build: Callable[[LedgerWriter, _Stream], dict]) -> LedgerEntry:
    """One row built inside the ledger's write transaction, from the history replayed and checked."""
    with ledger_writer(path, settings.file_settings()) as writer:
        chosen = checked_procedure(writer.where, writer.settings, settings.procedure, settings.alpha)
        row = {**build(writer, _Stream.replayed(writer.where, writer.entries, chosen)), "procedure": chosen.procedure,
               "parameters": chosen.to_dict(), "alpha": chosen.alpha}
        if row["scale"]["log_ratio"] and row.get("estimate") is not None:  # the estimate and interval as ΔP too
            change = log_interval_as_change(row["low"], row["high"])
            row.update(delta_p=math.expm1(row["estimate"]), delta_p_low=finite_or_none(change.low),
                       delta_p_high=finite_or_none(change.high))
        if row.get("estimate") is not None:  # a repeated interval that spent nothing yet is unbounded: null
            row.update(low=finite_or_none(row["low"]), high=finite_or_none(row["high"]))
        row["shared_reference"] = _shared_reference(writer.entries, row) or None
        row = writer.append(row)
    return LedgerEntry(row)


def _value_of(row: dict, procedure: OnlineProcedure) -> float:
    value = row["e_value"] if procedure.e_values else row["p_value"]
    if value is None:
        raise InputError(f"entry {row['step']} records no {'e' if procedure.e_values else 'p'}-value for "
                         f"{procedure.describe()}")
    return float(value)


def e_value_at(sesoi: float | None, estimate: float, variance: float, scale: Scale) -> float | None:
    """The e-value where a ledger tests e-values: the likelihood ratio of the (naive) estimate at the ledger's
    smallest effect of interest `sesoi`, on the entry's scale (log(1 + X) for a relative ΔP X); None without one."""
    if sesoi is None:
        return None
    return likelihood_ratio_e_value(estimate, variance, scale.effect_size(sesoi), scale.higher_is_better)


# --- what an entry holds, and what is refused ---


def _pair_content(paired: Paired) -> dict:
    """The columns one pair of arms gives: the arms, the files with their SHA-256 and the scale."""
    return {"candidate": paired.variant_arm, "reference": paired.baseline_arm, "task": paired.task,
            "unit": paired.unit, "scale": asdict(paired.scale), "n_pairs": paired.n_pairs,
            "candidate_files": source_files(paired, "variant"), "reference_files": source_files(paired, "baseline")}


def source_files(paired: Paired, side: str) -> list[dict]:
    """The files one arm was read from, each once, with its SHA-256 (None for data that came from no file)."""
    sources = [str(source) for source in paired.sources.get(side, [])]
    hashes = paired.sources.get(f"{side}_sha256") or [None] * len(sources)
    files: dict[str, str | None] = {}
    for source, recorded in zip(sources, hashes):
        path = source.rsplit("[", 1)[0] if source.endswith("]") else source  # a run of a long table
        if path not in files:
            files[path] = recorded or (file_sha256(path) if Path(path).is_file() else None)
    return [{"path": path, "sha256": sha256} for path, sha256 in files.items()]


def _hashes(files: Sequence[dict] | None) -> frozenset[str]:
    return frozenset(str(item["sha256"]) for item in files or () if item.get("sha256"))


def _shared_reference(rows: Sequence[dict], row: dict) -> list[int]:
    """The earlier rows whose reference shares a run (a file's SHA-256) with this one's; a sequential candidate's
    entry and its own start count once."""
    ours = _hashes(row["reference_files"])
    return [earlier["step"] for earlier in rows
            if earlier["step"] != row.get("start_step") and not (earlier.get("start_step") is not None
                                                                 and earlier["start_step"] == row.get("start_step"))
            and ours & _hashes(earlier["reference_files"])]


def _refuse_twice(writer: LedgerWriter, content: dict) -> None:
    """A candidate's files entered (or started) again against the same reference files: refused."""
    candidate, reference = _hashes(content["candidate_files"]), _hashes(content["reference_files"])
    if not candidate or not reference:
        return
    for row in writer.entries:
        if _hashes(row["candidate_files"]) == candidate and _hashes(row["reference_files"]) == reference:
            done = "started" if row.get("kind") == "start" else "entered"
            raise InputError(f"{writer.where}: step {row['step']} already {done} these {content['candidate']} files "
                             f"against these {content['reference']} files (the same SHA-256); a candidate is tested "
                             "once against a reference")


def _refuse_sequential_runs(paired: Paired) -> None:
    for item in source_files(paired, "variant"):
        recorded = read_run_design(item["path"]) if Path(item["path"]).is_file() else None
        if recorded is not None:
            raise InputError(f"{item['path']}: its runs were decided sequentially by {recorded['design']} (gatedv "
                             "sweep --until-decided): enter them with --design DESIGN, whose stage-wise p-value is "
                             "valid after the design's early stop (a fixed-sample p is not)")


def _stopping_look(design: SequentialDesign, paired: Paired) -> Look:
    """The design's last look, which stopped, taken on exactly the files of `paired` (else refused naming one)."""
    where = design.path or "the design"
    if not design.looks or not design.looks[-1].stop:
        taken = design.looks[-1].line if design.looks else "no look taken"
        raise InputError(f"{where}: the design has not stopped ({taken}); a candidate enters the ledger at its stop")
    look = design.looks[-1]
    recorded = {str(item["sha256"]): item["source"] for item in look.inputs if item.get("sha256")}
    given = {item["sha256"]: item["path"] for side in ("baseline", "variant")
             for item in source_files(paired, side) if item["sha256"]}
    for sha256, path in given.items():
        if sha256 not in recorded:
            raise InputError(f"{path}: not among the files {where}'s stopping look (look {look.index}, "
                             f"{look.n_pairs} seed pairs) was taken on")
    for sha256, source in recorded.items():
        if sha256 not in given:
            raise InputError(f"{source}: {where}'s stopping look (look {look.index}) was taken on it, and it is not "
                             "among the files given")
    return look


def _open_start(writer: LedgerWriter, step: int, design: SequentialDesign) -> int:
    """The start at `step` of this design, not finished yet."""
    start = next((row for row in writer.entries if row["step"] == step), None)
    if start is None or start.get("kind") != "start" or start["design_sha256"] != design.sha256:
        raise InputError(f"{writer.where}: step {step} is not the start of {design.path or 'the design'} "
                         f"({design.sha256[:12]}); the design names a start its ledger does not hold")
    for row in writer.entries:
        if row.get("start_step") == step:
            raise InputError(f"{writer.where}: {design.path or 'the design'} was already entered at step "
                             f"{row['step']} (started at step {step}); a candidate is tested once")
    return step
