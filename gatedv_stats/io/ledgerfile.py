"""The research ledger's file: an SQLite database (the standard library's `sqlite3`) whose entries are never edited or
reordered, chained by their SHA-256 so that an altered history is refused.

Tables: `settings` (key → JSON: `ledger` = the format, the procedure with its parameters and α, the creation time;
`genesis` = the SHA-256 of `ledger`; `head` = the number of entries and the last entry's hash) and `entries`, one row
per candidate entered, or per sequential candidate started (the columns of `COLUMNS`). Each entry's `hash` is the
SHA-256 of its content (every column but `hash`, as canonical JSON; the columns added since the first format only
where they hold a value, so that the entries of a ledger written before them keep their hashes), which holds its
`step` and `prev_hash`, the hash of the entry before it (the genesis hash for the first): an entry edited, deleted or
moved breaks the chain at that entry, and the head catches the last entry removed. A ledger written before the
later columns gets them when it is next written. The chain proves the history was not altered by anyone who did
not also rewrite every later hash; the head hash that `gatedv ledger LEDGER show` prints, kept elsewhere (a lab
notebook, a commit), anchors it.

Writers serialise: each entry is one transaction begun with `BEGIN IMMEDIATE` (the database's write lock, waited
for up to `BUSY_TIMEOUT` seconds), in which the writer reads and checks the whole history, decides and appends; the
database is in WAL mode (readers never block the writer) with `synchronous=FULL` (a committed entry survives a crash).
A file system that fills up during a transaction (SQLite's "database or disk is full") rolls it back: the ledger is
left as it was and the writer ends with one `NoSpaceError`, as a full disk does everywhere else. A new ledger is
written under a scratch name and linked into place after its first commit, so a failed first entry leaves no file.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gatedv_stats.core.errors import InputError, NoSpaceError
from gatedv_stats.core.files import canonical_sha256
from gatedv_stats.core.locks import output_lock
from gatedv_stats.core.outputs import check_output_file

LEDGER_FORMAT = "gatedv-ledger/1"
BUSY_TIMEOUT = 60.0  # seconds a writer waits for another writer's transaction
ALTERED = "; the ledger's history was altered and cannot be trusted"  # ends every refusal of a changed ledger
_SQLITE_FULL = 13  # SQLite's result code for a full file system (sqlite3.SQLITE_FULL from Python 3.11)
# Every column of an entry and its kind ("json": a JSON document stored as text).
COLUMNS: tuple[tuple[str, str], ...] = (
    ("step", "integer"), ("time", "text"), ("candidate", "text"), ("reference", "text"), ("task", "text"),
    ("unit", "text"), ("scale", "json"), ("n_pairs", "integer"), ("candidate_files", "json"),
    ("reference_files", "json"), ("noise_floor", "text"), ("noise_floor_sha256", "text"), ("note", "text"),
    ("estimate", "real"), ("low", "real"), ("high", "real"), ("confidence_level", "real"), ("se", "real"),
    ("df", "real"), ("delta_p", "real"), ("delta_p_low", "real"), ("delta_p_high", "real"), ("p_value", "real"),
    ("verdict", "text"), ("procedure", "text"), ("parameters", "json"), ("alpha", "real"), ("level", "real"),
    ("decision", "text"), ("wealth", "real"), ("prev_hash", "text"), ("hash", "text"),
    # since the first format, hashed only where they hold a value
    ("kind", "text"), ("start_step", "integer"), ("design", "text"), ("design_sha256", "text"), ("p_source", "text"),
    ("e_value", "real"), ("shared_reference", "json"),
)
KINDS = dict(COLUMNS)
# How a column's kind gives a value back (a NaN real as null).
_GIVEN_BACK: dict[str, Callable[[Any], object]] = {
    "real": lambda value: None if math.isnan(float(value)) else float(value), "integer": int, "text": str,
    "json": lambda value: json.loads(json.dumps(value, sort_keys=True))}
_TYPES = {name: "TEXT" if kind == "json" else kind.upper() for name, kind in COLUMNS}  # SQLite's: JSON as text
_LATER = frozenset(name for name, _ in COLUMNS[COLUMNS.index(("kind", "text")):])
_WRITTEN_HERE = ("step", "time", "prev_hash", "hash")  # what `append` adds to an entry's content
_CREATING = threading.Lock()  # the threads of this process that create a ledger take turns


def entry_hash(entry: dict) -> str:
    """The SHA-256 of an entry's content: every column but `hash`, as canonical JSON (a later column only where it
    holds a value)."""
    return canonical_sha256({name: value for name, value in entry.items()
                             if name != "hash" and not (name in _LATER and value is None)})


class LedgerWriter:
    """One writer's transaction: the settings and the checked history as they stand, and `append`."""

    def __init__(self, connection: sqlite3.Connection, where: str, settings: dict, entries: list[dict]) -> None:
        self._connection = connection
        self.where = where
        self.settings = settings  # the ledger's settings (format, procedure, created)
        self.entries = entries  # every entry so far, in order, chain checked

    def append(self, content: dict) -> dict:
        """Write the next entry (the columns of `COLUMNS` but step, time, prev_hash and hash, which are added here);
        returns it as stored."""
        unknown = set(content) - set(KINDS) | set(content) & set(_WRITTEN_HERE)
        if unknown:
            raise ValueError(f"not an entry's content: {sorted(unknown)}")
        entry = _normalised({name: None for name in KINDS} | content | {
            "step": len(self.entries) + 1, "time": datetime.now(timezone.utc).isoformat(timespec="microseconds"),
            "prev_hash": self.entries[-1]["hash"] if self.entries else canonical_sha256(self.settings), "hash": None})
        entry["hash"] = entry_hash(entry)
        _execute(self._connection, self.where,
                 f"INSERT INTO entries ({', '.join(KINDS)}) VALUES ({', '.join('?' * len(KINDS))})",
                 tuple(json.dumps(entry[name], sort_keys=True) if kind == "json" and entry[name] is not None
                       else entry[name] for name, kind in KINDS.items()))
        _execute(self._connection, self.where, "UPDATE settings SET value = ? WHERE key = 'head'",
                 (json.dumps({"entries": entry["step"], "hash": entry["hash"]}),))
        self.entries.append(entry)
        return entry


