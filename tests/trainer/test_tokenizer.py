"""Byte-level BPE: exact size, lossless round trip of any UTF-8 text, exact byte lengths, size checks."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models, pre_tokenizers
from typer.testing import CliRunner

from cli import app
from gatedv_stats.core.errors import InputError
from trainer.data.prepared import PreparedData
from trainer.data.tokenizer import encode_batch, load_tokenizer, save_tokenizer, token_byte_lengths, train_tokenizer


@pytest.fixture(scope="module")
def stdlib_tokenizer(prepared_data):
    return load_tokenizer(PreparedData.open(prepared_data).tokenizer_path)


@pytest.fixture(scope="module")
def stdlib_byte_lengths(stdlib_tokenizer):
    return token_byte_lengths(stdlib_tokenizer)


def test_prepared_tokenizer_has_exactly_8192_entries(prepared_data):
    data = PreparedData.open(prepared_data)
    tokenizer = Tokenizer.from_file(str(data.tokenizer_path))
    assert tokenizer.get_vocab_size(with_added_tokens=True) == data.vocab_size == 8192
    assert sorted(tokenizer.get_vocab().values()) == list(range(8192))


def test_training_reaches_the_exact_size_and_is_deterministic():
    texts = [f"line {i}: the quick brown fox number {i * 7919 % 1000} jumps" for i in range(400)]
    first = train_tokenizer(texts, 400)
    second = train_tokenizer(iter(texts), 400)
    assert first.get_vocab_size(with_added_tokens=True) == 400
    assert first.to_str() == second.to_str()


def test_too_little_text_is_an_input_error():
    with pytest.raises(InputError, match=r"too little text to train a 8192-entry BPE \(it stops at \d+ entries\)"):
        train_tokenizer(["hello world"] * 3, 8192)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_round_trip_of_arbitrary_utf8_text(stdlib_tokenizer, stdlib_byte_lengths, text):
    ids = encode_batch(stdlib_tokenizer, [text])[0]
    assert stdlib_tokenizer.decode(ids) == text
    # Every token stands for an exact byte string: the byte lengths add up to the text's UTF-8 length.
    assert int(stdlib_byte_lengths[ids].sum()) == len(text.encode("utf-8"))


def test_token_byte_lengths_match_single_token_decoding(stdlib_tokenizer, stdlib_byte_lengths):
    lengths = stdlib_byte_lengths
    # Tokens that decode to complete characters on their own: the decoded text's UTF-8 length is the byte length.
    checked = 0
    for token_id in range(8192):
        text = stdlib_tokenizer.decode([token_id])
        if "\ufffd" not in text:
            assert len(text.encode("utf-8")) == lengths[token_id], token_id
            checked += 1
    assert checked > 8000


def test_loading_checks_size_and_byte_level(tmp_path, stdlib_tokenizer):
    path = tmp_path / "tokenizer.json"
    save_tokenizer(stdlib_tokenizer, path)
    assert load_tokenizer(path, 8192).to_str() == stdlib_tokenizer.to_str()
    with pytest.raises(InputError, match=r"has 8192 entries, expected 4096"):
        load_tokenizer(path, 4096)
    word_level = Tokenizer(models.WordLevel({chr(0x4E00 + i): i for i in range(300)}, unk_token=chr(0x4E00)))
    word_level.pre_tokenizer = pre_tokenizers.Whitespace()
    other = tmp_path / "word.json"
    word_level.save(str(other))
    with pytest.raises(InputError, match=r"not a byte-level token"):
        load_tokenizer(other, 300)
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    with pytest.raises(InputError, match=r"garbage.json: not a readable tokenizer.json"):
        load_tokenizer(garbage)


def test_cli_rejects_a_tokenizer_of_the_wrong_size(tmp_path, web_corpus):
    small = train_tokenizer([record["text"] for record in web_corpus["records"]], 300)
    path = tmp_path / "small.json"
    save_tokenizer(small, path)
    result = CliRunner().invoke(app, ["prepare", str(web_corpus["jsonl"]), "--out", str(tmp_path / "data"),
                                      "--tokenizer", str(path)])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: {path}: the tokenizer has 300 entries, expected 8192 (see --vocab-size)")
    assert not (tmp_path / "data" / "manifest.json").exists()
