"""Plain report data gathered from an experiment's files: one builder function per report section.

`discover_inputs` finds loss files, curve files (`curve.csv`), trainer run files (`run.json`) and cost
benchmark results (`bench*.json`); `build_report` runs every builder in `SECTION_BUILDERS` and returns a
`ReportData` of tables (already formatted as the paper prints them), figures (Vega-Lite specifications)
and text, which `gatedv_stats.report` renders through the templates. A section whose inputs are missing
is kept with `omitted` set to the one sentence saying why.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np
import pandas as pd
from tqdm import tqdm

from gatedv_stats import __version__
from gatedv_stats.report import plots
from gatedv_stats.errors import InputError
from gatedv_stats.io.fileio import file_sha256, read_json_object
from gatedv_stats.formatting import (
    format_count,
    format_delta_p,
    format_interval,
    format_nll_diff,
    format_pairs,
    format_percent,
    format_ppl,
)
from gatedv_stats.io.lossfiles import LOSS_FILE_SUFFIXES, LossRun, read_loss_inputs
from gatedv_stats.stats.metrics import (
    ArmSummary,
    delta_p,
    document_differences,
    improved_pairs,
    perplexity,
    sample_sd,
    token_nll,
)
from gatedv_stats.analysis.pair import reviewer_section

if TYPE_CHECKING:  # imported lazily at run time: scipy (resampling) loads only when a comparison is made
    from gatedv_stats.stats.comparison import Comparison
    from gatedv_stats.pairing import PairedLosses

CURVE_FILE_NAME = "curve.csv"
RUN_FILE_NAME = "run.json"
BENCH_GLOB = "bench*.json"
GATEDV = "gatedv"
DEFAULT_REFERENCE = "baseline"
EVAL_SET_ORDER = {"heldout": 0, "dev": 1}
EVAL_SET_NAMES = {"heldout": "held-out set", "dev": "development set", None: "unnamed evaluation set"}
NATIVE_VALUE_ACT = {"baseline": "linear", "gatedv": "silu"}


# --- the plain data the templates render ---------------------------------------------------------------

@dataclass(frozen=True)
class Cell:
    """One table cell: formatted text, shown bold (a selected rate) or monospaced (a hash)."""

    text: str
    bold: bool = False
    mono: bool = False


@dataclass(frozen=True)
class RowGroup:
    """Rows under an optional group label (e.g. "development set; LR = 0.0048")."""

    label: str | None
    rows: tuple[tuple[Cell, ...], ...]


@dataclass(frozen=True)
class Table:
    """A paper table: caption, column headers, alignment, grouped rows and notes below it."""

    key: str  # [a-z0-9-]: an HTML id and a LaTeX label
    caption: str
    columns: tuple[str, ...]
    align: str  # one letter per column, "l" or "r"
    groups: tuple[RowGroup, ...]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Figure:
    """An Altair figure as its Vega-Lite specification, with the caption shown under it."""

    key: str
    title: str
    caption: str
    spec: dict  # Vega-Lite, data inlined


@dataclass(frozen=True)
class Block:
    """Preformatted text (JSON configurations) shown verbatim."""

    title: str
    text: str


@dataclass(frozen=True)
class Section:
    """One report section; `omitted` holds the sentence saying why the inputs cannot fill it."""

    key: str
    title: str
    intro: tuple[str, ...] = ()
    tables: tuple[Table, ...] = ()
    figures: tuple[Figure, ...] = ()
    blocks: tuple[Block, ...] = ()
    omitted: str | None = None  # why the inputs cannot fill this section


@dataclass(frozen=True)
class ReportData:
    """Everything a template renders."""

    title: str
    subtitle: str
    version: str
    reference: str | None
    sections: tuple[Section, ...]

    @property
    def figure_count(self) -> int:
        return sum(len(section.figures) for section in self.sections)

    @property
    def figures(self) -> list[Figure]:
        return [figure for section in self.sections for figure in section.figures]


def row(*cells: str | Cell) -> tuple[Cell, ...]:
    """A table row from texts and cells."""
    return tuple(cell if isinstance(cell, Cell) else Cell(cell) for cell in cells)


def omitted(key: str, title: str, why: str) -> Section:
    """A section the inputs cannot fill, with the sentence saying why."""
    return Section(key=key, title=title, omitted=why)


# --- inputs ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class InputFile:
    """One file read for the report, for the provenance section."""

    path: str
    kind: str  # "loss file", "curve file", "run file", "bench results"
    sha256: str


@dataclass(frozen=True)
class ExperimentInputs:
    """What `discover_inputs` found: loss runs, curves, trainer run records, bench results, and the files."""

    runs: tuple[LossRun, ...]
    curves: pd.DataFrame  # arm, seed, lr, step, dev_nll
    run_infos: tuple[dict, ...]  # run.json contents
    bench: tuple[dict, ...]  # bench results, each with "source"
    files: tuple[InputFile, ...]


@dataclass(frozen=True)
class ReportSettings:
    """The user's choices: reference arm (None: "baseline" when present), bootstrap B and RNG seed."""

    reference: str | None
    samples: int
    seed: int


