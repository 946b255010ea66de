"""A prepared data directory (written by `trainer.prepare`): evaluation sets and the training-window sampler."""

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

from gatedv_stats.io.atomic import atomic_path
from gatedv_stats.errors import InputError, ParameterError
from gatedv_stats.stats.validation import check_rng_seed

WINDOW = 257  # 256 inputs + 256 targets
DATA_FORMAT = "gatedv-data-2"  # 2: evaluation sets carry the text of each window
EVAL_SET_NAMES = ("dev", "heldout")
MANIFEST = "manifest.json"
TOKENIZER = "tokenizer.json"
TRAIN_TOKENS = "train.bin"
TRAIN_OFFSETS = "train_docs.npy"
_SAMPLER_STREAM = 0x57494E44  # separates window draws from any other use of the same seed


@dataclass(frozen=True)
class EvalSet:
    """An evaluation set: each document's first window (257 tokens), the UTF-8 bytes of its 256 targets and,
    for models with other tokenizers, the window's text: the context (the first token's text) and the target
    text (the 256 targets' text, exactly `n_bytes` bytes)."""

    name: str
    doc_ids: list[str]
    domains: list[str]
    tokens: np.ndarray  # (N, 257) int64
    n_bytes: np.ndarray  # (N,) int64
    sha256: str
    context_texts: list[str] | None = None
    target_texts: list[str] | None = None

    def __len__(self) -> int:
        return len(self.doc_ids)

    def to_dict(self) -> dict:
        return {"name": self.name, "documents": len(self), "sha256": self.sha256,
                "target_bytes": int(self.n_bytes.sum())}


WindowTexts = tuple[list[str], list[str]]  # (context texts, target texts)
_TEXT_COLUMNS = ("context_text", "target_text")


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
                   n_bytes: np.ndarray, texts: WindowTexts | None = None) -> EvalSet:
    """Write an evaluation set as Parquet (doc_id, domain, tokens, n_bytes[, context_text, target_text]),
    atomically."""
    tokens = np.asarray(tokens, dtype=np.int64)
    n_bytes = np.asarray(n_bytes, dtype=np.int64)
    columns = {
        "doc_id": pa.array(doc_ids, pa.string()),
        "domain": pa.array(domains, pa.string()),
        "tokens": pa.FixedSizeListArray.from_arrays(pa.array(tokens.reshape(-1), pa.int64()), WINDOW),
        "n_bytes": pa.array(n_bytes, pa.int64()),
    }
    if texts is not None:
        _check_texts(path, texts, n_bytes)
        columns |= {column: pa.array(values, pa.string()) for column, values in zip(_TEXT_COLUMNS, texts)}
    with atomic_path(path) as tmp:
        pq.write_table(pa.table(columns), tmp)
    return _eval_set(name, list(doc_ids), list(domains), tokens, n_bytes, texts)


def read_eval_set(path: str | os.PathLike, name: str | None = None) -> EvalSet:
    """Read and validate an evaluation-set Parquet file."""
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
    token_lists = table.column("tokens").to_pylist()
    bad = next((row for row, tokens in enumerate(token_lists) if tokens is None or len(tokens) != WINDOW), None)
    if bad is not None:
        raise InputError(f"{path}: row {bad}: `tokens` must hold {WINDOW} token ids")
    tokens = np.asarray(token_lists, dtype=np.int64)
    n_bytes = table.column("n_bytes").to_numpy(zero_copy_only=False).astype(np.int64)
    doc_ids = [str(value) for value in table.column("doc_id").to_pylist()]
    domains = [str(value) for value in table.column("domain").to_pylist()]
    if len(set(doc_ids)) != rows:
        raise InputError(f"{path}: `doc_id` values are not unique")
    if tokens.min() < 0 or (n_bytes < 1).any():
        raise InputError(f"{path}: negative token ids or non-positive `n_bytes`")
    texts = None
    if any(column in table.column_names for column in _TEXT_COLUMNS):
        texts = tuple(table.column(column).to_pylist() if column in table.column_names else [None] * rows
                      for column in _TEXT_COLUMNS)
        _check_texts(path, texts, n_bytes)
    return _eval_set(name or path.stem, doc_ids, domains, tokens, n_bytes, texts)


def _eval_set(name: str, doc_ids: list[str], domains: list[str], tokens: np.ndarray, n_bytes: np.ndarray,
              texts: WindowTexts | None) -> EvalSet:
    sha256 = eval_set_sha256(doc_ids, domains, tokens, n_bytes, texts)
    if texts is None:
        return EvalSet(name, doc_ids, domains, tokens, n_bytes, sha256)
    return EvalSet(name, doc_ids, domains, tokens, n_bytes, sha256, list(texts[0]), list(texts[1]))


