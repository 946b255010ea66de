"""Corpus readers: the embedded standard library, JSONL / JSONL.gz / Parquet with urls, .txt directories."""

import gzip
import json
import platform
import socket
import sys
import sysconfig
from pathlib import Path

import pytest

from gatedv_stats.core.errors import InputError
from trainer.data.corpus import BUILTIN_STDLIB, ReadCounts, open_corpus, url_domain


def test_stdlib_corpus_lists_library_sources_without_test_suites():
    corpus = open_corpus(BUILTIN_STDLIB)
    names = [name for name, _ in corpus.listing]
    root = Path(sysconfig.get_paths()["stdlib"])
    assert names == sorted(names)
    assert 500 < len(names) < 1000
    assert {"os.py", "json/decoder.py", "email/mime/text.py"} <= set(names)
    for name in names:
        parts = name.split("/")
        assert name.endswith(".py")
        assert not {"test", "tests", "idle_test", "site-packages"} & set(parts[:-1]), name
    # Sizes are the files' sizes, and the listing hash depends on them.
    assert dict(corpus.listing)["os.py"] == (root / "os.py").stat().st_size
    assert corpus.python_version == platform.python_version()


def test_stdlib_documents_have_top_level_domain_groups():
    corpus = open_corpus(BUILTIN_STDLIB, max_docs=150)
    documents = list(corpus.documents())
    assert len(documents) == 150
    by_id = {document.doc_id: document for document in documents}
    assert by_id["ctypes/macholib/dyld.py"].domain == "ctypes"
    assert by_id["abc.py"].domain == "abc"
    root = Path(sysconfig.get_paths()["stdlib"])
    assert by_id["abc.py"].text == (root / "abc.py").read_text(encoding="utf-8")
    # Deterministic: a second pass gives the same documents.
    assert [d.doc_id for d in corpus.documents()] == [d.doc_id for d in documents]


@pytest.mark.parametrize("url, host", [
    ("https://WWW.Example.COM:8080/a?b=c", "example.com"),
    ("http://sub.www.example.org/", "sub.www.example.org"),
    ("https://news.bbc.co.uk", "news.bbc.co.uk"),
    ("not a url", None),
])
def test_url_domain(url, host):
    assert url_domain(url) == host


@pytest.mark.parametrize("kind", ["jsonl", "gz", "parquet"])
def test_record_files_give_ids_text_and_url_groups(web_corpus, kind):
    documents = list(open_corpus(str(web_corpus[kind])).documents())
    records = web_corpus["records"]
    assert [d.doc_id for d in documents] == [r["id"] for r in records]
    assert [d.text for d in documents] == [r["text"] for r in records]
    expected = [r["url"].split("/")[2].lower().removeprefix("www.") for r in records]
    assert [d.domain for d in documents] == expected
    assert len(set(expected)) == 16


def test_glob_reads_matching_files_in_sorted_order(tmp_path):
    for name, text in [("b.jsonl", "second"), ("a.jsonl", "first"), ("c.txt.bak", "ignored")]:
        (tmp_path / name).write_text(json.dumps({"text": text}) + "\n")
    corpus = open_corpus(str(tmp_path / "*.jsonl"))
    assert [d.text for d in corpus.documents()] == ["first", "second"]
    # Without `id` or `url`: the id is file:line and each document is its own group.
    assert [(d.doc_id, d.domain) for d in corpus.documents()] == [("a.jsonl:1",) * 2, ("b.jsonl:1",) * 2]
    assert [name for name, _ in corpus.listing] == ["a.jsonl", "b.jsonl"]


def test_txt_directory_groups_by_first_subdirectory(tmp_path):
    (tmp_path / "news" / "2024").mkdir(parents=True)
    (tmp_path / "news" / "2024" / "x.txt").write_text("one")
    (tmp_path / "blog").mkdir()
    (tmp_path / "blog" / "y.txt").write_text("two")
    (tmp_path / "top.txt").write_text("three")
    (tmp_path / "blog" / "empty.txt").write_text("  \n")
    counts = ReadCounts()
    documents = list(open_corpus(str(tmp_path)).documents(counts))
    assert [(d.doc_id, d.domain, d.text) for d in documents] == [
        ("blog/y.txt", "blog", "two"), ("news/2024/x.txt", "news", "one"), ("top.txt", "top.txt", "three")]
    assert counts.empty == 1


def test_undecodable_documents_are_skipped_and_counted_or_fail(tmp_path):
    good = json.dumps({"text": "fine"}).encode() + b"\n"
    bad = b'{"text": "caf\xe9"}\n'  # Latin-1 byte, not UTF-8
    surrogate = b'{"text": "lone \\ud800 surrogate"}\n'
    path = tmp_path / "mixed.jsonl.gz"
    path.write_bytes(gzip.compress(good + bad + surrogate + good))
    counts = ReadCounts()
    assert [d.text for d in open_corpus(str(path)).documents(counts)] == ["fine", "fine"]
    assert counts.undecodable == 2
    with pytest.raises(InputError, match=r"mixed.jsonl.gz:2: undecodable UTF-8"):
        list(open_corpus(str(path), on_decode_error="fail").documents())