def discover_inputs(inputs: list[Path]) -> ExperimentInputs:
    """Read every loss file, curve file, run.json and bench*.json given or found under the given directories."""
    loss_paths: list[Path] = []
    curve_paths: list[Path] = []
    run_paths: list[Path] = []
    bench_paths: list[Path] = []
    for given in map(Path, inputs):
        if given.is_dir():
            loss_paths.append(given)
            curve_paths += sorted(given.rglob(CURVE_FILE_NAME))
            run_paths += sorted(given.rglob(RUN_FILE_NAME))
            bench_paths += sorted(given.rglob(BENCH_GLOB))
        elif not given.exists():
            raise InputError(f"{given}: no such file or directory")
        elif given.name == CURVE_FILE_NAME:
            curve_paths.append(given)
        elif given.name == RUN_FILE_NAME:
            run_paths.append(given)
        elif given.match(BENCH_GLOB):
            bench_paths.append(given)
        elif given.suffix in LOSS_FILE_SUFFIXES:
            loss_paths.append(given)
        else:
            raise InputError(f"{given}: not a loss file (.parquet / .csv), {CURVE_FILE_NAME}, {RUN_FILE_NAME} "
                             f"or {BENCH_GLOB}")
    # A file named twice (itself and through its directory) counts once.
    runs = list({run.source: run for run in read_loss_inputs(loss_paths)}.values()) if loss_paths else []
    if not runs:
        raise InputError("no loss files among the inputs: a report needs at least one evaluated run")
    files = {run.source.split("[", 1)[0]: InputFile(run.source.split("[", 1)[0], "loss file", run.sha256)
             for run in runs}
    for paths, kind in ((curve_paths, "curve file"), (run_paths, "run file"), (bench_paths, "bench results")):
        for path in paths:
            files[str(path)] = InputFile(str(path), kind, file_sha256(path))
    return ExperimentInputs(
        runs=tuple(runs),
        curves=_read_curves(curve_paths),
        run_infos=tuple(read_json_object(path) for path in run_paths),
        bench=tuple({**read_json_object(path), "source": str(path)} for path in bench_paths),
        files=tuple(files.values()),
    )




def _read_curves(paths: list[Path]) -> pd.DataFrame:
    from gatedv_stats.io.curvefiles import CURVE_COLUMNS, read_curve_inputs

    return read_curve_inputs(paths) if paths else pd.DataFrame(columns=list(CURVE_COLUMNS))


# --- grouping ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class EvalGroup:
    """The native-activation runs of one evaluation set at one learning rate, by arm."""

    eval_set: str | None
    lr: float | None
    arms: dict  # arm -> list[LossRun]

    @property
    def label(self) -> str:
        return f"{eval_set_name(self.eval_set)}; LR = {format_lr(self.lr)}"


def eval_set_name(eval_set: str | None) -> str:
    return EVAL_SET_NAMES.get(eval_set, f"evaluation set {eval_set}")


def format_lr(lr: float | None) -> str:
    """A learning rate as the paper prints it: 0.0048, 0.00001; "unrecorded" when absent."""
    return "unrecorded" if lr is None else np.format_float_positional(float(lr), trim="-")


def _eval_set_sort_key(eval_set: str | None) -> tuple:
    return (EVAL_SET_ORDER.get(eval_set, 2 if eval_set is not None else 3), eval_set or "")


def _lr_of(run: LossRun) -> float | None:
    lr = run.meta.get("lr")
    if lr is None:
        return None
    try:
        return float(lr)
    except (TypeError, ValueError):
        raise InputError(f"{run.source}: lr {lr!r} is not a number") from None


def native_act(arm: str, meta: dict) -> str | None:
    """The value activation the run was trained with (metadata, else the arm's canonical one)."""
    return meta.get("trained_value_act") or NATIVE_VALUE_ACT.get(arm)


def is_override(run: LossRun) -> bool:
    """True for an inference-time swap: evaluated with a value activation other than its training one."""
    act = run.meta.get("value_act")
    return act is not None and act != native_act(run.arm, run.meta)


def eval_groups(runs: tuple[LossRun, ...]) -> list[EvalGroup]:
    """Native runs grouped by evaluation set and learning rate (held-out first, then development, then others)."""
    grouped: dict = defaultdict(lambda: defaultdict(list))
    for run in runs:
        if not is_override(run):
            same = grouped[(run.eval_set, _lr_of(run))][run.arm]
            twin = next((other for other in same if other.seed == run.seed), None)
            if twin is not None:
                raise InputError(f"arm {run.arm} seed {run.seed} on eval set {run.eval_set} at LR "
                                 f"{format_lr(_lr_of(run))} appears twice: {twin.source} and {run.source}")
            same.append(run)
    keys = sorted(grouped, key=lambda key: (_eval_set_sort_key(key[0]), -1.0 if key[1] is None else key[1]))
    return [EvalGroup(eval_set, lr, dict(grouped[(eval_set, lr)])) for eval_set, lr in keys]


def mixed_eval_set(runs: list[LossRun]) -> str | None:
    """Why these runs are not one evaluation set (differing `eval_set_sha256`), else None."""
    hashes = sorted({str(run.meta["eval_set_sha256"]) for run in runs if run.meta.get("eval_set_sha256")})
    if len(hashes) > 1:
        return (f"the loss files named {runs[0].eval_set!r} carry {len(hashes)} different eval_set_sha256 values "
                f"({', '.join(h[:12] for h in hashes)}), so they are not one evaluation set")
    return None