@contextlib.contextmanager
def ledger_writer(path: str | os.PathLike[str], settings: dict) -> Iterator[LedgerWriter]:
    """The ledger at `path` (created with `settings` when it does not exist yet), in one write transaction: every
    entry appended inside the `with` block is committed together at its end, nothing if it raises. A new ledger is
    created under the output lock that every creator of it takes: no writer ever sees one half created."""
    check_output_file(path, "ledger")
    where = os.fspath(path)
    if not Path(where).exists():
        with _CREATING, output_lock(where):  # the output lock between processes, this one between threads
            if not Path(where).exists():
                scratch = os.path.join(os.path.dirname(os.path.abspath(where)),
                                       f".{os.path.basename(where)}.creating-{os.getpid()}-{uuid.uuid4().hex[:8]}")
                try:
                    with _transaction(scratch, where, settings) as writer:
                        yield writer
                    _link_into_place(scratch, where)
                finally:  # the scratch database and its journal files
                    for suffix in ("", "-wal", "-shm", "-journal"):
                        with contextlib.suppress(FileNotFoundError):
                            os.remove(scratch + suffix)
                return
    with _transaction(where, where, settings) as writer:
        yield writer


@contextlib.contextmanager
def _transaction(database: str, where: str, settings: dict) -> Iterator[LedgerWriter]:
    """One write transaction on the SQLite file `database` (named `where` in messages)."""
    with _connection(database, where) as connection:
        _execute(connection, where, "PRAGMA journal_mode=WAL")
        _execute(connection, where, "BEGIN IMMEDIATE")
        try:
            stored = _settings(connection, where) or _initialise(connection, where, settings)
            _add_later_columns(connection, where)
            yield LedgerWriter(connection, where, stored["ledger"], _checked_entries(connection, where, stored))
        except BaseException:
            connection.rollback()
            raise
        _execute(connection, where, "COMMIT")


