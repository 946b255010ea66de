"""Corpus readers (docs/method.md §3): documents with ids and domain groups, streamed in batches.

Sources: `builtin:python-stdlib` (the running interpreter's standard library, test suites excluded);
JSONL / JSONL.gz / Parquet files or globs with a `text` column and optional `id`, `url`, `domain`;
a directory of `.txt` files (domain group = first sub-directory); `hf:NAME[:CONFIG]` through the optional
`datasets` package. Every reader yields the same documents in the same order on every pass, so the
prepare pipeline can read a corpus several times instead of holding it in memory.
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import json
import os
import platform
import socket
import sysconfig
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import getproxies

import pyarrow as pa
import pyarrow.parquet as pq

from gatedv_stats.core.errors import InputError
from gatedv_stats.core.files import paths_under

BUILTIN_STDLIB = "builtin:python-stdlib"
HF_PREFIX = "hf:"
DECODE_ERROR_POLICIES = ("skip", "fail")
RECORD_SUFFIXES = (".jsonl", ".jsonl.gz", ".parquet")

# Directory names that hold test suites, third-party code or build artefacts, never library source.
_STDLIB_EXCLUDED_DIRS = frozenset({"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"})


@dataclass(frozen=True)
class Document:
    doc_id: str
    domain: str
    text: str


@dataclass
class ReadCounts:
    """What one pass over a corpus left out."""

    undecodable: int = 0
    empty: int = 0


@dataclass(frozen=True)
class Corpus:
    """A re-readable corpus: its spec, its file listing and a reader giving the same documents on every pass."""

    spec: str
    listing: tuple[tuple[str, int], ...]  # (name relative to the corpus root, size in bytes)
    python_version: str
    on_decode_error: str
    max_docs: int | None
    _reader: Callable[[ReadCounts], Iterator[Document]] = field(repr=False)
    _stamps: tuple = field(default=(), repr=False)  # absolute paths and mtimes: only for the input fingerprint
    passed_over: int = 0  # files of a .txt directory that are not .txt, left out

    @property
    def listing_sha256(self) -> str:
        """SHA-256 of the listing (names and byte sizes), independent of where the corpus lives."""
        text = "\n".join(f"{name}\t{size}" for name, size in self.listing)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def fingerprint_parts(self) -> dict:
        """Everything that identifies this corpus on this machine (for reusing a prepared result)."""
        return {
            "spec": self.spec,
            "listing_sha256": self.listing_sha256,
            "stamps": [list(stamp) for stamp in self._stamps],
            "python_version": self.python_version if self.spec == BUILTIN_STDLIB else None,
            "on_decode_error": self.on_decode_error,
            "max_docs": self.max_docs,
        }

    def documents(self, counts: ReadCounts | None = None) -> Iterator[Document]:
        """The documents in corpus order, skipping empty ones (and undecodable ones under `skip`)."""
        counts = ReadCounts() if counts is None else counts
        for index, document in enumerate(self._reader(counts)):
            if self.max_docs is not None and index >= self.max_docs:
                return
            yield document

    def batches(self, batch_size: int = 512, counts: ReadCounts | None = None) -> Iterator[list[Document]]:
        """The documents in lists of at most `batch_size`."""
        batch: list[Document] = []
        for document in self.documents(counts):
            batch.append(document)
            if len(batch) == batch_size:
                yield batch
                batch = []
        if batch:
            yield batch


def open_corpus(spec: str, *, on_decode_error: str = "skip", max_docs: int | None = None) -> Corpus:
    """Resolve a corpus spec (see the module docstring) without reading its documents."""
    if on_decode_error not in DECODE_ERROR_POLICIES:
        raise InputError(f"--on-decode-error: expected one of {', '.join(DECODE_ERROR_POLICIES)}, "
                         f"got {on_decode_error!r}")
    if max_docs is not None and max_docs < 1:
        raise InputError(f"--max-docs: must be at least 1, got {max_docs}")
    if not spec.strip():
        raise InputError("corpus: the path is empty; give a file, directory, glob, builtin: or hf: corpus")
    corpus = partial(Corpus, spec=spec, python_version=platform.python_version(), on_decode_error=on_decode_error,
                     max_docs=max_docs)
    if spec == BUILTIN_STDLIB:
        root = Path(sysconfig.get_paths()["stdlib"])
        files = _stdlib_files(root)
        return corpus(listing=_listing(root, files), _stamps=_stamps(files),
                      _reader=partial(_read_stdlib, root, files, on_decode_error))
    if spec.startswith("builtin:"):
        raise InputError(f"{spec}: unknown built-in corpus (available: {BUILTIN_STDLIB})")
    if spec.startswith(HF_PREFIX):
        name, _, config = spec[len(HF_PREFIX):].partition(":")
        if not name:
            raise InputError(f"{spec}: expected hf:NAME or hf:NAME:CONFIG")
        return corpus(listing=((spec, 0),), _reader=partial(_read_hf, spec, name, config or None, on_decode_error))
    root, files, passed_over = _resolve_files(spec)
    read = _read_txt if all(path.suffix == ".txt" for path in files) else _read_records
    return corpus(listing=_listing(root, files), _stamps=_stamps(files), passed_over=passed_over,
                  _reader=partial(read, root, files, on_decode_error))


def url_domain(url: str) -> str | None:
    """Domain group of a URL: its host, lower-cased, without a leading `www.` (None when it has no host)."""
    try:
        host = urlsplit(url.strip()).hostname
    except ValueError:
        return None
    if not host:
        return None
    return host.removeprefix("www.")


# --- listing -------------------------------------------------------------------------------------------


def _stdlib_files(root: Path) -> list[Path]:
    files: list[Path] = []
    for directory, subdirectories, names in os.walk(root):
        # Prune in place so that site-packages and test suites are never walked.
        subdirectories[:] = [name for name in subdirectories
                             if name not in _STDLIB_EXCLUDED_DIRS and not name.startswith("config-")]
        files.extend(Path(directory, name) for name in names if name.endswith(".py"))
    return sorted(files, key=lambda path: path.relative_to(root).as_posix())


def _resolve_files(spec: str) -> tuple[Path, list[Path], int]:
    """(root, sorted files, other files of a directory left out) of a file, a directory of .txt files, or a glob."""
    passed_over = 0
    if glob.has_magic(spec):
        files = sorted(Path(match) for match in glob.glob(spec, recursive=True) if Path(match).is_file())
        if not files:
            raise InputError(f"{spec}: the glob matches no file")
        root = Path(os.path.commonpath([str(path.parent) for path in files]))
    else:
        path = Path(spec)
        if not path.exists():
            raise InputError(f"{spec}: no such file or directory")
        if path.is_dir():
            children = [child for child in paths_under(path) if child.is_file()]
            files = [child for child in children if child.suffix == ".txt"]
            if not files:
                raise InputError(f"{spec}: the directory holds no .txt file")
            passed_over = len(children) - len(files)
            root = path
        else:
            files, root = [path], path.parent
    for path in files:
        if not (path.name.endswith(RECORD_SUFFIXES) or path.suffix == ".txt"):
            raise InputError(f"{path}: unsupported corpus file (expected .jsonl, .jsonl.gz, .parquet or .txt)")
        if not os.access(path, os.R_OK):
            raise InputError(f"{path}: cannot read the file")
    if any(path.suffix == ".txt" for path in files) and not all(path.suffix == ".txt" for path in files):
        raise InputError(f"{spec}: mixes .txt files with record files; give one kind")
    return root, files, passed_over


def _listing(root: Path, files: list[Path]) -> tuple[tuple[str, int], ...]:
    return tuple((path.relative_to(root).as_posix(), path.stat().st_size) for path in files)


def _stamps(files: list[Path]) -> tuple:
    return tuple((str(path.resolve()), path.stat().st_mtime_ns) for path in files)


# --- readers -------------------------------------------------------------------------------------------


def _decode(raw: bytes, where: str, policy: str, counts: ReadCounts) -> str | None:
    """UTF-8 text of `raw`; None (counted) when undecodable under `skip`."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        if policy == "fail":
            raise InputError(f"{where}: undecodable UTF-8 at byte {error.start} "
                             "(use --on-decode-error skip to skip such documents)") from None
        counts.undecodable += 1
        return None


