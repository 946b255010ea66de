"""The SHA-256 of a Parquet table's content, kept in the file's own key-value metadata (`content_sha256`): loss and
item-score files written here carry it, and every read checks it, so a file damaged or edited after it was written
is refused instead of feeding a statistic. A file of another tool records none and is read as it is.

The hash covers the columns (names, kinds, every value and null) and every other key-value metadata entry, in a
form that does not depend on how the file is laid out (row groups, encodings, compression) or on the reader's types
(string or large string, pandas or Arrow)."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SEAL_KEY = b"content_sha256"
ARROW_SCHEMA_KEY = b"ARROW:schema"  # Arrow's copy of the schema and its metadata, in the Parquet file's metadata


def table_content_sha256(table: pa.Table) -> str:
    """SHA-256 of `table`'s columns and key-value metadata, the `SEAL_KEY` entry left out."""
    digest = hashlib.sha256()
    metadata = sorted((key, value) for key, value in (table.schema.metadata or {}).items() if key != SEAL_KEY)
    _update(digest, json.dumps([[key.hex(), value.hex()] for key, value in metadata]).encode("ascii"))
    for name, column in zip(table.column_names, table.columns):
        _update(digest, name.encode("utf-8"))
        _column(digest, column)
    return digest.hexdigest()


def sealed(table: pa.Table) -> pa.Table:
    """`table` with its content's SHA-256 under `SEAL_KEY` in its key-value metadata (JSON-encoded, as every
    metadata value of these files is)."""
    metadata = {key: value for key, value in (table.schema.metadata or {}).items() if key != SEAL_KEY}
    metadata[SEAL_KEY] = json.dumps(table_content_sha256(table)).encode("ascii")
    return table.replace_schema_metadata(metadata)


def seal_problem(table: pa.Table, file_metadata: dict | None = None) -> str | None:
    """Why `table` (as read) is not what was written: None when it records no content SHA-256 (a file of another
    tool) or records its own. `file_metadata`: the file's own key-value metadata (`ParquetFile.metadata.metadata`),
    which holds the table's a second time, beside the Arrow schema Arrow reads it from (`ARROW_SCHEMA_KEY`); the
    two must agree, so that a reader of either copy reads what was sealed."""
    recorded = (table.schema.metadata or {}).get(SEAL_KEY)
    if recorded is None and SEAL_KEY not in (file_metadata or {}):
        return None
    if file_metadata is not None:
        plain = {key: value for key, value in file_metadata.items() if key != ARROW_SCHEMA_KEY}
        if plain != dict(table.schema.metadata or {}):
            return "damaged: its two copies of its metadata differ"
    try:
        expected = json.loads(recorded) if recorded is not None else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        expected = None
    if expected == table_content_sha256(table):
        return None
    return f"damaged: its content does not match the sha256 its metadata records ({SEAL_KEY.decode()})"


def _update(digest, data: bytes) -> None:
    """Length-prefixed, so that no two sequences of parts hash alike."""
    digest.update(len(data).to_bytes(8, "little"))
    digest.update(data)


def _column(digest, column: pa.ChunkedArray) -> None:
    kind = column.type
    if pa.types.is_dictionary(kind):
        column, kind = column.cast(kind.value_type), kind.value_type
    nulls = np.asarray(column.is_null(), dtype=np.uint8)
    _update(digest, nulls.tobytes())
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        _update(digest, b"int" + _numbers(column, pa.int64(), "<i8"))
    elif pa.types.is_floating(kind):
        _update(digest, b"float" + _numbers(column, pa.float64(), "<f8"))
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        text = pc.fill_null(column.cast(pa.large_string()), "").combine_chunks()
        buffers = text.buffers()
        offsets = (np.frombuffer(buffers[1], dtype="<i8")[text.offset:text.offset + len(text) + 1] if len(text)
                   else np.zeros(1, dtype="<i8"))
        _update(digest, b"str" + np.diff(offsets).tobytes())
        data = buffers[2]
        _update(digest, b"" if data is None else data.to_pybytes()[offsets[0]:offsets[-1]])
    else:
        _update(digest, b"json" + json.dumps(column.to_pylist(), default=str).encode("utf-8"))


def _numbers(column: pa.ChunkedArray, kind: pa.DataType, dtype: str) -> bytes:
    filled = pc.fill_null(column.cast(kind), 0) if column.null_count else column.cast(kind)
    return np.ascontiguousarray(np.asarray(filled), dtype=dtype).tobytes()