def run_summary(arm: str, runs: list[LossRun]) -> ArmSummary:
    """P̄ and SD over the seeds of one arm, each run's NLL token-averaged over its own documents."""
    ordered = sorted(runs, key=lambda run: run.seed)
    nll = np.array([token_nll(run.docs["loss_sum"].to_numpy(), run.docs["n_targets"].to_numpy()) for run in ordered])
    ppl = perplexity(nll)
    return ArmSummary(arm=arm, seeds=np.array([run.seed for run in ordered], dtype=np.int64), nll=nll, ppl=ppl,
                      ppl_mean=float(ppl.mean()), ppl_sd=sample_sd(ppl))


@dataclass(frozen=True)
class PairedDelta:
    """ΔP of a variant against a reference arm, with the improved pairs over their shared seeds."""

    delta_p: float
    improved: int
    n_pairs: int


def paired_delta(reference: ArmSummary, variant: ArmSummary) -> PairedDelta:
    shared = np.intersect1d(reference.seeds, variant.seeds)
    ref_ppl = reference.ppl[np.isin(reference.seeds, shared)]
    var_ppl = variant.ppl[np.isin(variant.seeds, shared)]
    return PairedDelta(delta_p(reference.ppl_mean, variant.ppl_mean), improved_pairs(ref_ppl, var_ppl), len(shared))


def ppl_text(summary: ArmSummary) -> str:
    return format_ppl(summary.ppl_mean, summary.ppl_sd if summary.n_seeds > 1 else None)


def choose_reference(arms: set[str], requested: str | None) -> str | None:
    """The reference arm: the requested one (an error if absent), else "baseline" when present."""
    if requested is not None:
        if requested not in arms:
            raise InputError(f"--reference {requested}: no loss file has this arm (arms: {', '.join(sorted(arms))})")
        return requested
    return DEFAULT_REFERENCE if DEFAULT_REFERENCE in arms else None


def other_arms(arms, reference: str) -> list[str]:
    """Non-reference arms in a stable order: gatedv first, then alphabetical."""
    return sorted((arm for arm in arms if arm != reference), key=lambda arm: (arm != GATEDV, arm))


# --- the report context shared by the section builders ---------------------------------------------------

@dataclass
class ReportContext:
    """What every section builder receives; arm summaries and comparisons are cached here for later sections."""

    inputs: ExperimentInputs
    settings: ReportSettings
    reference: str | None
    groups: list[EvalGroup]
    summaries: dict = field(default_factory=dict)  # (eval_set, lr, arm) -> ArmSummary
    comparisons: dict = field(default_factory=dict)  # (eval_set, lr, variant) -> Comparison

    def summary(self, group: EvalGroup, arm: str) -> ArmSummary:
        key = (group.eval_set, group.lr, arm)
        if key not in self.summaries:
            self.summaries[key] = run_summary(arm, group.arms[arm])
        return self.summaries[key]


def make_context(inputs: ExperimentInputs, settings: ReportSettings) -> ReportContext:
    arms = {run.arm for run in inputs.runs}
    return ReportContext(inputs=inputs, settings=settings, reference=choose_reference(arms, settings.reference),
                         groups=eval_groups(inputs.runs))


# --- sections ----------------------------------------------------------------------------------------------

_SETUP_COLUMNS = (  # header, alignment, text of one arm's collected values
    ("Arm", "l"), ("Size", "l"), ("Layers / width", "l"), ("Heads / head width", "l"), ("FFN hidden width", "r"),
    ("Vocabulary", "r"), ("Parameters", "r"), ("Updates", "r"), ("Warmup", "r"), ("Batch", "r"),
    ("Target exposures", "r"), ("Peak LR", "l"), ("Seeds", "l"),
)


def setup_section(ctx: ReportContext) -> Section:
    """Table 1 analogue: per arm its sizes, parameters, training budget, learning rates and seeds."""
    by_arm: dict = defaultdict(lambda: defaultdict(set))
    configs: dict = {}
    for info in ctx.inputs.run_infos:  # trainer run directories: the training record
        arm = info.get("variant") or info.get("arm")
        if arm is None:
            continue
        config = info.get("model_config") or info.get("config") or {}
        configs.setdefault(arm, config)
        entry = by_arm[arm]
        for key in ("size", "lr", "seed", "updates", "warmup", "parameters"):
            _add(entry[key], info.get(key))
        batch = info.get("batch_size")
        _add(entry["batch"], batch)
        if batch and info.get("updates") and config.get("seq_len"):
            entry["exposures"].add(int(info["updates"]) * int(batch) * int(config["seq_len"]))
    for run in ctx.inputs.runs:  # loss files: what was evaluated
        if run.meta.get("config"):
            configs.setdefault(run.arm, run.meta["config"])
        entry = by_arm[run.arm]
        _add(entry["lr"], _lr_of(run))
        entry["seed"].add(run.seed)
        _add(entry["updates"], run.meta.get("step"))
    rows = []
    for arm in sorted(by_arm, key=lambda arm: (arm != ctx.reference, arm != GATEDV, arm)):
        entry, config = by_arm[arm], configs.get(arm) or {}
        rows.append(row(
            arm,
            _joined(entry["size"], str),
            _config_pair(config, "n_layers", "d_model"),
            _config_pair(config, "n_heads", "head_dim"),
            _config_text(config, "d_ff"),
            _config_text(config, "vocab_size"),
            _joined(entry["parameters"], format_count),
            _joined(entry["updates"], format_count),
            _joined(entry["warmup"], format_count),
            _joined(entry["batch"], format_count),
            _joined(entry["exposures"], format_count),
            _joined(entry["lr"], format_lr),
            _seed_text(entry["seed"]),
        ))
    # Columns that no input records are left out rather than shown as a column of dashes.
    keep = [i for i in range(len(_SETUP_COLUMNS)) if i == 0 or any(cells[i].text != "—" for cells in rows)]
    table = Table("setup", "Setup: models, training budget, learning rates and seeds per arm.",
                  tuple(_SETUP_COLUMNS[i][0] for i in keep), "".join(_SETUP_COLUMNS[i][1] for i in keep),
                  (RowGroup(None, tuple(tuple(cells[i] for i in keep) for cells in rows)),),
                  ("Sizes, parameters and the training budget come from run.json files or the loss files' config "
                   "metadata; updates also from the evaluated checkpoints' step; target exposures = updates × batch × "
                   "context; '—' marks what the inputs do not record.",))
    return Section("setup", "Setup", tables=(table,))


