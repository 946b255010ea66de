"""Computational cost (paper Table 6): paired time ratios (full-context forward, training step) and peak memory
from `gatedv bench` results."""

from __future__ import annotations

from gatedv_stats.analysis.experiment import ExperimentAnalysis
from gatedv_stats.io.benchfiles import BENCH_GLOB
from gatedv_stats.reporting.model import RowGroup, Section, Table, omitted, row

KEY, TITLE = "cost", "Computational cost"
GIB = 1024**3


def cost_section(analysis: ExperimentAnalysis) -> Section:
    if not analysis.inputs.bench:
        return omitted(KEY, TITLE, f"No benchmark results ({BENCH_GLOB}, written by gatedv bench --out) among the "
                                   "inputs, so there is no cost table.")
    tables = []
    for i, result in enumerate(analysis.inputs.bench, start=1):
        summary, base, variant = result["summary"], result["baseline_arm"], result["variant_arm"]
        rows = (
            row("Full-context forward time ratio", "1.000000", f"{float(summary['forward_ratio']):.6f}"),
            row("Training-step time ratio", "1.000000", f"{float(summary['step_ratio']):.6f}"),
            row(f"Peak memory, {result['memory_kind']} (GiB)",
                f"{float(summary['peak_memory_baseline_bytes']) / GIB:.4f}",
                f"{float(summary['peak_memory_variant_bytes']) / GIB:.4f}"),
        )
        caption = (f"Cost of {variant} against {base} ({len(result['pairs'])} seed pair(s), {result['rounds']} "
                   f"alternating rounds × ({result['warmup']} warm-up + {result['calls']} timed) calls per mode, "
                   f"batch {result['batch_size']} × {result['seq_len']}, {result['device_name']}): per round the "
                   f"median call time, the ratio {variant} / {base}, its median over rounds, the mean over seeds.")
        tables.append(Table(f"cost-{i}", caption, ("Measure", base, variant), "lrr", (RowGroup(None, rows),)))
    return Section(KEY, TITLE, tables=tuple(tables))
