"""Every file gatedv writes is verified when read: loss and item-score files carry the SHA-256 of their content in
their own Parquet metadata, run.json is sealed with the SHA-256 of its content, and a curve's SHA-256 is recorded
in the run.json beside it. A file that does not match is one `error:` line naming it and what to do (exit 2), and
no statistic is computed from it; a file of another tool, which records no hash, is read as before."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gatedv_stats.core.errors import InputError
from gatedv_stats.io.curvefiles import read_curve_file, read_curve_inputs, write_curve_file
from gatedv_stats.io.itemfiles import read_item_file, write_item_file
from gatedv_stats.io.lossfiles import read_loss_file, read_loss_inputs, write_loss_file
from gatedv_stats.io.runrecords import read_run_file, read_run_record, update_run_record
from gatedv_stats.io.sealing import SEAL_KEY, table_content_sha256
from helpers import assert_input_error, invoke


def docs_frame(n_docs: int = 40, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"doc_id": [f"doc{i}" for i in range(n_docs)], "n_targets": rng.integers(100, 257, n_docs),
                         "loss_sum": rng.uniform(300.0, 900.0, n_docs), "domain": [f"g{i % 2}" for i in range(n_docs)],
                         "n_bytes": rng.integers(400, 1200, n_docs)})


def rewrite_parquet(path, change) -> None:
    """Rewrite a Parquet file with `change` applied to its table and its key-value metadata kept as it was (the
    recorded hash included): the file is whole and readable, its content is not what was written."""
    pq.write_table(change(pq.read_table(path)), path)


def with_value(column: str, row: int, value):
    def change(table: pa.Table) -> pa.Table:
        values = table.column(column).to_pylist()
        values[row] = value
        index = table.schema.get_field_index(column)
        changed = table.set_column(index, table.schema.field(index), pa.array(values, table.schema.field(index).type))
        return changed.replace_schema_metadata(table.schema.metadata)
    return change


def with_metadata(key: bytes, value: bytes):
    def change(table: pa.Table) -> pa.Table:
        return table.replace_schema_metadata({**table.schema.metadata, key: value})
    return change


def test_a_loss_file_records_the_sha256_of_its_content_in_its_metadata(tmp_path):
    path = tmp_path / "run.parquet"
    write_loss_file(path, docs_frame(), {"arm": "a", "seed": 1})
    table = pq.read_table(path)
    recorded = json.loads(table.schema.metadata[SEAL_KEY])
    assert recorded == table_content_sha256(table) and len(recorded) == 64
    assert read_loss_file(path).meta[SEAL_KEY.decode()] == recorded


@pytest.mark.parametrize("change", [with_value("loss_sum", 3, 123.0), with_value("doc_id", 0, "docX"),
                                    with_metadata(b"seed", b"2")], ids=["value", "doc_id", "metadata"])
def test_a_loss_file_whose_content_changed_is_refused_naming_it(tmp_path, change):
    path = tmp_path / "run.parquet"
    write_loss_file(path, docs_frame(), {"arm": "a", "seed": 1})
    rewrite_parquet(path, change)
    with pytest.raises(InputError, match=rf"^{path}: damaged: its content does not match the sha256 its metadata "
                                         r"records \(content_sha256\); .*evaluate"):
        read_loss_file(path)


def test_an_item_file_whose_scores_changed_is_refused(tmp_path):
    path = tmp_path / "task.parquet"
    items = pd.DataFrame({"doc_id": ["0", "1", "2"], "acc": [1.0, 0.0, 1.0]})
    write_item_file(path, items, {"arm": "a", "seed": 3, "task": "toy"})
    assert read_item_file(path)[0].units["acc"].tolist() == [1.0, 0.0, 1.0]
    rewrite_parquet(path, with_value("acc", 1, 1.0))
    with pytest.raises(InputError, match=rf"^{path}: damaged: its content does not match"):
        read_item_file(path)


@pytest.mark.parametrize("damage", [lambda data: data[:len(data) // 2], lambda data: b""], ids=["truncated", "emptied"])
def test_a_truncated_loss_or_item_file_says_how_to_get_it_back(tmp_path, damage):
    loss, items = tmp_path / "run.parquet", tmp_path / "task.parquet"
    write_loss_file(loss, docs_frame(), {"arm": "a", "seed": 1})
    write_item_file(items, pd.DataFrame({"doc_id": ["0", "1"], "acc": [1.0, 0.0]}), {"arm": "a", "seed": 1,
                                                                                     "task": "toy"})
    for path, read in ((loss, read_loss_file), (items, read_item_file)):
        path.write_bytes(damage(path.read_bytes()))
        with pytest.raises(InputError, match=rf"^{path}: cannot read: Parquet .*[^.]; evaluate the run again "
                                             r"\(gatedv evaluate, gatedv import lm-eval\) or restore an intact copy$"):
            read(path)
    other = tmp_path / "other.parquet"
    write_loss_file(other, docs_frame(), {"arm": "b", "seed": 1})
    assert_input_error(invoke("bootstrap", "--baseline", loss, "--variant", other), f"error: {loss}: cannot read: ",
                       "; evaluate the run again")


def test_files_of_another_tool_record_no_hash_and_are_read_as_before(tmp_path):
    docs = docs_frame()
    plain = tmp_path / "plain.parquet"
    pq.write_table(pa.Table.from_pandas(docs, preserve_index=False).replace_schema_metadata(
        {b"arm": b'"a"', b"seed": b"1"}), plain)
    csv = tmp_path / "other.csv"
    docs.assign(arm="b", seed=2).to_csv(csv, index=False)
    runs = read_loss_inputs([plain, csv])
    assert [(run.arm, run.seed) for run in runs] == [("a", 1), ("b", 2)]


def test_a_statistic_on_a_damaged_loss_file_is_one_line_and_no_verdict(tmp_path):
    for arm in ("baseline", "gatedv"):
        for seed in (1, 2):
            noise = np.random.default_rng(seed + (10 if arm == "gatedv" else 0)).uniform(300.0, 900.0, 40)
            frame = docs_frame().assign(loss_sum=noise)
            write_loss_file(tmp_path / arm / f"seed{seed}.parquet", frame, {"arm": arm, "seed": seed})
    command = ("bootstrap", tmp_path, "--baseline-arm", "baseline", "--variant-arm", "gatedv", "--samples", "200")
    assert invoke(*command).exit_code == 0
    damaged = tmp_path / "gatedv" / "seed2.parquet"
    rewrite_parquet(damaged, with_value("loss_sum", 0, 301.5))
    result = invoke(*command)
    assert_input_error(result, f"{damaged}: damaged: its content does not match the sha256")
    assert result.stdout == ""  # no verdict


def test_run_json_is_sealed_and_an_edited_one_is_refused(tmp_path):
    update_run_record(tmp_path, {"variant": "baseline", "seed": 1, "status": "running"})
    record = json.loads((tmp_path / "run.json").read_text())
    assert record.pop("record_sha256") == hashlib.sha256(
        json.dumps(record, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    update_run_record(tmp_path, {"status": "finished"})
    assert read_run_record(tmp_path)["status"] == "finished"
    text = (tmp_path / "run.json").read_text()
    (tmp_path / "run.json").write_text(text.replace('"seed": 1', '"seed": 7'))
    for read in (lambda: read_run_record(tmp_path), lambda: read_run_file(tmp_path / "run.json")):
        with pytest.raises(InputError, match=rf"^{tmp_path / 'run.json'}: damaged: its content does not match the "
                                             r"sha256 it records \(record_sha256\)"):
            read()


def test_an_unsealed_run_json_is_read_as_before(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"variant": "baseline", "seed": 1, "status": "finished"}))
    assert read_run_record(tmp_path)["status"] == "finished"
    assert update_run_record(tmp_path, {"threads": 2})["threads"] == 2


CURVE = [{"arm": "baseline", "seed": 1, "lr": 0.001, "step": step, "dev_nll": 5.0 - step / 10, "train_loss": 5.0,
          "tokens": step * 512} for step in (0, 2, 4)]


def test_a_curve_records_its_sha256_in_the_run_json_beside_it(tmp_path):
    update_run_record(tmp_path, {"variant": "baseline", "seed": 1, "lr": 0.001, "status": "running"})
    write_curve_file(tmp_path / "curve.csv", CURVE[:2], record=True)
    first = read_run_record(tmp_path)["curve_sha256"]
    assert first == hashlib.sha256((tmp_path / "curve.csv").read_bytes()).hexdigest()
    write_curve_file(tmp_path / "curve.csv", CURVE, record=True)
    record = read_run_record(tmp_path)
    assert record["previous_curve_sha256"] == first
    assert record["curve_sha256"] == hashlib.sha256((tmp_path / "curve.csv").read_bytes()).hexdigest()
    assert len(read_curve_inputs([tmp_path])) == 3


def test_a_damaged_curve_is_refused_naming_it_and_the_record(tmp_path):
    update_run_record(tmp_path, {"variant": "baseline", "seed": 1, "lr": 0.001, "status": "finished"})
    path = tmp_path / "curve.csv"
    write_curve_file(path, CURVE, record=True)
    path.write_text(path.read_text().replace("4.8", "4.7"))
    with pytest.raises(InputError, match=rf"^{path}: damaged: its sha256 [0-9a-f]{{12}}… is not the one "
                                         rf"{tmp_path / 'run.json'} records"):
        read_curve_file(path)
    with pytest.raises(InputError, match="damaged"):
        read_curve_inputs([tmp_path])