def _add(values: set, value) -> None:
    if value is not None:
        values.add(value)


def _config_text(config: dict, key: str) -> str:
    value = config.get(key)
    if key == "head_dim" and value is None and config.get("d_model") and config.get("n_heads"):
        value = config["d_model"] // config["n_heads"]
    if value is None:
        return "—"
    return format_count(value) if isinstance(value, (int, float)) else str(value)


def _config_pair(config: dict, first: str, second: str) -> str:
    left, right = _config_text(config, first), _config_text(config, second)
    return "—" if left == right == "—" else f"{left} / {right}"


def _joined(values: set, fmt: Callable) -> str:
    return ", ".join(fmt(value) for value in sorted(values)) if values else "—"


def _seed_text(seeds: set) -> str:
    ordered = sorted(int(seed) for seed in seeds)
    if len(ordered) > 2 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{len(ordered)} ({ordered[0]}–{ordered[-1]})"
    return f"{len(ordered)} ({', '.join(map(str, ordered))})"


def lr_selection_section(ctx: ReportContext) -> Section:
    """Table 2: final development PPL per arm × learning rate on the selection seed, the selected rate in bold."""
    key, title = "lr-selection", "Learning-rate selection"
    from gatedv_stats.stats.lr_selection import select_lr

    dev_runs = [run for group in ctx.groups if group.eval_set == "dev" and group.lr is not None
                for runs in group.arms.values() for run in runs]
    table = pd.DataFrame([{"arm": run.arm, "lr": _lr_of(run), "seed": run.seed,
                           "dev_nll": float(token_nll(run.docs["loss_sum"].to_numpy(), run.docs["n_targets"].to_numpy()))}
                          for run in dev_runs], columns=["arm", "lr", "seed", "dev_nll"])
    source = "final development-set loss files"
    if not _several_rates(table):
        table, source = ctx.inputs.curves, "the last point of each development curve"
    if not _several_rates(table):
        return omitted(key, title, "No arm has development-set loss files (eval_set = dev) or curves at two or more "
                                   "learning rates, so there is no learning-rate selection to show.")
    try:
        selection = select_lr(table)
    except InputError as error:
        return omitted(key, title, f"The learning-rate grid cannot be read: {error}.")
    lrs = list(selection.ppl.columns)
    parameters = _parameters_by_arm(ctx)  # Table 7 shows each variant's size beside its grid
    rows = []
    for arm in sorted(selection.ppl.index, key=lambda arm: (arm != ctx.reference, arm != GATEDV, arm)):
        cells = selection.ppl.loc[arm]
        several = int(cells.notna().sum()) > 1  # a rate is only "selected" out of two or more
        size = [f"{parameters[arm] / 1e6:.3f}" if arm in parameters else "—"] if parameters else []
        rows.append(row(arm, *size, *(Cell("—") if math.isnan(cells[lr]) else
                                      Cell(format_ppl(cells[lr]), bold=several and lr == selection.selected[arm])
                                      for lr in lrs)))
    size_column = ("Parameters (M)",) if parameters else ()
    table = Table("lr-selection",
                  f"Final development PPL by peak learning rate on selection seed {selection.selection_seed} "
                  f"(from {source}); the rate each arm selects from two or more in bold.",
                  ("Variant", *size_column, *(f"LR {format_lr(lr)}" for lr in lrs)),
                  "l" + "r" * (len(size_column) + len(lrs)),
                  (RowGroup(None, tuple(rows)),),
                  ("Each arm selects the rate with the lowest final development NLL on the selection seed; ties "
                   "favour the lower rate.",))
    return Section(key, title, tables=(table,))


def _parameters_by_arm(ctx: ReportContext) -> dict[str, int]:
    """Trainable parameters per arm from the run.json files that record them."""
    return {info.get("variant") or info.get("arm"): int(info["parameters"]) for info in ctx.inputs.run_infos
            if info.get("parameters") is not None and (info.get("variant") or info.get("arm"))}


def _several_rates(table: pd.DataFrame) -> bool:
    return bool(len(table)) and bool((table.groupby("arm")["lr"].nunique() > 1).any())


