"""The window text of the evaluation sets (docs/method.md §3): exactly the bytes of the stored tokens, and documents
whose window would cut a multi-byte character are passed over."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from gatedv_stats.core.errors import InputError
from trainer.data.prepare import prepare
from trainer.data.prepared import PreparedData, read_eval_set
from trainer.data.tokenizer import load_tokenizer, save_tokenizer, token_bytes, train_tokenizer


@pytest.fixture(scope="module")
def byte_data(tmp_path_factory):
    """16 domain groups of .txt files under a 257-entry BPE whose one merge ("QZ") never occurs: one token per
    byte. Each group holds a usable document and two whose 257-token window cuts a character: an "é" as the
    first (context) token, or a "🙂" across the window's end."""
    root = tmp_path_factory.mktemp("byte-data")
    tokenizer = root / "tokenizer.json"
    save_tokenizer(train_tokenizer(["QZ" * 50], 257), tokenizer)
    documents = {"good": "c" * 300 + " caf\u00e9\n", "context": "\u00e9" + "a" * 300,
                 "end": "a" * 256 + "\U0001f642" * 20}
    for group in range(16):
        for name, text in documents.items():
            path = root / "corpus" / f"g{group:02d}" / f"{name}.txt"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    prepare(str(root / "corpus"), root / "data", eval_docs=2, tokenizer=str(tokenizer), vocab_size=257, progress=False)
    return PreparedData.open(root / "data"), load_tokenizer(tokenizer, 257)


def test_window_text_is_the_bytes_of_the_stored_tokens_and_never_cuts_a_character(byte_data):
    data, bpe = byte_data
    pieces = token_bytes(bpe)
    for name in ("dev", "heldout"):
        eval_set = data.eval_set(name)
        assert len(eval_set) == 2 and all(doc_id.endswith("/good.txt") for doc_id in eval_set.doc_ids)
        for row, tokens in enumerate(eval_set.tokens):
            assert eval_set.context_texts[row].encode("utf-8") == pieces[tokens[0]]
            assert eval_set.target_texts[row].encode("utf-8") == b"".join(pieces[token] for token in tokens[1:])
            assert len(eval_set.target_texts[row].encode("utf-8")) == eval_set.n_bytes[row] == 256
    # Two of every three documents of a group cut a character: each walked group passes over what it draws of them.
    assert data.manifest["counts"]["eval_draws_splitting_a_character"] >= 1


def test_a_target_text_that_disagrees_with_its_byte_count_is_refused(byte_data, tmp_path):
    data, _ = byte_data
    table = pq.read_table(data.path / "dev.parquet")
    texts = table.column("target_text").to_pylist()
    column = table.column_names.index("target_text")
    pq.write_table(table.set_column(column, "target_text", [[texts[0] + "!", *texts[1:]]]), tmp_path / "dev.parquet")
    with pytest.raises(InputError, match=r"dev.parquet: row 1: `target_text` must hold exactly `n_bytes` \(256\)"):
        read_eval_set(tmp_path / "dev.parquet")


def test_a_directory_of_another_data_format_is_refused_with_the_fix(byte_data, tmp_path):
    data, _ = byte_data
    for found, message in (("gatedv-data-1", "prepared by an older gatedv (gatedv-data-1); run gatedv prepare --force"),
                           ("gatedv-data-9", "prepared by a newer gatedv (gatedv-data-9); upgrade gatedv-stats"),
                           ("other", "not a gatedv-data-2 manifest")):
        copy = tmp_path / found
        copy.mkdir()
        for item in data.path.iterdir():
            (copy / item.name).write_bytes(item.read_bytes())
        (copy / "manifest.json").write_text(json.dumps({**data.manifest, "format": found}))
        with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
            PreparedData.open(copy)
