"""A prepared data directory (written by `trainer.data.prepare`): evaluation sets and the training-window sampler."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from numpy.typing import ArrayLike

from gatedv_stats.core.atomic import atomic_file
from gatedv_stats.core.errors import InputError, ParameterError
from gatedv_stats.core.validation import check_seed
from trainer.data.recorded import PREPARE_AGAIN, check_manifest, check_recorded_file, format_problem
from trainer.data.tokenizer import load_tokenizer, token_bytes

DEFAULT_CONTEXT = 256  # `gatedv prepare --context`: tokens a model sees per window
WINDOW = DEFAULT_CONTEXT + 1  # 256 inputs + 256 targets (a window is one token longer than its context)
DATA_FORMAT = "gatedv-data-2"  # 2: evaluation sets carry the text of each window
EVAL_SET_NAMES = ("dev", "heldout")
MANIFEST = "manifest.json"
TOKENIZER = "tokenizer.json"
TRAIN_TOKENS = "train.bin"
TRAIN_OFFSETS = "train_docs.npy"
_SAMPLER_STREAM = 0x57494E44  # separates window draws from any other use of the same seed


@dataclass(frozen=True)
class EvalSet:
    """An evaluation set: each document's first window (context + 1 tokens, 257 by default), the UTF-8 bytes of its
    targets and, for models with other tokenizers, the window's text: the context (the first token's text) and the
    target text (the targets' text, exactly `n_bytes` bytes)."""

    name: str
    doc_ids: list[str]
    domains: list[str]
    tokens: np.ndarray  # (N, window) int64
    n_bytes: np.ndarray  # (N,) int64
    sha256: str
    context_texts: list[str] | None = None
    target_texts: list[str] | None = None
    tokenizer_sha256: str | None = None  # the tokenizer that made `tokens`, where the file records it

    def __len__(self) -> int:
        return len(self.doc_ids)

    def to_dict(self) -> dict:
        return {"name": self.name, "documents": len(self), "sha256": self.sha256,
                "target_bytes": int(self.n_bytes.sum())}


WindowTexts = tuple[list[str], list[str]]  # (context texts, target texts)
_TEXT_COLUMNS = ("context_text", "target_text")
_TOKENIZER_KEY = b"tokenizer_sha256"  # Parquet metadata of a set file: the SHA-256 of its tokenizer.json
_INT64_MAX = 2**63 - 1


def window_texts(window_bytes: list[bytes]) -> tuple[str, str] | None:
    """(context text, target text) of a window given each token's bytes: the first token is the context, the
    rest the targets; None when a boundary falls inside a multi-byte character (no exact text exists)."""
    try:
        return window_bytes[0].decode("utf-8"), b"".join(window_bytes[1:]).decode("utf-8")
    except UnicodeDecodeError:
        return None


def eval_set_sha256(doc_ids: list[str], domains: list[str], tokens: np.ndarray, n_bytes: np.ndarray,
                    texts: WindowTexts | None = None) -> str:
    """SHA-256 of an evaluation set's content (ids, domains, tokens, byte counts, window texts when present),
    independent of the file format."""
    digest = hashlib.sha256()
    digest.update(json.dumps([list(doc_ids), list(domains)], ensure_ascii=False).encode("utf-8"))
    digest.update(np.ascontiguousarray(tokens, dtype="<i8").tobytes())
    digest.update(np.ascontiguousarray(n_bytes, dtype="<i8").tobytes())
    if texts is not None:
        digest.update(json.dumps([list(texts[0]), list(texts[1])], ensure_ascii=False).encode("utf-8"))
    return digest.hexdigest()


def write_eval_set(path: str | os.PathLike, name: str, doc_ids: list[str], domains: list[str], tokens: np.ndarray,
                   n_bytes: ArrayLike, texts: WindowTexts | None = None, *,
                   tokenizer_sha256: str | None = None) -> EvalSet:
    """Write an evaluation set as Parquet (doc_id, domain, tokens, n_bytes[, context_text, target_text]),
    atomically; `tokenizer_sha256` (the tokenizer that made `tokens`) goes into the file's metadata."""
    tokens = np.asarray(tokens, dtype=np.int64)
    n_bytes = np.asarray(n_bytes, dtype=np.int64)
    columns = {
        "doc_id": pa.array(doc_ids, pa.string()),
        "domain": pa.array(domains, pa.string()),
        "tokens": pa.FixedSizeListArray.from_arrays(pa.array(tokens.reshape(-1), pa.int64()), tokens.shape[1]),
        "n_bytes": pa.array(n_bytes, pa.int64()),
    }
    if texts is not None:
        _check_texts(path, texts, n_bytes)
        columns |= {column: pa.array(values, pa.string()) for column, values in zip(_TEXT_COLUMNS, texts)}
    metadata = {_TOKENIZER_KEY: tokenizer_sha256.encode("ascii")} if tokenizer_sha256 is not None else None
    with atomic_file(path) as writer:
        pq.write_table(pa.table(columns, metadata=metadata), writer)
    return _eval_set(name, list(doc_ids), list(domains), tokens, n_bytes, texts, tokenizer_sha256)


def read_eval_set(path: str | os.PathLike, name: str | None = None, window: int | None = None) -> EvalSet:
    """Read and validate an evaluation-set Parquet file: windows of `window` tokens (None: of its first row's
    length, at least 2)."""
    path = Path(path)
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as error:
        raise InputError(f"{path}: not a readable evaluation set ({error})") from None
    missing = [column for column in ("doc_id", "domain", "tokens", "n_bytes") if column not in table.column_names]
    if missing:
        raise InputError(f"{path}: missing column(s) {', '.join(missing)}")
    rows = table.num_rows
    if rows == 0:
        raise InputError(f"{path}: the evaluation set holds no document")
    tokens = _token_windows(path, table.column("tokens"), window)
    n_bytes = _byte_counts(path, table.column("n_bytes"))
    doc_ids = _strings(path, table.column("doc_id"), "doc_id")
    domains = _strings(path, table.column("domain"), "domain")
    if len(set(doc_ids)) != rows:
        raise InputError(f"{path}: `doc_id` values are not unique")
    texts = None
    if any(column in table.column_names for column in _TEXT_COLUMNS):
        contexts, targets = (_text_column(table, column) for column in _TEXT_COLUMNS)
        texts = (contexts, targets)
        _check_texts(path, texts, n_bytes)
    recorded = (table.schema.metadata or {}).get(_TOKENIZER_KEY)
    tokenizer_sha256 = recorded.decode("ascii", errors="replace") if recorded is not None else None
    return _eval_set(name or path.stem, doc_ids, domains, tokens, n_bytes, texts, tokenizer_sha256)


def _first_set(values: list) -> int:
    """The number (from 1) of the first row holding a value (1 when none does): the row an error about a column's
    type names."""
    return next((row for row, value in enumerate(values, start=1) if value is not None), 1)


def _token_windows(path: Path, column: pa.ChunkedArray, window: int | None) -> np.ndarray:
    """(N, window) int64: every row of the `tokens` column a list of exactly `window` non-negative integer ids."""
    kind, values = column.type, column.to_pylist()
    if window is None:  # a set file's own length, once its rows are lists
        window = next((max(2, len(ids)) for ids in values[:1] if isinstance(ids, list)), WINDOW)
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)):
        raise InputError(f"{path}: row {_first_set(values)}: `tokens` must be a list of {window} token ids "
                         f"(found {kind})")
    if not pa.types.is_integer(kind.value_type):
        row = next((row for row, ids in enumerate(values) if ids and any(i is not None for i in ids)), 0)
        raise InputError(f"{path}: row {row + 1}: `tokens` must hold integer token ids (found "
                         f"{kind.value_type})")
    for row, ids in enumerate(values):
        if ids is None or len(ids) != window:
            raise InputError(f"{path}: row {row + 1}: `tokens` must hold {window} token ids")
        if None in ids:
            raise InputError(f"{path}: row {row + 1}: `tokens` holds a null at position {ids.index(None)}")
        if min(ids) < 0:
            raise InputError(f"{path}: row {row + 1}: `tokens` holds a negative token id ({min(ids)})")
        if max(ids) > _INT64_MAX:
            raise InputError(f"{path}: row {row + 1}: `tokens` holds token id {max(ids)}, beyond any vocabulary")
    return np.asarray(values, dtype=np.int64)


