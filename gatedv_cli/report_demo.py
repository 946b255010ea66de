"""The commands that put it all together: `report` (a paper-ready report of whatever runs the inputs hold) and
`demo` (the main job on the embedded default corpus)."""

from __future__ import annotations

from pathlib import Path

import typer

from gatedv_cli.options import (
    CLUSTER,
    CONFIDENCE_LEVEL,
    DEVICE,
    HIGHER_IS_BETTER,
    JSON,
    N_RESAMPLES,
    NOISE_FLOOR,
    SEED,
    SESOI,
    emit,
    warn,
)
from gatedv_cli.skipped import skipped_files, warn_skipped


def report_command(
    ctx: typer.Context,
    inputs: list[str] = typer.Argument(..., help="Experiment directories, loss files, curve.csv, run.json or "
                                       "bench*.json files.", show_default=False),
    fmt: str = typer.Option(None, "--format", "-f", help="html (one offline file), md or latex (default: as the "
                            "--out file is named, else html).", show_default=False),
    reference: str = typer.Option(None, "--reference", help="Reference arm (default: baseline when present).",
                                  show_default=False),
    out: str = typer.Option(None, "--out", "-o", help="Output file (default: report.<ext> in the single input "
                            "directory, else in the current directory).", show_default=False),
    n_resamples: int = N_RESAMPLES,
    rng_seed: int = SEED,
    confidence_level: float = CONFIDENCE_LEVEL,
    sesoi: float = SESOI,
    cluster: str = CLUSTER,
    metric: str = typer.Option(None, "--metric", metavar="NAME", show_default=False, help="The metric of the "
                               "Downstream tasks section, when the inputs hold item-score files (default: acc_norm, "
                               "acc or exact_match, the first every file has), or of the score tables to find (arm, "
                               "seed, doc_id and a NAME column)."),
    higher_is_better: bool = HIGHER_IS_BETTER,
    noise_floor: str = NOISE_FLOOR,
    skip_unreadable: bool = typer.Option(False, "--skip-unreadable", help="A file found in a directory that looks "
                                         "like a loss file but cannot be read: warn, leave it out and list it in the "
                                         "report's provenance instead of failing."),
    ledger: str = typer.Option(None, "--ledger", metavar="LEDGER", show_default=False, help="A research ledger "
                               "(gatedv ledger): its history, running best and wealth as a section of the report."),
) -> None:
    """Paper-ready report (tables, figures, provenance) from whatever runs the inputs hold."""
    import gatedv_stats as gv
    from gatedv_stats.core.locks import output_lock

    skipped = skipped_files(ctx, skip_unreadable)
    left_out: list[str] = []
    with output_lock(_report_file(inputs, out, fmt)):  # another report of the same file: written after it
        path = gv.report(inputs, out, fmt=fmt, reference=reference, n_resamples=n_resamples, rng_seed=rng_seed,
                         confidence_level=confidence_level, sesoi=sesoi, cluster=cluster, metric=metric,
                         higher_is_better=higher_is_better,
                         noise_floor=noise_floor, skipped=skipped, left_out=left_out, ledger=ledger)
    warn_skipped(skipped)
    warn(left_out)
    typer.echo(f"wrote {path}")


def _report_file(inputs: list[str], out: str | None, fmt: str | None) -> Path:
    """The file a report goes to, as `write_report` resolves it (the key of its lock; a bad choice is refused there)."""
    from gatedv_stats.reporting.render import FORMATS, default_output

    named = None if out is None else next((name for name, suffix in FORMATS.items()
                                           if suffix == Path(out).suffix.lower()), None)
    chosen = fmt if fmt in FORMATS else named or "html"
    path = default_output([Path(given) for given in inputs], chosen) if out is None else Path(out)
    return path / f"report{FORMATS[chosen]}" if path.is_dir() else path


def demo_command(
    out: str = typer.Option("gatedv-demo", "--out", help="Directory for data, runs and report."),
    corpus: str = typer.Option("builtin:python-stdlib", "--corpus", help="Corpus to prepare into OUT/data when it "
                               "holds no prepared data (any gatedv prepare corpus)."),
    updates: int = typer.Option(None, "--updates", help="Updates per run (default: the tiny recipe's).",
                                show_default=False),
    seeds: int = typer.Option(3, "--seeds", help="Paired seeds (1..N)."),
    jobs: int = typer.Option(None, "--jobs", help="Runs at a time (default: 2 on a CPU, else 1).", show_default=False),
    device: str = DEVICE,
    as_json: bool = JSON,
) -> None:
    """The main job on the embedded default: prepare, train tiny baseline and GatedV, evaluate, bootstrap, report."""
    from demo import run_demo
    from gatedv_stats.core.outputs import check_output_dir

    check_output_dir(out, "--out")
    emit(run_demo(out, updates=updates, seeds=seeds, device=device, jobs=jobs, corpus=corpus), as_json)
