"""Score tables: any per-unit score from any pipeline (a judge model's score per document, pass@k over samples,
BLEU per document, a reward model's score), declared as a schema of `io.runfiles`.

A long table (CSV or Parquet) holds `arm`, `seed`, `doc_id` and the metric's column, with optional grouping
columns (text: a subset, a source); or one file holds one run, its `arm` and `seed` in its metadata. Which way is
better is said once: by the caller (`--higher-is-better` / `--lower-is-better`, `higher_is_better=`) or in the
file's metadata (`higher_is_better`: true / false, or {metric: true / false}). Other numeric columns are not the
metric and are left out.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from gatedv_stats.io.columns import check_doc_ids, check_table, is_numeric, numeric_column, text_columns
from gatedv_stats.io.itemfiles import metric_directions
from gatedv_stats.io.runfiles import RUN_FILE_SUFFIXES, RunSchema, column_names, file_format

SCORE_FORMAT = "gatedv-scores/1"
META_COLUMNS = ("arm", "seed", "eval_set", "eval_set_sha256")


def score_schema(metric: str, higher_is_better: bool | None = None) -> RunSchema:
    """The schema of score tables of `metric`, better when higher if `higher_is_better` (None: as each file's
    metadata says)."""

    def check_scores(frame: pd.DataFrame, meta: dict, source: str) -> tuple[pd.DataFrame, dict]:
        where = check_table(frame, source, None, ("doc_id", metric), "columns")
        scores = pd.DataFrame({"doc_id": check_doc_ids(frame["doc_id"], source, where).to_numpy(dtype=object),
                               metric: numeric_column(frame[metric], metric, source, where, finite=True)})
        groups = [column for column in frame.columns if column not in scores.columns
                  and not is_numeric(frame[column])]
        recorded = meta.get("higher_is_better")  # one direction, or {metric: direction}
        directions = metric_directions(
            {**meta, "higher_is_better": {metric: recorded} if isinstance(recorded, bool) else recorded}, (metric,),
            source, None if higher_is_better is None else {metric: higher_is_better})
        return (text_columns(frame[groups], scores, where, "unit"),
                {**meta, "metric": metric, "metrics": [metric], "higher_is_better": directions})

    def belongs(path: Path) -> bool:
        """A table with doc_id and the metric's column that is neither a loss file nor an item-score file."""
        if path.suffix not in RUN_FILE_SUFFIXES or not path.is_file():
            return False
        names = column_names(path)
        return "doc_id" in names and metric in names and "loss_sum" not in names and file_format(path) in (
            None, SCORE_FORMAT) and "task" not in names

    return RunSchema("scores", "score table", ("arm", "seed"), META_COLUMNS, check_scores, belongs,
                     f"score tables (*.parquet / *.csv with doc_id and a {metric} column)", SCORE_FORMAT)