def _byte_counts(path: Path, column: pa.ChunkedArray) -> np.ndarray:
    """(N,) int64: every row of the `n_bytes` column a positive integer."""
    values = column.to_pylist()
    if not pa.types.is_integer(column.type):
        raise InputError(f"{path}: row {_first_set(values)}: `n_bytes` must be an integer (found "
                         f"{column.type})")
    for row, count in enumerate(values):
        if count is None:
            raise InputError(f"{path}: row {row + 1}: `n_bytes` is null; it must be a positive integer")
        if not 1 <= count <= _INT64_MAX:
            raise InputError(f"{path}: row {row + 1}: `n_bytes` must be a positive integer, got {count}")
    return np.asarray(values, dtype=np.int64)


def _strings(path: Path, column: pa.ChunkedArray, field: str) -> list[str]:
    """Every row of a text column (`doc_id`, `domain`) a string (integers are taken as their decimal text), none
    null."""
    kind, values = column.type, column.to_pylist()
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_integer(kind)):
        raise InputError(f"{path}: row {_first_set(values)}: `{field}` must be a string (found {column.type})")
    if None in values:
        raise InputError(f"{path}: row {values.index(None) + 1}: `{field}` is null; it must be a string")
    return [str(value) for value in values]


def _eval_set(name: str, doc_ids: list[str], domains: list[str], tokens: np.ndarray, n_bytes: np.ndarray,
              texts: WindowTexts | None, tokenizer_sha256: str | None = None) -> EvalSet:
    sha256 = eval_set_sha256(doc_ids, domains, tokens, n_bytes, texts)
    contexts, targets = (None, None) if texts is None else (list(texts[0]), list(texts[1]))
    return EvalSet(name, doc_ids, domains, tokens, n_bytes, sha256, contexts, targets, tokenizer_sha256)