def test_parquet_undecodable_text_follows_the_policy(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "bytes.parquet"
    pq.write_table(pa.table({"text": pa.array([b"ok", b"\xff\xfe", b"also ok"], pa.binary())}), path)
    counts = ReadCounts()
    assert [d.text for d in open_corpus(str(path)).documents(counts)] == ["ok", "also ok"]
    assert counts.undecodable == 1
    with pytest.raises(InputError, match=r"bytes.parquet:2: undecodable"):
        list(open_corpus(str(path), on_decode_error="fail").documents())


@pytest.mark.parametrize("columns, message", [
    ({"text": [1, 2]}, r"column `text` has type int64; expected text"),
    ({"text": [["a"], ["b"]]}, r"column `text` has type list<element: string>; expected text"),
    ({"text": [{"a": "x"}, {"a": "y"}]}, r"column `text` has type struct<a: string>; expected text"),
    ({"text": ["a", "b"], "id": [[1], [2]]}, r"column `id` has type list<element: int64>"),
    ({"text": ["a", "b"], "domain": [{"x": 1}, {"x": 2}]}, r"column `domain` has type struct<x: int64>"),
])
def test_parquet_columns_of_the_wrong_type_are_refused(tmp_path, columns, message):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "typed.parquet"
    pq.write_table(pa.table(columns), path)
    with pytest.raises(InputError, match=rf"typed.parquet: {message}"):
        list(open_corpus(str(path)).documents())


def test_parquet_duplicated_column_is_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "twice.parquet"
    pq.write_table(pa.Table.from_arrays([pa.array(["a"]), pa.array(["b"])], names=["text", "text"]), path)
    with pytest.raises(InputError, match=r"twice.parquet: column `text` appears 2 times"):
        list(open_corpus(str(path)).documents())


@pytest.mark.parametrize("line, message", [
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('{"text": "x", "id": ' + "9" * 5000 + "}", "Exceeds the limit"),
])
def test_jsonl_lines_python_cannot_decode_are_invalid_json(tmp_path, line, message):
    path = tmp_path / "odd.jsonl"
    path.write_text('{"text": "fine"}\n' + line + "\n")
    with pytest.raises(InputError, match=rf"odd.jsonl:2: invalid JSON \({message}"):
        list(open_corpus(str(path)).documents())


def test_listing_hash_depends_on_names_and_sizes_not_location(tmp_path):
    for folder in ("one", "two"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "a.jsonl").write_text('{"text": "same"}\n')
    first = open_corpus(str(tmp_path / "one" / "a.jsonl"))
    second = open_corpus(str(tmp_path / "two" / "a.jsonl"))
    assert first.listing_sha256 == second.listing_sha256
    assert first.fingerprint_parts() != second.fingerprint_parts()  # different files on this machine
    (tmp_path / "two" / "a.jsonl").write_text('{"text": "longer"}\n')
    assert open_corpus(str(tmp_path / "two" / "a.jsonl")).listing_sha256 != first.listing_sha256


def _fake_datasets(monkeypatch, records: list) -> list:
    """`datasets` replaced by a module whose load_dataset streams `records`; returns the list of its calls."""
    import types

    calls = []

    def load_dataset(name, config, split, streaming):
        calls.append((name, config, split, streaming))
        return iter(records)

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    return calls


def _hub_host_resolves(monkeypatch, resolves: bool) -> list:
    """Name resolution answered here (the test machine has no network); returns the hosts asked for."""
    asked = []

    def getaddrinfo(host, port, *args, **kwargs):
        asked.append(host)
        if not resolves:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("192.0.2.1", port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    for variable in ("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(variable, raising=False)
    return asked


def test_hugging_face_reader_streams_rows_through_datasets(monkeypatch, web_corpus):
    calls = _fake_datasets(monkeypatch, web_corpus["records"][:5])
    assert _hub_host_resolves(monkeypatch, True) == []
    corpus = open_corpus("hf:HuggingFaceFW/fineweb-edu:sample-10BT", max_docs=4)
    documents = list(corpus.documents())
    assert calls == [("HuggingFaceFW/fineweb-edu", "sample-10BT", "train", True)]
    assert [d.doc_id for d in documents] == [r["id"] for r in web_corpus["records"][:4]]
    assert documents[0].domain == "host0.example.com"


def test_an_unreachable_hub_is_one_line_at_once_unless_offline_or_behind_a_proxy(monkeypatch, web_corpus):
    from huggingface_hub import constants

    calls = _fake_datasets(monkeypatch, web_corpus["records"][:2])
    asked = _hub_host_resolves(monkeypatch, False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    with pytest.raises(InputError) as caught:
        list(open_corpus("hf:org/name").documents())
    assert str(caught.value) == ("hf:org/name: cannot reach the Hugging Face Hub at huggingface.co (Name or service "
                                 "not known); set HF_HUB_OFFLINE=1 to read a dataset already in the local cache")
    assert asked == ["huggingface.co"] and calls == []  # refused before the Hub client and its retries
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")  # the proxy resolves the name
    assert len(list(open_corpus("hf:org/name").documents())) == 2
    monkeypatch.delenv("HTTPS_PROXY")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # the local cache only
    assert len(list(open_corpus("hf:org/name").documents())) == 2
    assert asked == ["huggingface.co"] and len(calls) == 2