def comparison_section(ctx: ReportContext) -> Section:
    """Table 3: each variant against the reference per evaluation set and learning rate, with D, its bootstrap
    interval and the document win rate; figures of per-document differences and per-seed PPL."""
    key, title = "comparison", "Paired comparison"
    if ctx.reference is None:
        return omitted(key, title, "No reference arm: no loss file has arm 'baseline'; choose one with --reference.")
    from gatedv_stats.stats.comparison import compare
    from gatedv_stats.pairing import pair_runs

    tables, figures, notes = [], [], []
    for eval_set in dict.fromkeys(group.eval_set for group in ctx.groups):
        groups = [group for group in ctx.groups if group.eval_set == eval_set and ctx.reference in group.arms
                  and len(group.arms) > 1]
        row_groups, diffs, per_seed = [], [], []
        for group in groups:
            reason = mixed_eval_set([run for runs in group.arms.values() for run in runs])
            if reason:
                notes.append(f"{group.label}: left out because {reason}.")
                continue
            rows = []
            for variant in other_arms(group.arms, ctx.reference):
                label = f"{variant} vs {ctx.reference}, LR {format_lr(group.lr)}"
                try:
                    paired = pair_runs(group.arms[ctx.reference], group.arms[variant])
                except InputError as error:
                    notes.append(f"{eval_set_name(eval_set)}, {label}: left out because {error}.")
                    continue
                result = compare(paired, samples=ctx.settings.samples, seed=ctx.settings.seed)
                ctx.comparisons[(eval_set, group.lr, variant)] = result
                rows.append(_comparison_row(variant, result))
                diffs.append(pd.DataFrame({"comparison": label, "diff": _per_token_differences(paired)}))
                per_seed += _per_seed_rows(label, result)
            if rows:
                row_groups.append(RowGroup(group.label, tuple(rows)))
        if not row_groups:
            continue
        slug = _slug(eval_set)
        tables.append(Table(
            f"comparison-{slug}",
            f"Paired comparison on the {eval_set_name(eval_set)}: P̄ ± SD over seeds, ΔP = P̄ variant / P̄ "
            f"{ctx.reference} − 1, improved pairs, mean NLL difference D with its 95% document-bootstrap interval "
            f"(B = {ctx.settings.samples:,}, seed {ctx.settings.seed}), and documents won.",
            ("Variant", f"{ctx.reference} PPL", "Variant PPL", "ΔP", "Improved pairs", "D", "95% interval",
             "Documents won"),
            "lrrrrrrr", tuple(row_groups)))
        figures.append(Figure(
            f"doc-differences-{slug}", f"Per-document differences, {eval_set_name(eval_set)}",
            f"Per-document NLL difference per target (variant − {ctx.reference}, averaged over seeds) on the "
            f"{eval_set_name(eval_set)}; left of zero the variant is better.",
            plots.chart_spec(plots.doc_difference_chart(pd.concat(diffs, ignore_index=True),
                                                        title=f"Per-document differences ({eval_set_name(eval_set)})"))))
        figures.append(Figure(
            f"paired-seeds-{slug}", f"Per-seed paired PPL, {eval_set_name(eval_set)}",
            f"PPL of each seed's {ctx.reference} run beside its paired variant run on the {eval_set_name(eval_set)}.",
            plots.chart_spec(plots.paired_seed_chart(pd.DataFrame(per_seed),
                                                     title=f"Per-seed paired PPL ({eval_set_name(eval_set)})"))))
    if not tables:
        why = (f"No evaluation set and learning rate holds the reference arm {ctx.reference!r} together with "
               "another arm, so there is nothing to compare.")
        return Section(key, title, omitted=why, intro=tuple(notes))
    return Section(key, title, intro=tuple(notes), tables=tuple(tables), figures=tuple(figures))


def _comparison_row(variant: str, result: Comparison) -> tuple[Cell, ...]:
    return row(
        variant,
        format_ppl(result.baseline.ppl_mean, result.baseline.ppl_sd),
        format_ppl(result.variant.ppl_mean, result.variant.ppl_sd),
        format_delta_p(result.delta_p),
        format_pairs(result.improved_pairs, result.n_pairs),
        format_nll_diff(result.nll_diff_mean),
        format_interval(*result.bootstrap.confidence_interval),
        f"{format_count(result.win.wins)}/{format_count(result.win.n_docs)} ({format_percent(result.win.win_rate)})",
    )


def _per_token_differences(paired: PairedLosses) -> np.ndarray:
    return document_differences(paired.baseline, paired.variant) / paired.n_targets


def _per_seed_rows(label: str, result: Comparison) -> list[dict]:
    return [
        {"comparison": label, "role": role, "arm": summary.arm, "seed": int(seed), "ppl": float(ppl)}
        for role, summary in (("reference", result.baseline), ("variant", result.variant))
        for seed, ppl in zip(summary.seeds, summary.ppl)
    ]


def _slug(value: str | None) -> str:
    text = "".join(ch if ch.isalnum() else "-" for ch in str(value or "unnamed").lower())
    return text.strip("-") or "unnamed"