def check_set_tokenizer(path: str | os.PathLike, eval_set: EvalSet, tokenizer_path: Path, tokenizer_sha256: str,
                        vocab_size: int) -> None:
    """An InputError unless the set file `path` was tokenized with the tokenizer `tokenizer_sha256`.

    The tokenizer is the one the file records (in its metadata, or in the manifest of the data directory that
    lists it with the same content); a file that records none is checked by its tokens spelling out its window
    texts under that tokenizer; a file with neither cannot be checked.
    """
    path = Path(path)
    recorded, where = eval_set.tokenizer_sha256, "its metadata"
    if recorded is None:
        recorded, where = _listed_tokenizer(path, eval_set), str(path.parent / MANIFEST)
    if recorded is not None:
        if recorded != tokenizer_sha256:
            raise InputError(f"{path}: tokenized with another tokenizer (sha256 {recorded}, per {where}) than the "
                             f"model's {tokenizer_path} (sha256 {tokenizer_sha256}); evaluate on a set prepared with "
                             "the model's tokenizer")
        return
    if eval_set.context_texts is None or eval_set.target_texts is None:
        return
    table = token_bytes(load_tokenizer(tokenizer_path, vocab_size), source=str(tokenizer_path))
    beyond = np.flatnonzero((eval_set.tokens >= len(table)).any(axis=1))
    if len(beyond):
        raise InputError(f"{path}: row {beyond[0] + 1}: `tokens` holds token id {eval_set.tokens[beyond[0]].max()}, "
                         f"outside the tokenizer's {len(table)} entries")
    for row, ids in enumerate(eval_set.tokens.tolist()):
        text = (eval_set.context_texts[row] + eval_set.target_texts[row]).encode("utf-8")
        if b"".join(table[i] for i in ids) != text:
            raise InputError(f"{path}: row {row + 1}: `tokens` do not spell the window's text under the model's "
                             f"tokenizer {tokenizer_path} (sha256 {tokenizer_sha256}); the set was tokenized with "
                             "another tokenizer")


