"""The research ledger's file: an SQLite database in WAL mode whose entries are chained by SHA-256, so that a history
altered behind gatedv's back (a row edited, deleted or moved, the settings changed) is refused in one line naming the
first bad entry."""

from __future__ import annotations

import sqlite3

import pytest

from gatedv_stats.core.errors import InputError
from gatedv_stats.io.ledgerfile import LEDGER_FORMAT, entry_hash, ledger_settings, ledger_writer, read_ledger

SETTINGS = {"procedure": {"procedure": "addis", "alpha": 0.05}}


def _content(k: int) -> dict:
    return {"candidate": f"v{k}", "reference": "baseline", "scale": {"log_ratio": True}, "n_pairs": 3,
            "candidate_files": [{"path": f"v{k}.parquet", "sha256": "ab" * 32}], "estimate": -0.01 * k,
            "p_value": 0.001 * k, "df": 2, "level": 0.0027, "decision": "keep", "wealth": 0.05, "note": None}


@pytest.fixture()
def ledger(tmp_path):
    path = tmp_path / "study.ledger"
    for k in (1, 2, 3):
        with ledger_writer(path, SETTINGS) as writer:
            writer.append(_content(k))
    return path


def test_entries_read_back_as_written_in_a_wal_database(ledger):
    settings, entries = read_ledger(ledger)
    assert settings["format"] == LEDGER_FORMAT and settings["procedure"] == SETTINGS["procedure"]
    assert ledger_settings(ledger) == settings
    assert [entry["step"] for entry in entries] == [1, 2, 3]
    assert entries[1]["df"] == 2.0 and isinstance(entries[1]["df"], float)  # a real column, hashed as read
    assert entries[2]["candidate_files"] == [{"path": "v3.parquet", "sha256": "ab" * 32}]
    assert entries[1]["prev_hash"] == entries[0]["hash"] == entry_hash(entries[0])
    with sqlite3.connect(ledger) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_failed_write_leaves_the_history_as_it_was(ledger):
    with pytest.raises(RuntimeError), ledger_writer(ledger, SETTINGS) as writer:
        writer.append(_content(4))
        raise RuntimeError("the decision failed")
    assert len(read_ledger(ledger)[1]) == 3


def _alter(path, sql: str) -> None:
    with sqlite3.connect(path) as connection:
        connection.execute(sql)


@pytest.mark.parametrize(("sql", "message"), [
    ("UPDATE entries SET p_value = 0.5 WHERE step = 2", "entry 2 is not as it was written"),
    ("UPDATE entries SET decision = 'discard' WHERE step = 3", "entry 3 is not as it was written"),
    ("DELETE FROM entries WHERE step = 2", "entry 2 is missing (the row in its place is numbered 3)"),
    ("UPDATE entries SET step = -step WHERE step IN (2, 3)", "entry 1 is missing"),
    ("DELETE FROM entries WHERE step = 3", "entry 3 is missing (the ledger records 3 entries)"),
    ("UPDATE settings SET value = replace(value, 'addis', 'lord++') WHERE key = 'ledger'",
     "the ledger's settings (procedure, α) were changed after it was created"),
])
def test_an_altered_history_is_refused_naming_the_first_bad_entry(ledger, sql, message):
    _alter(ledger, sql)
    with pytest.raises(InputError) as refused:
        read_ledger(ledger)
    assert message in str(refused.value) and "cannot be trusted" in str(refused.value)
    assert "\n" not in str(refused.value)
    with pytest.raises(InputError, match="cannot be trusted"), ledger_writer(ledger, SETTINGS) as writer:
        writer.append(_content(9))


def test_two_entries_swapped_are_refused_at_the_first(ledger):
    with sqlite3.connect(ledger) as connection:
        connection.execute("UPDATE entries SET step = 99 WHERE step = 2")
        connection.execute("UPDATE entries SET step = 2 WHERE step = 3")
        connection.execute("UPDATE entries SET step = 3 WHERE step = 99")
    with pytest.raises(InputError, match="entry 2 is not as it was written"):
        read_ledger(ledger)


def test_a_row_added_by_hand_is_refused(ledger):
    with sqlite3.connect(ledger) as connection:
        connection.execute("INSERT INTO entries (step, candidate) VALUES (4, 'sneaked in')")
    with pytest.raises(InputError, match="entry 4 is not as it was written"):
        read_ledger(ledger)


def test_files_that_are_not_ledgers_are_refused_in_one_line(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a database, but long enough to have a header page of its own" * 20)
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as connection:
        connection.execute("CREATE TABLE runs (x)")
    for path, message in ((text, "not a gatedv ledger"), (other, "an SQLite database with other tables: runs"),
                          (tmp_path / "absent.ledger", "no ledger there")):
        with pytest.raises(InputError, match=message):
            read_ledger(path)
    with pytest.raises(InputError, match="not a gatedv ledger"), ledger_writer(other, SETTINGS):
        pass
    with pytest.raises(InputError, match="is a directory"), ledger_writer(tmp_path, SETTINGS):
        pass
    assert ledger_settings(tmp_path / "absent.ledger") is None
