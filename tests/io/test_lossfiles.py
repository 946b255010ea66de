"""Loss-file reading and writing: Parquet metadata, CSV columns and sidecars, long tables, directories."""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from gatedv_stats.core.errors import InputError
from gatedv_stats.io.lossfiles import (
    read_long_table,
    read_loss_file,
    read_loss_inputs,
    write_loss_file,
)
from gatedv_stats.pairing.selection import select_runs


def docs_frame(n_docs: int = 5, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"doc_id": [f"doc{i}" for i in range(n_docs)], "n_targets": rng.integers(100, 257, n_docs),
                         "loss_sum": rng.uniform(300.0, 900.0, n_docs), "domain": [f"g{i % 2}" for i in range(n_docs)],
                         "n_bytes": rng.integers(400, 1200, n_docs)})


def test_parquet_round_trip_keeps_documents_metadata_and_hash(tmp_path):
    path = tmp_path / "run.parquet"
    docs = docs_frame()
    meta = {"arm": "gatedv", "seed": np.int64(20270211), "lr": np.float64(3e-4), "step": 100, "eval_set": "heldout",
            "config": {"d_model": np.int64(128), "n_layers": 6}, "value_act": None}  # numpy values are welcome
    write_loss_file(path, docs, meta)
    run = read_loss_file(path)
    assert (run.arm, run.seed) == ("gatedv", 20270211)
    assert run.meta["config"] == {"d_model": 128, "n_layers": 6} and run.meta["lr"] == 3e-4 and run.meta["step"] == 100
    assert run.meta["value_act"] is None and run.eval_set == "heldout" and "gatedv_version" in run.meta
    pd.testing.assert_frame_equal(run.docs, docs, check_dtype=False)
    assert run.docs["loss_sum"].dtype == np.float64 and run.docs["n_targets"].dtype == np.int64
    assert run.sha256 == hashlib.sha256(path.read_bytes()).hexdigest() and run.source == str(path)
    raw = pq.read_schema(path).metadata
    assert json.loads(raw[b"config"]) == meta["config"] and json.loads(raw[b"seed"]) == 20270211
    assert [p.name for p in tmp_path.iterdir()] == ["run.parquet"]  # no temporary file left behind


def test_write_rejects_bad_documents_and_leaves_no_file(tmp_path):
    docs = docs_frame()
    docs.loc[1, "loss_sum"] = -3.0
    with pytest.raises(InputError, match="row 2: loss_sum is negative"):
        write_loss_file(tmp_path / "bad.parquet", docs, {"arm": "a", "seed": 1})
    with pytest.raises(InputError, match="metadata needs 'seed'"):
        write_loss_file(tmp_path / "bad.parquet", docs_frame(), {"arm": "a"})
    with pytest.raises(InputError, match="metadata needs 'arm'"):
        write_loss_file(tmp_path / "bad.parquet", docs_frame(), {"arm": "", "seed": 1})
    assert list(tmp_path.iterdir()) == []


def test_csv_metadata_from_constant_columns_and_from_a_sidecar(tmp_path):
    docs = docs_frame()
    docs.assign(arm="baseline", seed=7, lr=0.0048, eval_set="dev").to_csv(tmp_path / "columns.csv", index=False)
    run = read_loss_file(tmp_path / "columns.csv")
    assert (run.arm, run.seed, run.meta["lr"], run.eval_set) == ("baseline", 7, 0.0048, "dev")
    assert list(run.docs.columns) == ["doc_id", "n_targets", "loss_sum", "domain", "n_bytes"]
    np.testing.assert_array_equal(run.docs["loss_sum"].to_numpy(), docs["loss_sum"].to_numpy())

    docs.to_csv(tmp_path / "sidecar.csv", index=False)
    (tmp_path / "sidecar.csv.json").write_text(json.dumps({"arm": "gatedv", "seed": 8, "step": 32768}))
    run = read_loss_file(tmp_path / "sidecar.csv")
    assert (run.arm, run.seed, run.meta["step"]) == ("gatedv", 8, 32768)