def _check_texts(path: str | os.PathLike, texts: WindowTexts, n_bytes: np.ndarray) -> None:
    """Every window has a non-empty context text and a target text of exactly `n_bytes` UTF-8 bytes."""
    if any(len(values) != len(n_bytes) for values in texts):
        raise InputError(f"{path}: the window texts do not hold one row per document")
    for row, (context, target) in enumerate(zip(*texts, strict=True)):
        if not isinstance(context, str) or not context:
            raise InputError(f"{path}: row {row}: `context_text` must be a non-empty string")
        if not isinstance(target, str) or len(target.encode("utf-8")) != n_bytes[row]:
            raise InputError(f"{path}: row {row}: `target_text` must hold exactly `n_bytes` ({n_bytes[row]}) "
                             "UTF-8 bytes")


class WindowSampler:
    """Training windows as a pure function of (seed, update): starts uniform over all eligible starts.

    A start s inside a document of length n is eligible when s + 257 <= n. The generator for an update is
    seeded from (seed, update) alone, so paired runs see identical batches and a resumed run continues at any
    update without replaying earlier ones. A batch of size B is the first B windows of any larger batch of the
    same update, so data-parallel ranks can take slices of the global batch.
    """

    def __init__(self, tokens: np.ndarray, offsets: np.ndarray, seed: int) -> None:
        self.seed = check_rng_seed(seed)
        self._tokens = tokens
        self._offsets = np.asarray(offsets, dtype=np.int64)
        windows = np.maximum(np.diff(self._offsets) - WINDOW + 1, 0)
        self._cumulative = np.cumsum(windows)
        self.n_windows = int(self._cumulative[-1]) if len(windows) else 0
        if self.n_windows == 0:
            raise InputError(f"training store: no document holds {WINDOW} tokens, so there is no training window")

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
        """(batch_size, 257) int64 token windows of update `update` (the global batch)."""
        _, starts = self.starts(update, batch_size)
        windows = self._tokens[starts[:, None] + np.arange(WINDOW)]
        return torch.from_numpy(windows.astype(np.int64))


@dataclass(frozen=True)
class PreparedData:
    """An opened data directory (see docs/architecture.md, "Data directory")."""

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
        except json.JSONDecodeError as error:
            raise InputError(f"{manifest_path}: invalid JSON ({error.msg})") from None
        found = manifest.get("format") if isinstance(manifest, dict) else None
        if found != DATA_FORMAT:
            raise InputError(_format_problem(manifest_path, found))
        for name in (TOKENIZER, TRAIN_TOKENS, TRAIN_OFFSETS, *(f"{set_name}.parquet" for set_name in EVAL_SET_NAMES)):
            if not (path / name).is_file():
                raise InputError(f"{path / name}: missing from the prepared data directory")
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

    def eval_set(self, name_or_path: str | os.PathLike) -> EvalSet:
        """The `dev` or `heldout` set of this directory (checked against the manifest), or a set file by path."""
        if str(name_or_path) in EVAL_SET_NAMES:
            name = str(name_or_path)
            eval_set = read_eval_set(self.path / f"{name}.parquet", name)
            expected = self.manifest["eval_sets"][name]["sha256"]
            if eval_set.sha256 != expected:
                raise InputError(f"{self.path / f'{name}.parquet'}: content does not match the manifest's SHA-256")
            return eval_set
        if not os.path.exists(name_or_path):
            raise ParameterError("eval_set", f"{str(name_or_path)!r} is neither a set of {self.path} "
                                             f"({', '.join(EVAL_SET_NAMES)}) nor an evaluation-set file")
        return read_eval_set(name_or_path)

    @cached_property
    def train_offsets(self) -> np.ndarray:
        """(D+1,) int64 document offsets into the training store."""
        path = self.path / TRAIN_OFFSETS
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
        expected = int(self.train_offsets[-1])
        if path.stat().st_size != 2 * expected:
            raise InputError(f"{path}: holds {path.stat().st_size // 2} tokens, the offsets say {expected}")
        return np.memmap(path, dtype=np.uint16, mode="r", shape=(expected,))

    def sampler(self, seed: int) -> WindowSampler:
        return WindowSampler(self.train_tokens, self.train_offsets, seed)


def _format_problem(manifest_path: Path, found: object) -> str:
    """Why a manifest is not this gatedv's data format: an older or newer gatedv-data-N, or no data manifest."""
    prefix = DATA_FORMAT.rsplit("-", 1)[0] + "-"
    version = str(found).removeprefix(prefix)
    if isinstance(found, str) and found.startswith(prefix) and version.isdigit():
        if int(version) < int(DATA_FORMAT.removeprefix(prefix)):
            return f"{manifest_path.parent}: prepared by an older gatedv ({found}); run gatedv prepare --force"
        return f"{manifest_path.parent}: prepared by a newer gatedv ({found}); upgrade gatedv-stats"
    return f"{manifest_path}: not a {DATA_FORMAT} manifest"


__all__ = ["DATA_FORMAT", "WINDOW", "EvalSet", "PreparedData", "WindowSampler", "eval_set_sha256", "read_eval_set",
           "window_texts", "write_eval_set"]