def _listed_tokenizer(path: Path, eval_set: EvalSet) -> str | None:
    """The tokenizer SHA-256 of the data directory holding `path`, when its manifest lists this very set."""
    try:
        manifest = json.loads((path.parent / MANIFEST).read_text(encoding="utf-8"))
        listed = [entry for entry in manifest["eval_sets"].values()
                  if entry.get("file") == path.name and entry.get("sha256") == eval_set.sha256]
        return str(manifest["tokenizer"]["sha256"]) if listed else None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
        return None  # no manifest of a data directory here: nothing recorded


def _text_column(table: pa.Table, column: str) -> list:
    """A text column's values as read, unchecked; a missing column is None in every row (refused by `_check_texts`)."""
    return table.column(column).to_pylist() if column in table.column_names else [None] * table.num_rows


def _check_texts(path: str | os.PathLike, texts: WindowTexts, n_bytes: np.ndarray) -> None:
    """Every window has a non-empty context text and a target text of exactly `n_bytes` UTF-8 bytes."""
    if any(len(values) != len(n_bytes) for values in texts):
        raise InputError(f"{path}: the window texts do not hold one row per document")
    for row, (context, target) in enumerate(zip(*texts, strict=True)):
        if not isinstance(context, str) or not context:
            raise InputError(f"{path}: row {row + 1}: `context_text` must be a non-empty string")
        if not isinstance(target, str) or len(target.encode("utf-8")) != n_bytes[row]:
            raise InputError(f"{path}: row {row + 1}: `target_text` must hold exactly `n_bytes` ({n_bytes[row]}) "
                             "UTF-8 bytes")


class WindowSampler:
    """Training windows as a pure function of (seed, update): starts uniform over all eligible starts.

    A start s inside a document of length n is eligible when s + window <= n. The generator for an update is
    seeded from (seed, update) alone, so paired runs see identical batches and a resumed run continues at any
    update without replaying earlier ones. A batch of size B is the first B windows of any larger batch of the
    same update, so data-parallel ranks can take slices of the global batch.
    """

    def __init__(self, tokens: np.ndarray, offsets: np.ndarray, seed: int, window: int = WINDOW) -> None:
        self.seed = check_seed(seed, "seed")
        self.window = window
        self._tokens = tokens
        self._offsets = np.asarray(offsets, dtype=np.int64)
        windows = np.maximum(np.diff(self._offsets) - window + 1, 0)
        self._cumulative = np.cumsum(windows)
        self.n_windows = int(self._cumulative[-1]) if len(windows) else 0
        if self.n_windows == 0:
            raise InputError(f"training store: no document holds {window} tokens, so there is no training window")

    def starts(self, update: int, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """(document index, token position in the store) of each window of `update`'s batch."""
        if update < 0 or batch_size < 1:
            raise InputError(f"sampler: need update >= 0 and batch_size >= 1, got {update}, {batch_size}")
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, int(update), _SAMPLER_STREAM])))
        window = rng.integers(0, self.n_windows, size=batch_size, dtype=np.int64)
        doc = np.searchsorted(self._cumulative, window, side="right")
        before = np.where(doc > 0, self._cumulative[np.maximum(doc - 1, 0)], 0)
        return doc, self._offsets[doc] + (window - before)

    def batch(self, update: int, batch_size: int) -> torch.Tensor:
        """(batch_size, window) int64 token windows of update `update` (the global batch)."""
        _, starts = self.starts(update, batch_size)
        windows = self._tokens[starts[:, None] + np.arange(self.window)]
        return torch.from_numpy(windows.astype(np.int64))