def test_metadata_conflicts_and_given_values(tmp_path):
    docs_frame().assign(arm="baseline", seed=7).to_csv(tmp_path / "run.csv", index=False)
    (tmp_path / "run.csv.json").write_text(json.dumps({"seed": 9}))
    with pytest.raises(InputError, match="seed is 9 in one place and 7 in another"):
        read_loss_file(tmp_path / "run.csv")
    docs_frame().to_csv(tmp_path / "bare.csv", index=False)
    with pytest.raises(InputError, match="no 'arm' recorded"):
        read_loss_file(tmp_path / "bare.csv")
    run = read_loss_file(tmp_path / "bare.csv", arm="gatedv", seed=3)
    assert (run.arm, run.seed) == ("gatedv", 3)
    docs_frame().assign(arm="baseline", seed=7).to_csv(tmp_path / "named.csv", index=False)
    with pytest.raises(InputError, match="arm is 'baseline' in one place and 'gatedv' in another"):
        read_loss_file(tmp_path / "named.csv", arm="gatedv")
    docs_frame().assign(arm="baseline", seed=1.5).to_csv(tmp_path / "fractional.csv", index=False)
    with pytest.raises(InputError, match="seed: 1.5 is not an integer"):
        read_loss_file(tmp_path / "fractional.csv")


def test_seeds_are_read_and_written_exactly_as_int64(tmp_path):
    """Seeds beyond 2**53 keep every digit; a seed that is no integer in 0..2**63 − 1 names its file and field."""
    big = 2**53 + 1
    docs_frame().assign(arm="baseline", seed=big).to_csv(tmp_path / "big.csv", index=False)
    (tmp_path / "big.csv.json").write_text(json.dumps({"seed": big - 1}))
    with pytest.raises(InputError, match=f"seed is {big - 1} in one place and {big} in another"):
        read_loss_file(tmp_path / "big.csv")
    (tmp_path / "big.csv.json").unlink()
    assert read_loss_file(tmp_path / "big.csv").seed == big
    runs = read_long_table(_write_long(tmp_path, long_table().assign(seed=lambda f: f["seed"] + big)))
    assert sorted({run.seed for run in runs}) == [big, big + 1]
    write_loss_file(tmp_path / "big.parquet", docs_frame(), {"arm": "gatedv", "seed": str(2**63 - 1)})
    assert pq.read_schema(tmp_path / "big.parquet").metadata[b"seed"] == str(2**63 - 1).encode()
    assert read_loss_file(tmp_path / "big.parquet").seed == 2**63 - 1
    for seed, message in ((1e30, "1e+30 is not an integer from 0 to"), (True, "True is not an integer from 0 to"),
                          (-1, "-1 is not an integer from 0 to"), (2**63, f"{2**63} is not an integer from 0 to"),
                          (float(2**53 + 2), "is a float beyond 2**53")):
        path = tmp_path / "bad.parquet"
        write_loss_file(path, docs_frame(), {"arm": "gatedv", "seed": 1})
        table = pq.read_table(path)
        metadata = {**table.schema.metadata, b"seed": json.dumps(seed).encode()}
        del metadata[b"content_sha256"]  # a file of another tool, which records no hash of its content
        pq.write_table(table.replace_schema_metadata(metadata), path)
        with pytest.raises(InputError, match=f"^{re.escape(f'{path}: seed: ')}.*{re.escape(message)}"):
            read_loss_file(path)
        with pytest.raises(InputError, match=f"metadata seed: .*{re.escape(message)}"):
            write_loss_file(path, docs_frame(), {"arm": "gatedv", "seed": seed})


def _write_long(folder, table: pd.DataFrame):
    path = folder / "long.csv"
    table.to_csv(path, index=False)
    return path


def long_table(n_seeds: int = 2) -> pd.DataFrame:
    return pd.concat([docs_frame(seed=seed).assign(arm=arm, seed=seed, lr=lr)
                      for arm, lr in (("baseline", 0.001), ("gatedv", 0.002)) for seed in range(n_seeds)])


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_long_table_splits_into_runs(tmp_path, suffix):
    table = long_table()
    path = tmp_path / f"long.{suffix}"
    table.to_csv(path, index=False) if suffix == "csv" else table.to_parquet(path, index=False)
    runs = read_long_table(path)
    assert [(run.arm, run.seed) for run in runs] == [("baseline", 0), ("baseline", 1), ("gatedv", 0), ("gatedv", 1)]
    assert runs[3].source == f"{path}[arm=gatedv,seed=1]" and runs[3].meta["lr"] == 0.002
    np.testing.assert_allclose(runs[3].docs["loss_sum"], docs_frame(seed=1)["loss_sum"], rtol=0, atol=0)
    assert len({run.sha256 for run in runs}) == 1
    with pytest.raises(InputError, match="holds 4 runs"):
        read_loss_file(path)


