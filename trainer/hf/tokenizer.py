"""A tokenizer as scoring sees it: how it encodes text, its beginning-of-sequence token, its size and the SHA-256
that names it in a loss file. From a `transformers` tokenizer, a `tokenizers.Tokenizer` or the data directory's
own `tokenizer.json`.

The SHA-256 of a tokenizer in memory is that of the files it would be saved as: a `transformers` tokenizer's
`save_pretrained` files (what `evaluate --hf` hashes in a model directory), a `tokenizers.Tokenizer`'s
`tokenizer.json` as `gatedv prepare` writes it. So a model scored in memory and its saved copy record one
tokenizer."""

from __future__ import annotations

import hashlib
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gatedv_stats.core.errors import ParameterError
from gatedv_stats.core.files import files_sha256
from trainer.data.prepared import PreparedData
from trainer.data.tokenizer import encode_batch
from trainer.hf.model import TOKENIZER_JSON, tokenizer_files


@dataclass(frozen=True)
class TextTokenizer:
    """What scoring needs of a tokenizer."""

    encode: Callable[[list[str]], list[list[int]]]  # token ids of each text, without special tokens
    bos: list[int]  # [BOS] when the tokenizer defines a beginning-of-sequence token, else []
    size: int  # its entries, added tokens included
    sha256: str
    files: list[str]  # the names of the files that define it

    @property
    def bos_token_id(self) -> int | None:
        return self.bos[0] if self.bos else None


def from_transformers(tokenizer, sha256: str, files: list[str]) -> TextTokenizer:
    """A `transformers` tokenizer, named by the SHA-256 of its files."""

    def encode(texts: list[str]) -> list[list[int]]:
        if not texts:
            return []
        return [list(ids) for ids in tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]]

    bos = getattr(tokenizer, "bos_token_id", None)
    return TextTokenizer(encode, [int(bos)] if bos is not None else [], len(tokenizer), sha256, files)


def from_tokenizers(tokenizer, sha256: str | None = None) -> TextTokenizer:
    """A `tokenizers.Tokenizer` (a byte-level BPE has no BOS), named by the SHA-256 of its `tokenizer.json`."""
    if sha256 is None:
        sha256 = hashlib.sha256(tokenizer.to_str().encode("utf-8")).hexdigest()
    return TextTokenizer(lambda texts: encode_batch(tokenizer, list(texts)) if texts else [], [],
                         tokenizer.get_vocab_size(with_added_tokens=True), sha256, [TOKENIZER_JSON])


def data_tokenizer(prepared: PreparedData) -> TextTokenizer:
    """The data directory's own tokenizer, which made its evaluation sets' token ids (opening the directory checked
    the file against its manifest)."""
    from tokenizers import Tokenizer

    return from_tokenizers(Tokenizer.from_file(str(prepared.tokenizer_path)), prepared.tokenizer_sha256)


def in_memory_tokenizer(tokenizer) -> TextTokenizer:
    """A tokenizer object in memory: a `transformers` tokenizer (hashed as `save_pretrained` writes it) or a
    `tokenizers.Tokenizer`; anything else is refused naming its type."""
    from tokenizers import Tokenizer

    if isinstance(tokenizer, Tokenizer):
        return from_tokenizers(tokenizer)
    transformers = sys.modules.get("transformers")  # a transformers tokenizer means transformers is imported
    if transformers is not None and isinstance(tokenizer, transformers.PreTrainedTokenizerBase):
        with tempfile.TemporaryDirectory(prefix="gatedv-tokenizer-") as saved:
            tokenizer.save_pretrained(saved)
            paths = tokenizer_files(Path(saved))
            if not paths:
                raise ParameterError("tokenizer", f"{type(tokenizer).__name__} saves no tokenizer.json nor a slow "
                                                  "tokenizer's vocabulary files, so it cannot be named by a hash")
            return from_transformers(tokenizer, files_sha256(paths), [path.name for path in paths])
    raise ParameterError("tokenizer", "must be a transformers tokenizer, a tokenizers.Tokenizer or None (the data "
                                      f"directory's own), got {type(tokenizer).__module__}.{type(tokenizer).__name__}")


__all__ = ["TextTokenizer", "data_tokenizer", "from_tokenizers", "from_transformers", "in_memory_tokenizer"]