def ablation_section(ctx: ReportContext) -> Section:
    """Tables 4, 5 and 7: every arm at every learning rate against the reference and, when present, GatedV."""
    key, title = "ablations", "Ablations against the references"
    if ctx.reference is None:
        return omitted(key, title, "No reference arm: no loss file has arm 'baseline'; choose one with --reference.")
    second = GATEDV if ctx.reference != GATEDV else None
    tables = []
    for eval_set in dict.fromkeys(group.eval_set for group in ctx.groups):
        groups = [group for group in ctx.groups if group.eval_set == eval_set and ctx.reference in group.arms]
        variants = {arm for group in groups for arm in group.arms if arm != ctx.reference}
        if len(variants) < 2:
            continue
        with_second = second is not None and any(second in group.arms for group in groups)
        row_groups = []
        for group in groups:
            if mixed_eval_set([run for runs in group.arms.values() for run in runs]):
                continue
            reference = ctx.summary(group, ctx.reference)
            rows = []
            for variant in other_arms(group.arms, ctx.reference):
                summary = ctx.summary(group, variant)
                cells = [variant, ppl_text(reference), ppl_text(summary), *_delta_cells(reference, summary)]
                if with_second:
                    if second in group.arms and variant != second:
                        cells += _delta_cells(ctx.summary(group, second), summary)
                    else:
                        cells += ["—", "—"]
                rows.append(row(*cells))
            if rows:
                row_groups.append(RowGroup(group.label, tuple(rows)))
        if not row_groups:
            continue
        columns = ["Variant", f"{ctx.reference} PPL", "Variant PPL", f"ΔP vs {ctx.reference}",
                   f"Pairs vs {ctx.reference}"]
        if with_second:
            columns += [f"ΔP vs {second}", f"Pairs vs {second}"]
        tables.append(Table(
            f"ablations-{_slug(eval_set)}",
            f"Variants on the {eval_set_name(eval_set)} against {ctx.reference}"
            + (f" and against {second}" if with_second else "") + ": P̄ ± SD over seeds, ΔP and improved pairs.",
            tuple(columns), "l" + "r" * (len(columns) - 1), tuple(row_groups),
            ("ΔP compares P̄ of the row's variant with P̄ of the column's reference at the same learning rate; "
             "pairs count the shared seeds on which the variant's PPL is lower.",)))
    if not tables:
        return omitted(key, title, f"No evaluation set holds two or more variants besides {ctx.reference!r}; "
                                   "the paired comparison above covers every variant.")
    return Section(key, title, tables=tuple(tables))


def _delta_cells(reference: ArmSummary, variant: ArmSummary) -> list[str]:
    delta = paired_delta(reference, variant)
    return [format_delta_p(delta.delta_p), format_pairs(delta.improved, delta.n_pairs)]


def learning_rates_section(ctx: ReportContext) -> Section:
    """Table 8: each evaluation set at every learning rate, arms side by side with ΔP against the reference."""
    key, title = "learning-rates", "Learning rates side by side"
    if ctx.reference is None:
        return omitted(key, title, "No reference arm: no loss file has arm 'baseline'; choose one with --reference.")
    row_groups = []
    variants: list[str] = []
    for eval_set in dict.fromkeys(group.eval_set for group in ctx.groups):
        groups = [group for group in ctx.groups if group.eval_set == eval_set and ctx.reference in group.arms
                  and len(group.arms) > 1 and not mixed_eval_set([r for runs in group.arms.values() for r in runs])]
        if len(groups) < 2:
            continue
        row_groups.append((eval_set, groups))
        variants += [arm for group in groups for arm in group.arms]
    variants = other_arms(set(variants), ctx.reference)
    if not row_groups:
        return omitted(key, title, f"No evaluation set has {ctx.reference!r} and a variant at two or more learning "
                                   "rates.")
    columns = ["Peak LR", f"{ctx.reference} PPL"]
    for variant in variants:
        columns += [f"{variant} PPL", f"ΔP {variant}"]
    out_groups = []
    for eval_set, groups in row_groups:
        rows = []
        for group in groups:
            reference = ctx.summary(group, ctx.reference)
            cells = [format_lr(group.lr), ppl_text(reference)]
            for variant in variants:
                if variant in group.arms:
                    summary = ctx.summary(group, variant)
                    cells += [ppl_text(summary), format_delta_p(delta_p(reference.ppl_mean, summary.ppl_mean))]
                else:
                    cells += ["—", "—"]
            rows.append(row(*cells))
        out_groups.append(RowGroup(eval_set_name(eval_set).capitalize(), tuple(rows)))
    table = Table("learning-rates", f"P̄ ± SD over seeds per evaluation set and peak learning rate; ΔP against "
                                    f"{ctx.reference} at the same rate.",
                  tuple(columns), "l" + "r" * (len(columns) - 1), tuple(out_groups))
    return Section(key, title, tables=(table,))


