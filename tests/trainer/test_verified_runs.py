"""What a run reads is verified: the checkpoint against the SHA-256 run.json records for it (written before the
checkpoint replaces the previous one, which is kept until the new one is written, read back and recorded), and the
training token store, its offsets and the tokenizer against the data manifest. A mismatch is one `error:` line
naming the file and what to do, exit 2, before training resumes or a loss file is written."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from gatedv_stats.core.files import file_sha256
from gatedv_stats.io.runrecords import read_run_record
from helpers import assert_input_error, invoke
from trainer.run.checkpoint import load_checkpoint

pytestmark = pytest.mark.slow

TRAIN = ("--config", "tiny", "--seed", "1", "--batch-size", "2", "--updates", "4", "--eval-every", "2",
         "--device", "cpu")


def flip(path, offset: int | None = None) -> None:
    """Flip the lowest bit of one byte (the middle one by default)."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2 if offset is None else offset] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.fixture
def data_copy(prepared_data, tmp_path):
    copy = tmp_path / "data"
    shutil.copytree(prepared_data, copy)
    return copy


@pytest.fixture
def trained(data_copy, tmp_path):
    run_dir = tmp_path / "run"
    result = invoke("train", "--data", data_copy, *TRAIN, "--out", run_dir, "--stop-after", "2")
    assert result.exit_code == 0, result.output
    return run_dir


def test_run_json_records_the_checkpoint_and_curve_it_wrote(trained):
    record = read_run_record(trained)
    assert record["checkpoint_sha256"] == file_sha256(trained / "checkpoint.pt")
    assert record["curve_sha256"] == file_sha256(trained / "curve.csv")
    assert record["checkpoint_update"] == 2 and load_checkpoint(trained / "checkpoint.pt").sha256 == \
        record["checkpoint_sha256"]
    assert sorted(path.name for path in trained.iterdir()) == ["checkpoint.pt", "curve.csv", "run.json"]


def test_a_damaged_checkpoint_is_neither_resumed_nor_evaluated(trained, data_copy, tmp_path):
    checkpoint = trained / "checkpoint.pt"
    flip(checkpoint)
    before = checkpoint.read_bytes()
    line = f"{checkpoint}: damaged: its sha256"
    assert_input_error(invoke("train", "--data", data_copy, *TRAIN, "--out", trained, "--resume"), line,
                       f"{trained / 'run.json'} records", "train the run again")
    assert checkpoint.read_bytes() == before and read_run_record(trained)["checkpoint_update"] == 2
    out = tmp_path / "dev.parquet"
    assert_input_error(invoke("evaluate", checkpoint, "--out", out, "--device", "cpu"), line)
    assert not out.exists()


def test_a_checkpoint_outside_its_run_directory_is_read_as_before(trained, tmp_path):
    copy = tmp_path / "copy.pt"
    shutil.copy(trained / "checkpoint.pt", copy)
    assert load_checkpoint(copy).extra["update"] == 2


@pytest.mark.parametrize("name", ["train.bin", "train_docs.npy", "tokenizer.json"])
def test_a_damaged_data_directory_is_refused_before_training(data_copy, tmp_path, name):
    flip(data_copy / name, offset=(data_copy / name).stat().st_size - 3)
    result = invoke("train", "--data", data_copy, *TRAIN, "--out", tmp_path / "run")
    assert_input_error(result, f"{data_copy / name}: damaged: its sha256", f"{data_copy / 'manifest.json'} records",
                       "gatedv prepare")
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_the_manifest_records_the_offsets_and_streams_the_store_hash(data_copy):
    manifest = json.loads((data_copy / "manifest.json").read_text())
    assert manifest["train"]["sha256"] == hashlib.sha256((data_copy / "train.bin").read_bytes()).hexdigest()
    assert manifest["train"]["offsets_sha256"] == file_sha256(data_copy / "train_docs.npy")
