"""Provenance: every input file with its SHA-256, the runs with their seeds and hashes, configurations, settings."""

from __future__ import annotations

import json
import os

from gatedv_stats import __version__
from gatedv_stats.analysis.experiment import ExperimentAnalysis
from gatedv_stats.core.formatting import format_count, format_level, format_lr, format_percent
from gatedv_stats.pairing.selection import eval_set_sort_key, lr_of, natural_key
from gatedv_stats.reporting.cells import MISSING
from gatedv_stats.reporting.model import Block, Cell, RowGroup, Section, Table, row

PROVENANCE_HASHES = ("tokenizer_sha256", "data_manifest_sha256")


def provenance_section(analysis: ExperimentAnalysis) -> Section:
    inputs = analysis.inputs
    root = os.path.commonpath([os.path.abspath(file.path) for file in inputs.files])
    if os.path.isfile(root):
        root = os.path.dirname(root)
    files = Table("provenance-files", f"Input files (paths relative to {root}).", ("File", "Kind", "SHA-256"), "lll",
                  (RowGroup(None, tuple(row(_relative(file.path, root), file.kind, Cell(file.sha256, mono=True))
                                        for file in inputs.files)),))
    runs = sorted(inputs.runs, key=lambda run: (eval_set_sort_key(run.eval_set), natural_key(run.arm), run.seed,
                                              run.source))
    run_table = Table(
        "provenance-runs", "Evaluated runs.",
        ("Arm", "Seed", "Peak LR", "Eval set", "Value act", "Step", "Documents", "File", "Eval set SHA-256",
         "Checkpoint SHA-256"),
        "lrllllrlll",
        (RowGroup(None, tuple(row(
            run.arm, str(run.seed), format_lr(lr_of(run)), str(run.eval_set or MISSING),
            str(run.meta.get("value_act") or MISSING), str(run.meta.get("step", MISSING)), format_count(len(run.docs)),
            _relative(run.source, root), Cell(str(run.meta.get("eval_set_sha256") or MISSING), mono=True),
            Cell(str(run.meta.get("checkpoint_sha256") or MISSING), mono=True)) for run in runs)),))
    configs = {json.dumps(config, sort_keys=True, indent=1): None for config in
               [run.meta.get("config") for run in inputs.runs] + [info.get("config") for info in inputs.run_infos]
               if config}
    blocks = tuple(Block(f"Configuration {i}", text) for i, text in enumerate(configs, start=1))
    tables = [files, run_table, _settings_table(analysis)]
    if inputs.skipped:  # the unreadable files passed over (--skip-unreadable)
        tables.insert(1, Table("provenance-skipped", f"Unreadable files skipped ({len(inputs.skipped)}; "
                               "--skip-unreadable): no run of theirs is in this report.", ("File", "Reason"), "ll",
                               (RowGroup(None, tuple(row(_relative(file.path, root), file.reason)
                                                     for file in inputs.skipped)),)))
    return Section("provenance", "Provenance", tables=tuple(tables), blocks=blocks)


def _settings_table(analysis: ExperimentAnalysis) -> Table:
    runs, settings = analysis.inputs.runs, analysis.settings
    versions = sorted({str(run.meta["gatedv_version"]) for run in runs if run.meta.get("gatedv_version")})
    hashes = {key: sorted({str(run.meta[key]) for run in runs if run.meta.get(key)}) for key in PROVENANCE_HASHES}
    return Table(
        "provenance-settings", "Settings.", ("Setting", "Value"), "ll",
        (RowGroup(None, (
            row("gatedv-stats version (this report)", __version__),
            row("gatedv version (loss files)", ", ".join(versions) or MISSING),
            row("Reference arm", analysis.reference or MISSING),
            row("Bootstrap resamples B", format_count(settings.n_resamples)),
            row("Bootstrap RNG seed", str(settings.rng_seed)),
            row("Confidence level", format_level(settings.confidence_level)),
            row("Smallest effect of interest (relative ΔP)",
                MISSING if settings.sesoi is None else format_percent(settings.sesoi, 2)),
            row("Clusters (document column)", settings.cluster or "— (documents are the sampled units)"),
            row("Comparison unit", settings.unit),
            row("Provenance differences accepted", ", ".join(settings.allow_mismatch) or MISSING),
            *(row(key, Cell(", ".join(values) or MISSING, mono=True)) for key, values in hashes.items()),
        )),))


def _relative(source: str, root: str) -> str:
    """A run's source ("path" or "path[arm=A,seed=S]") with the path relative to `root`."""
    path, bracket, rest = source.partition("[")
    return os.path.relpath(os.path.abspath(path), root) + bracket + rest