def _link_into_place(scratch: str, where: str) -> None:
    """The new ledger under its name: a hard link never replaces a file (a rename where links are not supported)."""
    try:
        os.link(scratch, where)
    except FileExistsError:
        raise InputError(f"{where}: created by another program while this ledger was being created; nothing was "
                         "added: run the same command again") from None
    except OSError:
        os.replace(scratch, where)


def read_ledger(path: str | os.PathLike[str]) -> tuple[dict, list[dict]]:
    """The settings and every entry of the ledger at `path`, its chain checked (one consistent snapshot)."""
    where = os.fspath(path)
    if not Path(where).is_file():
        raise InputError(f"{where}: no ledger there (`gatedv ledger {where} add` creates one)")
    with _connection(where, where) as connection:
        _execute(connection, where, "BEGIN")
        try:
            stored = _settings(connection, where)
            if stored is None:
                raise InputError(f"{where}: no ledger there yet (an empty database; `gatedv ledger {where} add` "
                                 "creates one); a ledger that held entries was emptied: restore an intact copy")
            return stored["ledger"], _checked_entries(connection, where, stored)
        finally:
            connection.rollback()


def ledger_settings(path: str | os.PathLike[str]) -> dict | None:
    """The settings of the ledger at `path`; None when there is none yet (no file, or one still being created by
    another writer); a file that is not a ledger is refused."""
    where = os.fspath(path)
    if not Path(where).is_file():
        return None
    with _connection(where, where) as connection:
        stored = _settings(connection, where)
    return None if stored is None else stored["ledger"]


@contextlib.contextmanager
def _connection(database: str, where: str) -> Iterator[sqlite3.Connection]:
    try:
        connection = sqlite3.connect(database, timeout=BUSY_TIMEOUT, isolation_level=None)
    except sqlite3.Error as error:
        raise InputError(f"{where}: cannot open the ledger ({error})") from None
    try:
        _execute(connection, where, "PRAGMA synchronous=FULL")
        yield connection
    finally:
        connection.close()


def _execute(connection: sqlite3.Connection, where: str, sql: str, parameters: tuple = ()) -> list[tuple]:
    """A statement and its rows, read inside the same refusal (a damaged page is met while reading them): a file
    that is not an SQLite database, or a lock held past the timeout, is one `InputError`, a full file system (SQLite's
    SQLITE_FULL: the file system, or a quota, had no room for the pages a write needs) one `NoSpaceError`."""
    try:
        return connection.execute(sql, parameters).fetchall()
    except sqlite3.DatabaseError as error:
        code = getattr(error, "sqlite_errorcode", None)  # Python 3.11+; before, only the message tells
        full = code == _SQLITE_FULL if code is not None else "database or disk is full" in str(error)
        if full:
            reason = os.strerror(errno.ENOSPC)
            raise NoSpaceError(f"{where}: could not be written: {reason} (SQLite: {error}); the entry was not added "
                               "and the ledger's earlier entries are kept as they were: free space on its file "
                               "system, then run the same command again", where, reason) from None
        if "locked" in str(error) or "busy" in str(error):
            raise InputError(f"{where}: another writer held the ledger for {BUSY_TIMEOUT:g} s; try again") from None
        raise InputError(f"{where}: not a gatedv ledger ({error})") from None


