"""Training windows: a pure function of (seed, update), uniform over eligible starts, inside one document."""

import json
import shutil

import numpy as np
import pytest
import torch
from scipy import stats

from gatedv_stats.core.errors import InputError
from gatedv_stats.core.validation import MAX_SEED
from trainer.data.prepared import WINDOW, PreparedData, WindowSampler


@pytest.fixture(scope="module")
def data(prepared_data):
    return PreparedData.open(prepared_data)


def test_batches_are_a_function_of_seed_and_update_only(data, prepared_data):
    first = data.sampler(7)
    # Another run (another variant, another process) opens the same directory on its own.
    second = PreparedData.open(prepared_data).sampler(7)
    torch.manual_seed(123)
    np.random.seed(123)
    expected = [first.batch(update, 8) for update in range(5)]
    # Global RNG state (which model building and training advance) must not matter, nor the call order.
    torch.manual_seed(999)
    np.random.seed(999)
    torch.randn(1000)
    for update in (4, 2, 0, 3, 1):
        assert torch.equal(second.batch(update, 8), expected[update])
    assert expected[0].shape == (8, WINDOW) and expected[0].dtype == torch.int64
    assert not torch.equal(expected[0], expected[1])
    assert not torch.equal(data.sampler(8).batch(0, 8), expected[0])


def test_the_largest_seed_draws_its_own_reproducible_batches(data, prepared_data):
    batches = [data.sampler(MAX_SEED).batch(update, 8) for update in range(2)]
    again = PreparedData.open(prepared_data).sampler(MAX_SEED)
    assert all(torch.equal(again.batch(update, 8), batch) for update, batch in enumerate(batches))
    assert not torch.equal(data.sampler(MAX_SEED - 1).batch(0, 8), batches[0])


def test_resume_at_any_update_and_batch_prefixes(data):
    sampler = data.sampler(3)
    late = sampler.batch(10_000, 8)  # no replay of updates 0..9999 needed
    for update in range(3):
        sampler.batch(update, 8)
    assert torch.equal(data.sampler(3).batch(10_000, 8), late)
    # A smaller batch of the same update is a prefix of a larger one (data-parallel ranks slice the global batch).
    assert torch.equal(sampler.batch(10_000, 4), late[:4])


def test_windows_lie_inside_one_document_and_match_the_store(data):
    offsets = np.load(data.path / "train_docs.npy")
    tokens = np.fromfile(data.path / "train.bin", dtype=np.uint16)
    sampler = data.sampler(11)
    for update in range(20):
        docs, starts = sampler.starts(update, 16)
        assert (starts >= offsets[docs]).all()
        assert (starts + WINDOW <= offsets[docs + 1]).all()
        batch = sampler.batch(update, 16).numpy()
        for row, start in enumerate(starts):
            assert (batch[row] == tokens[start:start + WINDOW]).all()
    assert batch.max() < data.vocab_size


def test_starts_are_uniform_over_all_eligible_starts():
    lengths = [257, 300, 100, 0, 260, 256]  # eligible starts: 1, 44, 0, 0, 4, 0
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    tokens = np.arange(offsets[-1], dtype=np.uint16)
    sampler = WindowSampler(tokens, offsets, seed=5)
    eligible = [offsets[d] + s for d, n in enumerate(lengths) for s in range(n) if s + WINDOW <= n]
    assert sampler.n_windows == len(eligible) == 49
    drawn = np.concatenate([sampler.starts(update, 64)[1] for update in range(200)])
    values, counts = np.unique(drawn, return_counts=True)
    assert values.tolist() == eligible  # every eligible start occurs, nothing else does
    # 12,800 draws over 49 starts: a chi-square test of uniformity (deterministic given the seed).
    assert stats.chisquare(counts).pvalue > 1e-3


def test_sampler_rejects_stores_without_windows_and_bad_arguments():
    with pytest.raises(InputError, match="no training window"):
        WindowSampler(np.zeros(300, np.uint16), np.array([0, 100, 300]), seed=0)
    sampler = WindowSampler(np.zeros(300, np.uint16), np.array([0, 300]), seed=0)
    for seed in (-1, MAX_SEED + 1):
        with pytest.raises(InputError, match=f"seed: must be an integer from 0 to {MAX_SEED}"):
            WindowSampler(np.zeros(300, np.uint16), np.array([0, 300]), seed=seed)
    with pytest.raises(InputError, match="update >= 0"):
        sampler.batch(-1, 8)


def test_open_rejects_what_is_not_a_data_directory(tmp_path, data):
    with pytest.raises(InputError, match="not a prepared data directory"):
        PreparedData.open(tmp_path)
    (tmp_path / "manifest.json").write_text("{}")
    with pytest.raises(InputError, match="not a gatedv-data-2 manifest"):
        PreparedData.open(tmp_path)


@pytest.mark.parametrize("write, message", [
    (lambda path: path.write_bytes(b"junk\n"), "not a readable .npy array"),
    (lambda path: np.save(path, np.array([0, "x"], dtype=object)), "not a readable .npy array"),
    (lambda path: path.write_bytes(path.read_bytes()[:-4]), "not a readable .npy array"),
    (lambda path: np.save(path, np.array([0.0, 300.0])), "not a valid offsets array"),
])
def test_corrupt_offsets_file_is_refused(tmp_path, prepared_data, write, message):
    copy = tmp_path / "data"
    shutil.copytree(prepared_data, copy)
    write(copy / "train_docs.npy")
    with pytest.raises(InputError, match=r"train_docs.npy: damaged: its sha256 .* is not the one .*manifest.json"):
        PreparedData.open(copy).train_offsets  # against the hash the manifest records
    manifest = json.loads((copy / "manifest.json").read_text())
    del manifest["content_sha256"], manifest["train"]["offsets_sha256"]  # as a directory prepared before they were
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match=rf"train_docs.npy: {message}"):
        PreparedData.open(copy).train_offsets
