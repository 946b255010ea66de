"""Loss files (docs/method-statistics.md §5): the schema of per-document loss sums of evaluated runs, read and written
by `io.runfiles`: one row per evaluation document (`doc_id`, `n_targets`, `loss_sum`, optional `domain`, `n_bytes`)
and the run's metadata (`arm`, `seed`, `lr`, ...); a long table's runs are told apart by `arm` and `seed`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from gatedv_stats.core.errors import InputError
from gatedv_stats.core.files import read_model_config
from gatedv_stats.io.columns import check_doc_ids, check_table, fail_rows, integer_column, numeric_column
from gatedv_stats.io.runfiles import (
    Run,
    RunSchema,
    SkippedFile,
    column_names,
    file_runs,
    read_runs,
    table_runs,
    write_run,
)

REQUIRED_COLUMNS = ("doc_id", "n_targets", "loss_sum")
META_KEYS = (
    "arm", "seed", "lr", "step", "eval_set", "eval_set_sha256", "tokenizer_sha256", "checkpoint_sha256",
    "data_manifest_sha256", "value_act", "trained_value_act", "config", "gatedv_version",
)
# The largest per-target NLL (nats) accepted: perplexities up to exp(300) ≈ 2e130 keep their sums and squares over
# any number of seeds finite in float64 (exp(NLL) itself is finite up to 709.78); a document above it is a bad row.
MAX_TARGET_NLL = 300.0


def validate_docs(frame: pd.DataFrame, source: str, *, row_names: Sequence[str] | None = None) -> pd.DataFrame:
    """The per-document columns checked and normalised: doc_id, n_targets, loss_sum[, domain, n_bytes]; an error
    in one row names it `<source>: row <n>`, or `row_names[i]` when given (where the row came from)."""
    where = check_table(frame, source, row_names, REQUIRED_COLUMNS, "per-document columns")
    doc_id = check_doc_ids(frame["doc_id"], source, where)
    loss_sum = numeric_column(frame["loss_sum"], "loss_sum", source, where, finite=True)
    fail_rows(loss_sum < 0, where, "loss_sum is negative", loss_sum)
    n_targets = integer_column(frame["n_targets"], "n_targets", source, where, minimum=1)
    # Bounding each document's mean NLL also keeps every sum of loss sums finite in float64.
    fail_rows(loss_sum / n_targets > MAX_TARGET_NLL, where, f"loss_sum is more than {MAX_TARGET_NLL:g} nats "
              "per target (beyond, the perplexities overflow the statistics in float64)", loss_sum)
    out = pd.DataFrame({"doc_id": doc_id.to_numpy(dtype=object), "n_targets": n_targets, "loss_sum": loss_sum})
    if "domain" in frame.columns:
        fail_rows(frame["domain"].isna().to_numpy(), where, "domain is missing (where the column is given, every "
                  "document needs one)")
        out["domain"] = frame["domain"].astype(str).to_numpy(dtype=object)
    if "n_bytes" in frame.columns:
        out["n_bytes"] = integer_column(frame["n_bytes"], "n_bytes", source, where, minimum=0)
    return out


def _check_docs(frame: pd.DataFrame, meta: dict, source: str) -> tuple[pd.DataFrame, dict]:
    if meta.get("config") is not None:
        read_model_config(meta["config"], f"{source}: config")
    return validate_docs(frame, source), meta


# A file found in a directory is a loss file when it has a `loss_sum` column (read from its schema or header line
# only); a readable file without one (an evaluation set, a curve) is not.
LOSS = RunSchema("loss", "loss file", ("arm", "seed"), META_KEYS, _check_docs,
                 lambda path: "loss_sum" in column_names(path), "loss files (*.parquet / *.csv with a loss_sum column)")


def read_loss_file(path: str | Path, *, arm: str | None = None, seed: int | None = None) -> Run:
    """Read one run from a Parquet or CSV loss file; `arm` and `seed` supply metadata the file lacks (a file
    recording a different value is an error)."""
    runs = file_runs(path, LOSS, arm=arm, seed=seed)
    if len(runs) > 1:
        listed = ", ".join(f"({run.arm}, {run.seed})" for run in runs[:5])
        raise InputError(f"{path}: holds {len(runs)} runs ({listed}...); read it as a long table")
    return runs[0]


def read_long_table(path: str | Path) -> list[Run]:
    """Read a table holding many runs (columns `arm`, `seed`, `doc_id`, `n_targets`, `loss_sum`)."""
    return file_runs(path, LOSS, long_table=True)


def read_loss_inputs(paths: Sequence[str | Path], *, skipped: list[SkippedFile] | None = None) -> list[Run]:
    """Read loss files, long tables and directories (searched recursively for files with a `loss_sum` column), as
    `io.runfiles.read_runs` does."""
    return read_runs(paths, (LOSS,), skipped=skipped)


def runs_from_frame(frame: pd.DataFrame, file_meta: dict, path: str, sha256: str = "", *, arm: str | None = None,
                    seed: int | None = None, long_table: bool = False) -> list[Run]:
    """A loss table's runs (a long table's told apart by `arm` and `seed`), checked; `path` names it in messages."""
    return table_runs(frame, file_meta, path, sha256, LOSS, arm=arm, seed=seed, long_table=long_table)


def write_loss_file(path: str | Path, docs: pd.DataFrame, meta: dict) -> None:
    """Write one run as Parquet (a `.parquet` path), atomically, with each metadata value JSON-encoded under
    its key."""
    write_run(path, docs, meta, LOSS)