def _encodable(text: str, where: str, policy: str, counts: ReadCounts) -> bool:
    """Whether `text` is valid Unicode (JSON escapes can smuggle in lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        if policy == "fail":
            raise InputError(f"{where}: text holds a lone surrogate, not valid UTF-8 "
                             "(use --on-decode-error skip to skip such documents)") from None
        counts.undecodable += 1
        return False
    return True


def _read_stdlib(root: Path, files: list[Path], policy: str, counts: ReadCounts) -> Iterator[Document]:
    for path in files:
        relative = path.relative_to(root)
        text = _decode(path.read_bytes(), str(path), policy, counts)
        if text is None:
            continue
        if not text.strip():
            counts.empty += 1
            continue
        yield Document(relative.as_posix(), relative.parts[0].removesuffix(".py"), text)


def _read_txt(root: Path, files: list[Path], policy: str, counts: ReadCounts) -> Iterator[Document]:
    for path in files:
        relative = path.relative_to(root)
        try:
            raw = path.read_bytes()
        except OSError as error:
            raise InputError(f"{path}: cannot read the file ({error.strerror})") from None
        text = _decode(raw, str(path), policy, counts)
        if text is None:
            continue
        if not text.strip():
            counts.empty += 1
            continue
        domain = relative.parts[0] if len(relative.parts) > 1 else relative.as_posix()
        yield Document(relative.as_posix(), domain, text)


def _read_records(root: Path, files: list[Path], policy: str, counts: ReadCounts) -> Iterator[Document]:
    for path in files:
        name = path.relative_to(root).as_posix()
        rows = _parquet_rows(path, policy, counts) if path.suffix == ".parquet" else _jsonl_rows(path, policy, counts)
        for row_number, record in rows:
            document = _record_document(record, f"{path}:{row_number}", f"{name}:{row_number}", policy, counts)
            if document is not None:
                yield document


def _jsonl_rows(path: Path, policy: str, counts: ReadCounts) -> Iterator[tuple[int, Mapping]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as handle:
            for line_number, raw in enumerate(handle, start=1):
                where = f"{path}:{line_number}"
                line = _decode(raw, where, policy, counts)
                if line is None or not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as error:
                    raise InputError(f"{where}: invalid JSON ({error.msg})") from None
                except RecursionError:
                    raise InputError(f"{where}: invalid JSON (nested too deeply)") from None
                except ValueError as error:  # an integer past Python's digit limit
                    raise InputError(f"{where}: invalid JSON ({str(error).split(':')[0]})") from None
                if not isinstance(record, dict):
                    raise InputError(f"{where}: expected a JSON object per line")
                yield line_number, record
    except (OSError, EOFError) as error:
        raise InputError(f"{path}: cannot read the file ({error})") from None


def _parquet_rows(path: Path, policy: str, counts: ReadCounts) -> Iterator[tuple[int, Mapping]]:
    try:
        parquet = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as error:
        raise InputError(f"{path}: not a readable Parquet file ({error})") from None
    schema = parquet.schema_arrow
    if "text" not in schema.names:
        raise InputError(f"{path}: no `text` column (columns: {', '.join(schema.names)})")
    columns = [name for name in ("text", "id", "url", "domain") if name in schema.names]
    targets = {name: _parquet_target(path, schema, name) for name in columns}
    row_number = 0
    for batch in parquet.iter_batches(batch_size=1024, columns=columns):
        values = {name: batch.column(name).cast(targets[name]).to_pylist() for name in columns}
        for offset in range(batch.num_rows):
            row_number += 1
            raw = values["text"][offset]
            text = None if raw is None else _decode(raw, f"{path}:{row_number}", policy, counts)
            if raw is not None and text is None:
                continue
            record = {name: values[name][offset] for name in columns}
            record["text"] = text
            yield row_number, record


def _parquet_target(path: Path, schema: pa.Schema, name: str) -> pa.DataType:
    """The type column `name` is read as (text as bytes, so that invalid UTF-8 reaches the decode-error policy
    instead of pyarrow); refuses a duplicated column or one of a type that does not convert to it."""
    if schema.names.count(name) > 1:
        raise InputError(f"{path}: column `{name}` appears {schema.names.count(name)} times")
    source = schema.field(name).type
    target = pa.binary() if name == "text" else pa.string()
    try:
        pa.array([], type=source).cast(target)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        raise InputError(f"{path}: column `{name}` has type {source}; expected "
                         f"{'text' if name == 'text' else 'text or a number'}") from None
    return target


def _record_document(record: Mapping, where: str, default_id: str, policy: str,
                     counts: ReadCounts) -> Document | None:
    if "text" not in record:
        raise InputError(f"{where}: no `text` field")
    text = record["text"]
    if text is None:
        counts.empty += 1
        return None
    if not isinstance(text, str):
        raise InputError(f"{where}: `text` must be a string, got {type(text).__name__}")
    if not _encodable(text, where, policy, counts):
        return None
    if not text.strip():
        counts.empty += 1
        return None
    doc_id = str(record["id"]) if record.get("id") is not None else default_id
    if record.get("domain") is not None:
        domain = str(record["domain"])
    elif record.get("url") is not None:
        host = url_domain(str(record["url"]))
        if host is None:
            raise InputError(f"{where}: `url` has no host: {str(record['url'])[:80]!r}")
        domain = host
    else:
        domain = doc_id  # without a url every document is its own group
    return Document(doc_id, domain, text)


def _read_hf(spec: str, name: str, config: str | None, policy: str, counts: ReadCounts) -> Iterator[Document]:
    try:
        import datasets  # the optional `datasets` extra
    except ImportError:
        raise InputError(f"{spec}: reading Hugging Face datasets needs the optional `datasets` package "
                         "(pip install 'gatedv-stats[datasets]')") from None
    _check_hub_reachable(spec)
    try:
        rows = datasets.load_dataset(name, config, split="train", streaming=True)
        for row_number, record in enumerate(rows, start=1):
            document = _record_document(record, f"{spec}:{row_number}", f"{name}:{row_number}", policy, counts)
            if document is not None:
                yield document
    except InputError:
        raise
    except (OSError, ValueError, ConnectionError) as error:
        raise InputError(f"{spec}: cannot load the dataset ({str(error).splitlines()[0] if str(error) else error})") \
            from None


def _check_hub_reachable(spec: str) -> None:
    """Refuse at once when the Hub's host name does not resolve, instead of after the Hub client's retries of
    half a minute. Offline mode (HF_HUB_OFFLINE=1) reads the local cache, and behind a proxy the proxy
    resolves the name, so neither is checked."""
    from huggingface_hub import constants  # installed with `datasets`

    if constants.HF_HUB_OFFLINE or {"https", "all"} & set(getproxies()):
        return
    host = urlsplit(constants.ENDPOINT).hostname or constants.ENDPOINT
    try:
        socket.getaddrinfo(host, 443)
    except OSError as error:
        raise InputError(f"{spec}: cannot reach the Hugging Face Hub at {host} ({error.strerror or error}); set "
                         "HF_HUB_OFFLINE=1 to read a dataset already in the local cache") from None


__all__ = ["BUILTIN_STDLIB", "Corpus", "Document", "ReadCounts", "open_corpus", "url_domain"]
