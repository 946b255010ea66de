"""Byte-level BPE with an exact vocabulary size (docs/method.md §3), trained or loaded with the `tokenizers`
library."""

from __future__ import annotations

import os
from collections.abc import Iterable
from functools import lru_cache

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from gatedv_stats.core.atomic import write_text_atomic
from gatedv_stats.core.errors import InputError
from gatedv_stats.core.files import file_sha256

DEFAULT_VOCAB_SIZE = 8192
MAX_VOCAB_SIZE = 2**16  # token ids are stored as uint16


def train_tokenizer(texts: Iterable[str], vocab_size: int = DEFAULT_VOCAB_SIZE, *, source: str = "training text",
                    length: int | None = None) -> Tokenizer:
    """Train a byte-level BPE with exactly `vocab_size` entries (256 bytes + merges) on `texts`."""
    check_vocab_size(vocab_size)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False, special_tokens=[])
    tokenizer.train_from_iterator(texts, trainer, length=length)
    reached = tokenizer.get_vocab_size(with_added_tokens=True)
    if reached != vocab_size:
        raise InputError(f"{source}: too little text to train a {vocab_size}-entry BPE (it stops at {reached} "
                         "entries); give a larger corpus, a --tokenizer text or a smaller --vocab-size")
    return tokenizer


def load_tokenizer(path: str | os.PathLike, vocab_size: int = DEFAULT_VOCAB_SIZE) -> Tokenizer:
    """Load a `tokenizer.json`, checking that it is a byte-level BPE with exactly `vocab_size` entries."""
    check_vocab_size(vocab_size)
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as error:  # tokenizers raises plain Exception for unreadable or malformed files
        raise InputError(f"{path}: not a readable tokenizer.json ({str(error).splitlines()[0]})") from None
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    if size != vocab_size:
        raise InputError(f"{path}: the tokenizer has {size} entries, expected {vocab_size} (see --vocab-size)")
    token_byte_lengths(tokenizer, source=str(path))
    return tokenizer


def save_tokenizer(tokenizer: Tokenizer, path: str | os.PathLike) -> str:
    """Write `tokenizer.json` atomically; return the SHA-256 of its bytes."""
    text = tokenizer.to_str()
    write_text_atomic(path, text)
    return file_sha256(path)


def encode_batch(tokenizer: Tokenizer, texts: list[str]) -> list[list[int]]:
    """Token ids of each text, encoded in parallel by the library."""
    return [encoding.ids for encoding in tokenizer.encode_batch_fast(texts, add_special_tokens=False)]


def token_bytes(tokenizer: Tokenizer, *, source: str = "tokenizer") -> list[bytes]:
    """The exact bytes each token id stands for (byte-level tokens are byte strings in GPT-2's alphabet)."""
    byte_of = _byte_of_char()
    table = [b""] * tokenizer.get_vocab_size(with_added_tokens=True)
    for token, token_id in tokenizer.get_vocab(with_added_tokens=True).items():
        if any(char not in byte_of for char in token):
            raise InputError(f"{source}: token {token!r} is not a byte-level token; expected a byte-level BPE")
        table[token_id] = bytes(byte_of[char] for char in token)
    return table


def token_byte_lengths(tokenizer: Tokenizer, *, source: str = "tokenizer") -> np.ndarray:
    """(V,) int64: the number of UTF-8 bytes each token stands for."""
    return np.asarray([len(piece) for piece in token_bytes(tokenizer, source=source)], dtype=np.int64)


def check_vocab_size(vocab_size: int) -> None:
    if not 256 < vocab_size <= MAX_VOCAB_SIZE:
        raise InputError(f"--vocab-size: must be between 257 and {MAX_VOCAB_SIZE}, got {vocab_size}")


@lru_cache(maxsize=1)
def _byte_of_char() -> dict[str, int]:
    """The inverse of the byte-level alphabet: printable stand-in character -> byte (GPT-2's mapping)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    shift = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + shift)
            shift += 1
    return {chr(char): byte for byte, char in zip(printable, chars)}


__all__ = ["DEFAULT_VOCAB_SIZE", "encode_batch", "load_tokenizer", "save_tokenizer", "token_byte_lengths",
           "token_bytes", "train_tokenizer"]