def inference_swap_section(ctx: ReportContext) -> Section:
    """Table 9: mean ± SD PPL with the value activation swapped at inference, trained activation × evaluated."""
    key, title = "inference-swap", "Value activation at inference"
    overrides = [run for run in ctx.inputs.runs if is_override(run)]
    if not overrides:
        return omitted(key, title, "No loss file was evaluated with an overridden value activation (value_act "
                                   "metadata), so there is no inference-swap table.")
    tables = []
    keys = sorted({(run.eval_set, _lr_of(run)) for run in overrides},
                  key=lambda key: (_eval_set_sort_key(key[0]), -1.0 if key[1] is None else key[1]))
    for eval_set, lr in keys:
        swapped = [run for run in overrides if run.eval_set == eval_set and _lr_of(run) == lr]
        arms = sorted({run.arm for run in swapped}, key=lambda arm: (arm != ctx.reference, arm != GATEDV, arm))
        cells: dict = defaultdict(list)  # (arm, activation at inference) -> runs
        for run in ctx.inputs.runs:
            if run.eval_set == eval_set and _lr_of(run) == lr and run.arm in arms:
                cell = cells[(run.arm, run.meta.get("value_act") or native_act(run.arm, run.meta))]
                twin = next((other for other in cell if other.seed == run.seed), None)
                if twin is not None:
                    raise InputError(f"arm {run.arm} seed {run.seed} evaluated with {run.meta.get('value_act')} "
                                     f"values appears twice: {twin.source} and {run.source}")
                cell.append(run)
        trained = {run.arm: native_act(run.arm, run.meta) or "unknown" for run in swapped}
        rows = [row(f"{arm} (trained {trained[arm]})",
                    *(ppl_text(run_summary(arm, cells[(arm, act)])) if cells.get((arm, act)) else "—"
                      for act in ("linear", "silu")))
                for arm in arms]
        tables.append(Table(f"inference-swap-{_slug(eval_set)}-lr-{_slug(format_lr(lr))}",
                            f"P̄ ± SD over seeds on the {eval_set_name(eval_set)} (LR {format_lr(lr)}) with the value "
                            "activation of every layer set at inference.",
                            ("Trained arm", "Linear at inference", "SiLU at inference"), "lrr",
                            (RowGroup(None, tuple(rows)),)))
    return Section(key, title, tables=tuple(tables))


BENCH_FORMAT = "gatedv-bench-1"
GIB = 1024**3


def cost_section(ctx: ReportContext) -> Section:
    """Table 6: paired time ratios (full-context forward, training step) and peak memory from `gatedv bench`."""
    key, title = "cost", "Computational cost"
    if not ctx.inputs.bench:
        return omitted(key, title, f"No benchmark results ({BENCH_GLOB}, written by gatedv bench --out) among the "
                                   "inputs, so there is no cost table.")
    tables = []
    for i, result in enumerate(ctx.inputs.bench, start=1):
        source = result["source"]
        if result.get("format") != BENCH_FORMAT:
            raise InputError(f"{source}: not a gatedv bench result (format {result.get('format')!r}, expected "
                             f"{BENCH_FORMAT!r})")
        try:
            summary, base, variant = result["summary"], result["baseline_arm"], result["variant_arm"]
            rows = (
                row("Full-context forward time ratio", "1.000000", f"{float(summary['forward_ratio']):.6f}"),
                row("Training-step time ratio", "1.000000", f"{float(summary['step_ratio']):.6f}"),
                row(f"Peak memory, {result['memory_kind']} (GiB)",
                    f"{summary['peak_memory_baseline_bytes'] / GIB:.4f}",
                    f"{summary['peak_memory_variant_bytes'] / GIB:.4f}"),
            )
            caption = (f"Cost of {variant} against {base} ({len(result['pairs'])} seed pair(s), {result['rounds']} "
                       f"alternating rounds × ({result['warmup']} warm-up + {result['calls']} timed) calls per mode, "
                       f"batch {result['batch_size']} × {result['seq_len']}, {result['device_name']}): per round the "
                       f"median call time, the ratio {variant} / {base}, its median over rounds, the mean over seeds.")
        except (KeyError, TypeError, ValueError) as error:
            raise InputError(f"{source}: bench result lacks or mangles {error}") from None
        tables.append(Table(f"cost-{i}", caption, ("Measure", base, variant), "lrr", (RowGroup(None, rows),)))
    return Section(key, title, tables=tuple(tables))


def curves_section(ctx: ReportContext) -> Section:
    """Figures 2 and 3: training-curve ΔP(t) with per-pair curves, and absolute PPL over the final quarter."""
    key, title = "curves", "Training curves"
    from gatedv_stats.stats.curves import curve_delta_p, final_quarter_ppl

    curves = ctx.inputs.curves
    if curves.empty:
        return omitted(key, title, f"No curve files ({CURVE_FILE_NAME}) among the inputs, so there are no training "
                                   "curves to show.")
    figures, notes = [], []
    for lr in sorted(curves["lr"].unique()):
        at_lr = curves[curves["lr"] == lr]
        arms = set(at_lr["arm"])
        if ctx.reference in arms and len(arms) > 1:
            pairs, means = [], []
            for variant in other_arms(arms, ctx.reference):
                try:
                    result = curve_delta_p(at_lr, ctx.reference, variant, baseline_lr=lr, variant_lr=lr)
                except InputError as error:
                    notes.append(f"{variant} vs {ctx.reference} at LR {format_lr(lr)}: curve left out because {error}.")
                    continue
                pairs.append(result.per_pair.assign(variant=variant)[["variant", "seed", "step", "delta_p"]])
                means.append(result.frame().assign(variant=variant)[["variant", "step", "delta_p"]])
            if pairs:
                figures.append(Figure(
                    f"delta-p-curve-lr-{_slug(format_lr(lr))}", f"ΔP during training, LR {format_lr(lr)}",
                    f"ΔP(t) = mean PPL of the variant / mean PPL of {ctx.reference} − 1 at each recorded update (thick), "
                    f"with each seed pair's ratio (thin); peak LR {format_lr(lr)}. Below zero the variant is better.",
                    plots.chart_spec(plots.delta_p_curve_chart(pd.concat(pairs), pd.concat(means),
                                                               title=f"ΔP vs {ctx.reference}, LR {format_lr(lr)}"))))
        final = final_quarter_ppl(at_lr)
        figures.append(Figure(
            f"final-quarter-lr-{_slug(format_lr(lr))}", f"Final quarter of training, LR {format_lr(lr)}",
            f"Development PPL over the final quarter of training (mean over seeds, band ± 1 SD); peak LR "
            f"{format_lr(lr)}.",
            plots.chart_spec(plots.final_quarter_chart(final, title=f"Final-quarter PPL, LR {format_lr(lr)}"))))
    if ctx.reference is None:
        notes.append("No reference arm, so only absolute PPL is shown.")
    return Section(key, title, intro=tuple(notes), figures=tuple(figures))


