"""Item-score files: written and read back (Parquet, CSV with a sidecar or constant columns, long tables,
directories), and every malformed file refused in one line naming the file, row and field."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gatedv_stats.core.errors import InputError
from gatedv_stats.io.itemfiles import ITEM_FORMAT, is_item_file, read_item_file, read_item_inputs, write_item_file
from gatedv_stats.io.lossfiles import write_loss_file
from gatedv_stats.io.runfiles import SkippedFile

META = {"arm": "a", "seed": 3, "task": "toy_mc", "n_shot": 2, "task_config_sha256": "c" * 64}


def _items(**columns) -> pd.DataFrame:
    frame = pd.DataFrame({"doc_id": ["0", "1", "2"], "acc": [1.0, 0.0, 1.0], "gold_margin": [0.5, -1.25, 2.0],
                          "subtask": ["x", "x", "y"], "doc_hash": ["h0", "h1", "h2"]})
    return frame.assign(**columns)


def test_a_written_file_reads_back_with_its_metadata(tmp_path):
    path = tmp_path / "a.parquet"
    write_item_file(path, _items(), {**META, "model": "tiny"})
    (run,) = read_item_inputs([path])
    assert (run.source, run.arm, run.seed, run.task, run.meta['n_shot']) == (str(path), "a", 3, "toy_mc", 2)
    assert tuple(run.meta["metrics"]) == ("acc", "gold_margin")
    assert run.meta["higher_is_better"] == {"acc": True, "gold_margin": True}
    assert list(run.units.columns) == ["doc_id", "acc", "gold_margin", "subtask", "doc_hash"]
    np.testing.assert_array_equal(run.units["gold_margin"], [0.5, -1.25, 2.0])
    assert run.meta["format"] == ITEM_FORMAT and run.meta["model"] == "tiny"
    assert run.meta["task_config_sha256"] == "c" * 64 and is_item_file(path)


def test_csv_with_a_sidecar_or_constant_columns_and_a_long_table(tmp_path):
    sidecar = tmp_path / "s.csv"
    _items().to_csv(sidecar, index=False)
    (tmp_path / "s.csv.json").write_text(json.dumps({**META, "higher_is_better": {"gold_margin": True}}))
    constant = tmp_path / "c.csv"
    _items(arm="b", seed=4, task="toy_mc").to_csv(constant, index=False)
    long = tmp_path / "long.csv"
    pd.concat([_items(arm=arm, seed=seed, task=task) for arm in ("a", "b") for seed in (1, 2)
               for task in ("t1", "t2")]).to_csv(long, index=False)
    runs = read_item_inputs([sidecar, constant, long])
    assert [(run.arm, run.seed, run.task) for run in runs[:2]] == [("a", 3, "toy_mc"), ("b", 4, "toy_mc")]
    assert len(runs) == 10 and runs[2].source == f"{long}[arm=a,seed=1,task=t1]"
    assert all(tuple(run.meta['metrics']) == ("acc", "gold_margin") and run.units["doc_id"].tolist() == ["0", "1", "2"]
               for run in runs)
    assert runs[1].meta['n_shot'] is None


def test_a_directory_holds_item_files_and_loss_files_apart(tmp_path):
    write_item_file(tmp_path / "items" / "a.parquet", _items(), META)
    write_loss_file(tmp_path / "loss.parquet", pd.DataFrame({"doc_id": ["0"], "n_targets": [1], "loss_sum": [1.0]}),
                    {"arm": "a", "seed": 0})
    (tmp_path / "broken.parquet").write_bytes(b"not parquet")
    assert not is_item_file(tmp_path / "loss.parquet")
    skipped: list[SkippedFile] = []
    (run,) = read_item_inputs([tmp_path], skipped=skipped)
    assert run.task == "toy_mc" and [s.path for s in skipped] == [str(tmp_path / "broken.parquet")]
    with pytest.raises(InputError, match="broken.parquet: cannot read"):
        read_item_inputs([tmp_path])
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="empty: no item-score files"):
        read_item_inputs([tmp_path / "empty"])


@pytest.mark.parametrize(("change", "message"), [
    (lambda f: f.drop(columns="doc_id"), "missing column 'doc_id'"),
    (lambda f: f.assign(doc_id=["0", " ", "2"]), ": row 2: doc_id is empty"),
    (lambda f: f.assign(doc_id=["0", "1", "0"]), "duplicate doc_id '0' (1 ids, rows 1, 3...)"),
    (lambda f: f.assign(acc=[1.0, np.nan, 1.0]), ": row 2: acc is missing or NaN"),
    (lambda f: f.assign(gold_margin=[0.5, np.inf, 1.0]), ": row 2: gold_margin is infinite (inf)"),
    (lambda f: f.assign(subtask=["x", None, "y"]), ": row 2: subtask is missing"),
    (lambda f: f.iloc[:0], ": no rows"),
])
def test_bad_items_are_refused_naming_the_row_and_field(tmp_path, change, message):
    path = tmp_path / "a.parquet"
    with pytest.raises(InputError) as refused:
        write_item_file(path, change(_items()), META)
    assert message in str(refused.value) and not path.exists()
    csv = tmp_path / "a.csv"
    change(_items()).to_csv(csv, index=False)
    (tmp_path / "a.csv.json").write_text(json.dumps({**META, "metrics": ["acc", "gold_margin"]}))
    with pytest.raises(InputError) as read:
        read_item_inputs([csv])
    assert str(read.value).startswith(str(csv)) and "\n" not in str(read.value)


@pytest.mark.parametrize(("frame", "sidecar", "message"), [
    ("doc_id,acc\n0,1\n1,x\n", META, ": row 2: acc 'x' is not a number"),
    ("doc_id,acc,acc\n0,1,1\n", META, "column 'acc' appears more than once"),
    ("doc_id,acc,arm\n0,1,b\n", META, "arm is 'a' in one place and 'b' in another"),
    ("doc_id,acc\n0,1\n", {"arm": "a", "seed": 1}, "no 'task' recorded"),
    ("doc_id,acc\n0,1\n", {**META, "seed": -1}, "seed"),
    ("doc_id,score\n0,1\n", META, "no direction for the metric 'score'"),
    ("doc_id,acc\n0,1\n", {**META, "format": "gatedv-other/1"}, "is not an item-score file"),
    ("doc_id,acc\n0,1\n", {**META, "metrics": ["acc", "f1"]}, "metric 'f1' has no column"),
    ("doc_id,acc,arm\n0,1,a\n1,1,b\n", {"seed": 1}, "a.csv: column 'arm' is metadata and must hold one value"),
])
def test_bad_files_are_refused_in_one_line(tmp_path, frame, sidecar, message):
    path = tmp_path / "a.csv"
    path.write_text(frame)
    (tmp_path / "a.csv.json").write_text(json.dumps(sidecar))
    with pytest.raises(InputError) as refused:
        read_item_file(path)
    assert message in str(refused.value) and "\n" not in str(refused.value), str(refused.value)


def test_a_parquet_column_given_twice_and_a_path_given_twice(tmp_path):
    path = tmp_path / "twice.parquet"
    pq.write_table(pa.table([pa.array(["0"]), pa.array([1.0]), pa.array([1.0])], names=["doc_id", "acc", "acc"]),
                   path)
    with pytest.raises(InputError, match=r"twice\.parquet: .*acc"):  # pyarrow itself refuses to read it
        read_item_file(path)
    write_item_file(tmp_path / "d" / "a.parquet", _items(), META)
    with pytest.raises(InputError, match="given twice"):
        read_item_inputs([tmp_path / "d" / "a.parquet", tmp_path / "d" / "a.parquet"])
    assert len(read_item_inputs([tmp_path / "d" / "a.parquet", tmp_path / "d"])) == 1  # reached twice, read once
    with pytest.raises(InputError, match="column 'acc' appears more than once"):
        write_item_file(tmp_path / "b.parquet", pd.concat([_items(), _items()[["acc"]]], axis=1), META)


def test_the_writer_needs_run_metadata_and_a_parquet_name(tmp_path):
    with pytest.raises(InputError, match="metadata needs 'task'"):
        write_item_file(tmp_path / "a.parquet", _items(), {"arm": "a", "seed": 1})
    with pytest.raises(InputError, match="name it \\*.parquet"):
        write_item_file(tmp_path / "a.csv", _items(), META)
    assert list(tmp_path.iterdir()) == []