def test_long_table_errors(tmp_path):
    docs_frame().to_csv(tmp_path / "plain.csv", index=False)
    with pytest.raises(InputError, match="long table needs the columns arm and seed; missing arm, seed"):
        read_long_table(tmp_path / "plain.csv")
    table = long_table()
    table.iloc[0, table.columns.get_loc("lr")] = 0.5  # lr must be constant within a run
    table.to_csv(tmp_path / "mixed.csv", index=False)
    with pytest.raises(InputError, match=r"mixed.csv\[arm=baseline,seed=0\]: column 'lr' is metadata"):
        read_long_table(tmp_path / "mixed.csv")


def test_directories_are_searched_for_loss_files_only(tmp_path):
    for arm in ("baseline", "gatedv"):
        write_loss_file(tmp_path / arm / "run1" / "dev.parquet", docs_frame(),
                        {"arm": arm, "seed": 1, "eval_set": "dev"})
        write_loss_file(tmp_path / arm / "run1" / "heldout.parquet", docs_frame(),
                        {"arm": arm, "seed": 1, "eval_set": "heldout"})
        pd.DataFrame({"arm": [arm], "seed": [1], "lr": [0.1], "step": [0], "dev_nll": [4.0]}).to_csv(
            tmp_path / arm / "run1" / "curve.csv", index=False)
    pd.DataFrame({"doc_id": ["a"], "tokens": [[1, 2]]}).to_parquet(tmp_path / "evalset.parquet")
    runs = read_loss_inputs([tmp_path])
    assert sorted((run.arm, run.eval_set) for run in runs) == [
        ("baseline", "dev"), ("baseline", "heldout"), ("gatedv", "dev"), ("gatedv", "heldout")]
    assert [run.arm for run in select_runs(runs, arm="gatedv", eval_set="dev")] == ["gatedv"]
    with pytest.raises(InputError, match="no run with arm 'q-silu'.*arms found: baseline, gatedv"):
        select_runs(runs, arm="q-silu")
    with pytest.raises(InputError, match="no loss files"):
        (tmp_path / "empty").mkdir()
        read_loss_inputs([tmp_path / "empty"])


def test_files_from_other_writers(tmp_path):
    """A plain pandas Parquet file with arm and seed columns and integer doc ids is a loss file."""
    frame = pd.DataFrame({"doc_id": [3, 1, 2], "n_targets": [10, 20, 30], "loss_sum": [1.0, 2.0, 3.0],
                          "arm": "theirs", "seed": 5})
    frame.to_parquet(tmp_path / "theirs.parquet")
    run = read_loss_file(tmp_path / "theirs.parquet")
    assert (run.arm, run.seed, list(run.docs["doc_id"])) == ("theirs", 5, ["3", "1", "2"])
    (tmp_path / "theirs.txt").write_text("doc_id,n_targets,loss_sum\n")
    with pytest.raises(InputError, match="not a loss file"):
        read_loss_file(tmp_path / "theirs.txt")


@pytest.mark.parametrize(("config", "message"), [([1], "config: expected a JSON object, got [1]"),
                                                  ({"d_model": "x"}, "config.d_model: 'x' is not an integer >= 1")])
def test_a_config_of_the_wrong_kind_names_the_file_and_field(tmp_path, config, message):
    path = tmp_path / "run.csv"
    docs_frame().assign(arm="baseline", seed=7).to_csv(path, index=False)
    (tmp_path / "run.csv.json").write_text(json.dumps({"config": config}))
    with pytest.raises(InputError, match=f"^{re.escape(f'{path}: {message}')}$"):
        read_loss_file(path)


@pytest.mark.parametrize(("key", "value"), [("arm", "  "), ("eval_set", "")])
def test_a_blank_arm_or_evaluation_set_is_refused(tmp_path, key, value):
    """Every table names and groups runs by these: a blank one would be an unnamed row or set."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "run.parquet"
    meta = {"arm": "a", "seed": 1, "eval_set": "dev", key: value}
    table = pa.Table.from_pandas(docs_frame(), preserve_index=False)
    pq.write_table(table.replace_schema_metadata({k: json.dumps(v) for k, v in meta.items()}), path)
    with pytest.raises(InputError, match=f"^{path}: {key} {value!r} is blank; name it$"):
        read_loss_file(path)