def _settings(connection: sqlite3.Connection, where: str) -> dict | None:
    """The settings table's values (None when the database has no ledger yet); another database is refused."""
    tables = {name for (name,) in _execute(connection, where, "SELECT name FROM sqlite_master WHERE type='table'")}
    if not tables:
        return None
    if not {"settings", "entries"} <= tables:
        raise InputError(f"{where}: not a gatedv ledger (an SQLite database with other tables: "
                         f"{', '.join(sorted(tables))})")
    try:
        values = {key: json.loads(value)
                  for key, value in _execute(connection, where, "SELECT key, value FROM settings")}
    except (TypeError, json.JSONDecodeError):  # a byte of the stored text changed
        raise InputError(f"{where}: the ledger's settings do not read as written (damaged){ALTERED}") from None
    if not isinstance(values.get("ledger"), dict) or values["ledger"].get("format") != LEDGER_FORMAT:
        raise InputError(f"{where}: not a gatedv ledger of format {LEDGER_FORMAT}")
    if values.get("genesis") != canonical_sha256(values["ledger"]):
        raise InputError(f"{where}: the ledger's settings (procedure, α) were changed after it was created{ALTERED}")
    return values


def _add_later_columns(connection: sqlite3.Connection, where: str) -> None:
    """A ledger written before the later columns gets them (empty in its earlier entries)."""
    present = {row[1] for row in _execute(connection, where, "PRAGMA table_info(entries)")}
    for name, kind in _TYPES.items():
        if name not in present:
            _execute(connection, where, f"ALTER TABLE entries ADD COLUMN {name} {kind}")


def _initialise(connection: sqlite3.Connection, where: str, settings: dict) -> dict:
    ledger = {**settings, "format": LEDGER_FORMAT,
              "created": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    columns = ", ".join(f"{name} {'INTEGER PRIMARY KEY' if name == 'step' else kind}" for name, kind in _TYPES.items())
    _execute(connection, where, "CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    _execute(connection, where, f"CREATE TABLE entries ({columns})")
    values = {"ledger": ledger, "genesis": canonical_sha256(ledger), "head": {"entries": 0, "hash": None}}
    for key, value in values.items():
        _execute(connection, where, "INSERT INTO settings (key, value) VALUES (?, ?)",
                 (key, json.dumps(value, sort_keys=True)))
    return values


def _checked_entries(connection: sqlite3.Connection, where: str, stored: dict) -> list[dict]:
    """Every entry in step order, each checked against its hash and the one before it; the first that is not
    what was written is refused by its step."""
    present = [row[1] for row in _execute(connection, where, "PRAGMA table_info(entries)") if row[1] in KINDS]
    rows = _execute(connection, where, f"SELECT {', '.join(present)} FROM entries ORDER BY step")
    entries, previous = [], stored["genesis"]
    for step, values in enumerate(rows, start=1):
        try:
            stored_values = dict(zip(present, values))
            entry = _normalised({name: json.loads(value) if KINDS[name] == "json" and isinstance(value, str) else value
                                 for name, value in ((name, stored_values.get(name)) for name in KINDS)})
        except (TypeError, json.JSONDecodeError):  # a byte of an entry's stored JSON changed
            raise InputError(f"{where}: entry {step} does not read as written (damaged){ALTERED}") from None
        if entry["step"] != step:
            raise InputError(f"{where}: entry {step} is missing (the row in its place is numbered {entry['step']})"
                             f"{ALTERED}")
        if entry["prev_hash"] != previous or entry["hash"] != entry_hash(entry):
            raise InputError(f"{where}: entry {step} is not as it was written (edited, or moved from another "
                             f"step){ALTERED}")
        entries.append(entry)
        previous = entry["hash"]
    head = stored.get("head") or {}
    if head.get("entries") != len(entries) or head.get("hash") != (entries[-1]["hash"] if entries else None):
        recorded = head.get("entries")
        if isinstance(recorded, int) and recorded > len(entries):
            raise InputError(f"{where}: entry {len(entries) + 1} is missing (the ledger records {recorded} entries)"
                             f"{ALTERED}")
        raise InputError(f"{where}: entry {len(entries)} was not written by gatedv (the ledger records "
                         f"{recorded} entries){ALTERED}")
    return entries


def _normalised(entry: dict) -> dict:
    """Each value as its column's kind gives it back (2 → 2.0 in a real column, JSON through its text), so that an
    entry hashes the same before it is written and after it is read."""
    return {name: None if value is None else _GIVEN_BACK[KINDS[name]](value) for name, value in entry.items()}