def provenance_section(ctx: ReportContext) -> Section:
    """Every input file with its SHA-256, the runs with their seeds and hashes, configurations and settings."""
    root = os.path.commonpath([os.path.abspath(file.path) for file in ctx.inputs.files])
    if os.path.isfile(root):
        root = os.path.dirname(root)
    files = Table("provenance-files", f"Input files (paths relative to {root}).", ("File", "Kind", "SHA-256"), "lll",
                  (RowGroup(None, tuple(row(_relative(file.path, root), file.kind, Cell(file.sha256, mono=True))
                                        for file in ctx.inputs.files)),))
    runs = sorted(ctx.inputs.runs, key=lambda run: (_eval_set_sort_key(run.eval_set), run.arm, run.seed, run.source))
    run_table = Table(
        "provenance-runs", "Evaluated runs.",
        ("Arm", "Seed", "Peak LR", "Eval set", "Value act", "Step", "Documents", "File", "Eval set SHA-256",
         "Checkpoint SHA-256"),
        "lrllllrlll",
        (RowGroup(None, tuple(row(
            run.arm, str(run.seed), format_lr(_lr_of(run)), str(run.eval_set or "—"),
            str(run.meta.get("value_act") or "—"), str(run.meta.get("step", "—")), format_count(len(run.docs)),
            _relative(run.source, root), Cell(str(run.meta.get("eval_set_sha256") or "—"), mono=True),
            Cell(str(run.meta.get("checkpoint_sha256") or "—"), mono=True)) for run in runs)),))
    versions = sorted({str(run.meta["gatedv_version"]) for run in ctx.inputs.runs if run.meta.get("gatedv_version")})
    hashes = {key: sorted({str(run.meta[key]) for run in ctx.inputs.runs if run.meta.get(key)})
              for key in ("tokenizer_sha256", "data_manifest_sha256")}
    settings = Table(
        "provenance-settings", "Settings.", ("Setting", "Value"), "ll",
        (RowGroup(None, (
            row("gatedv-stats version (this report)", __version__),
            row("gatedv version (loss files)", ", ".join(versions) or "—"),
            row("Reference arm", ctx.reference or "—"),
            row("Bootstrap resamples B", format_count(ctx.settings.samples)),
            row("Bootstrap RNG seed", str(ctx.settings.seed)),
            *(row(key, Cell(", ".join(values) or "—", mono=True)) for key, values in hashes.items()),
        )),))
    configs = {json.dumps(config, sort_keys=True, indent=1): None for config in
               [run.meta.get("config") for run in ctx.inputs.runs] + [info.get("config") for info in ctx.inputs.run_infos]
               if config}
    blocks = tuple(Block(f"Configuration {i}", text) for i, text in enumerate(configs, start=1))
    return Section("provenance", "Provenance", tables=(files, run_table, settings), blocks=blocks)


def _relative(source: str, root: str) -> str:
    """A run's source ("path" or "path[arm=A,seed=S]") with the path relative to `root`."""
    path, bracket, rest = source.partition("[")
    return os.path.relpath(os.path.abspath(path), root) + bracket + rest


SECTION_BUILDERS: tuple[Callable[[ReportContext], Section], ...] = (
    setup_section,
    lr_selection_section,
    comparison_section,
    ablation_section,
    learning_rates_section,
    inference_swap_section,
    cost_section,
    curves_section,
    reviewer_section,
    provenance_section,
)


def build_report(inputs: list[Path], *, reference: str | None = None, samples: int = 2000,
                 seed: int = 0) -> ReportData:
    """Discover the inputs and assemble every section's plain data."""
    if samples < 1:
        raise InputError(f"--samples {samples}: needs at least 1 bootstrap resample")
    ctx = make_context(discover_inputs(inputs), ReportSettings(reference=reference, samples=samples, seed=seed))
    sections = tuple(builder(ctx) for builder in tqdm(SECTION_BUILDERS, desc="report sections", unit="section",
                                                      file=sys.stderr, disable=None, leave=False))
    arms = sorted({run.arm for run in ctx.inputs.runs})
    subtitle = (f"{len(ctx.inputs.runs)} evaluated runs of {len(arms)} arms ({', '.join(arms)}); reference arm: "
                f"{ctx.reference or 'none'}; written by gatedv-stats {__version__}.")
    return ReportData(title="Paired comparison report", subtitle=subtitle, version=__version__,
                      reference=ctx.reference, sections=sections)