@dataclass(frozen=True)
class PreparedData:
    """An opened data directory (see docs/formats.md, "Data directory")."""

    path: Path
    manifest: dict
    manifest_sha256: str

    @classmethod
    def open(cls, path: str | os.PathLike) -> PreparedData:
        path = Path(path)
        manifest_path = path / MANIFEST
        if not manifest_path.is_file():
            raise InputError(f"{path}: not a prepared data directory (no {MANIFEST}; run `gatedv prepare`)")
        raw = manifest_path.read_bytes()
        try:
            manifest = json.loads(raw)
        except ValueError as error:  # not JSON, or not UTF-8
            raise InputError(f"{manifest_path}: invalid JSON ({getattr(error, 'msg', None) or error}); "
                             f"{PREPARE_AGAIN.format(directory=path)}") from None
        found = manifest.get("format") if isinstance(manifest, dict) else None
        if found != DATA_FORMAT:
            raise InputError(format_problem(manifest_path, found, DATA_FORMAT))
        manifest = check_manifest(manifest, manifest_path)
        for name in (TOKENIZER, TRAIN_TOKENS, TRAIN_OFFSETS, *(f"{set_name}.parquet" for set_name in EVAL_SET_NAMES)):
            if not (path / name).is_file():
                raise InputError(f"{path / name}: missing from the prepared data directory")
        check_recorded_file(path, manifest_path, TOKENIZER, manifest["tokenizer"]["sha256"])
        return cls(path, manifest, hashlib.sha256(raw).hexdigest())

    @property
    def tokenizer_path(self) -> Path:
        return self.path / TOKENIZER

    @property
    def vocab_size(self) -> int:
        return int(self.manifest["tokenizer"]["vocab_size"])

    @property
    def tokenizer_sha256(self) -> str:
        return str(self.manifest["tokenizer"]["sha256"])

    @property
    def context(self) -> int:
        """Tokens a model sees per window (`gatedv prepare --context`; 256 when the manifest records none)."""
        return int(self.manifest.get("context", DEFAULT_CONTEXT))

    def eval_set(self, name_or_path: str | os.PathLike) -> EvalSet:
        """The `dev` or `heldout` set of this directory (checked against the manifest), or a set file by path."""
        if str(name_or_path) in EVAL_SET_NAMES:
            name = str(name_or_path)
            again = PREPARE_AGAIN.format(directory=self.path)
            try:
                eval_set = read_eval_set(self.path / f"{name}.parquet", name, self.context + 1)
            except InputError as error:  # truncated, emptied, damaged beyond reading
                raise InputError(f"{error}; {again}") from None
            if eval_set.sha256 != self.manifest["eval_sets"][name]["sha256"]:
                raise InputError(f"{self.path / f'{name}.parquet'}: content does not match the manifest's SHA-256 "
                                 f"(damaged); {again}")
            return eval_set
        if not os.path.exists(name_or_path):
            raise ParameterError("eval_set", f"{str(name_or_path)!r} is neither a set of {self.path} "
                                             f"({', '.join(EVAL_SET_NAMES)}) nor an evaluation-set file")
        return read_eval_set(name_or_path)

    @cached_property
    def train_offsets(self) -> np.ndarray:
        """(D+1,) int64 document offsets into the training store."""
        path = self.path / TRAIN_OFFSETS
        check_recorded_file(self.path, self.path / MANIFEST, TRAIN_OFFSETS,
                            self.manifest["train"].get("offsets_sha256"))
        try:
            offsets = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as error:
            raise InputError(f"{path}: not a readable .npy array ({str(error).split('. ')[0]})") from None
        if (not isinstance(offsets, np.ndarray) or offsets.dtype.kind not in "iu" or offsets.ndim != 1
                or len(offsets) < 2 or offsets[0] != 0 or (np.diff(offsets) < 0).any()):
            raise InputError(f"{path}: not a valid offsets array")
        return offsets.astype(np.int64)

    @cached_property
    def train_tokens(self) -> np.ndarray:
        """The training store, memory-mapped (uint16)."""
        path = self.path / TRAIN_TOKENS
        check_recorded_file(self.path, self.path / MANIFEST, TRAIN_TOKENS, self.manifest["train"].get("sha256"))
        expected = int(self.train_offsets[-1])
        if path.stat().st_size != 2 * expected:
            raise InputError(f"{path}: holds {path.stat().st_size // 2} tokens, the offsets say {expected}")
        return np.memmap(path, dtype=np.uint16, mode="r", shape=(expected,))

    def sampler(self, seed: int) -> WindowSampler:
        return WindowSampler(self.train_tokens, self.train_offsets, seed, self.context + 1)


__all__ = ["DATA_FORMAT", "DEFAULT_CONTEXT", "WINDOW", "EvalSet", "PreparedData", "WindowSampler",
           "check_set_tokenizer", "eval_set_sha256", "read_eval_set", "window_texts", "write_eval_set"]
