"""`prepare`: evaluation sets, training store and manifest, checked against an independent re-tokenisation."""

import hashlib
import importlib.util
import json
import re

import numpy as np
import pytest
from tokenizers import Tokenizer

from gatedv_stats.core.errors import InputError
from helpers import invoke
from trainer.data.corpus import open_corpus
from trainer.data.prepare import prepare
from trainer.data.prepared import PreparedData

WEB_OPTIONS = {"eval_docs": 3, "vocab_size": 320, "progress": False}


def _independent_view(data_dir, corpus_spec):
    """Re-tokenise every corpus document with the saved tokenizer: {token tuple: (doc_id, domain)} and the ids."""
    tokenizer = Tokenizer.from_file(str(data_dir / "tokenizer.json"))
    documents = list(open_corpus(corpus_spec).documents())
    ids = {d.doc_id: tokenizer.encode(d.text, add_special_tokens=False).ids for d in documents}
    return documents, ids


def _train_documents(data):
    offsets = np.load(data.path / "train_docs.npy")
    tokens = np.fromfile(data.path / "train.bin", dtype=np.uint16)
    return [tuple(tokens[a:b].tolist()) for a, b in zip(offsets[:-1], offsets[1:])]


@pytest.fixture(scope="module")
def web_data(web_corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("web-data")
    prepare(str(web_corpus["jsonl"]), out, **WEB_OPTIONS)
    return PreparedData.open(out)


def test_eval_sets_are_disjoint_one_document_per_group_first_257_tokens(web_data, web_corpus):
    documents, ids = _independent_view(web_data.path, str(web_corpus["jsonl"]))
    domain_of = {d.doc_id: d.domain for d in documents}
    dev, heldout = web_data.eval_set("dev"), web_data.eval_set("heldout")
    assert len(dev) == len(heldout) == 3
    chosen = dev.doc_ids + heldout.doc_ids
    assert len(set(chosen)) == 6
    assert len({domain_of[doc_id] for doc_id in chosen}) == 6  # distinct groups across both sets
    tokenizer = Tokenizer.from_file(str(web_data.tokenizer_path))
    for eval_set in (dev, heldout):
        assert eval_set.tokens.shape == (3, 257) and eval_set.tokens.dtype == np.int64
        for row, doc_id in enumerate(eval_set.doc_ids):
            assert eval_set.domains[row] == domain_of[doc_id]
            assert eval_set.tokens[row].tolist() == ids[doc_id][:257]
            # n_bytes: UTF-8 bytes of the 256 targets = bytes of the first 257 tokens minus those of the first.
            text = next(d.text for d in documents if d.doc_id == doc_id).encode("utf-8")
            prefix = len(tokenizer.decode(ids[doc_id][:257]).encode("utf-8"))
            first = len(tokenizer.decode(ids[doc_id][:1]).encode("utf-8"))
            assert text.startswith(tokenizer.decode(ids[doc_id][:257]).encode("utf-8"))
            assert eval_set.n_bytes[row] == prefix - first


def test_training_store_excludes_eval_documents_and_their_groups(web_data, web_corpus):
    documents, ids = _independent_view(web_data.path, str(web_corpus["jsonl"]))
    by_tokens = {tuple(token_ids): d for d, token_ids in ((d, ids[d.doc_id]) for d in documents)}
    train = [by_tokens[tokens] for tokens in _train_documents(web_data)]  # every stored document is a corpus doc
    eval_ids = set(web_data.eval_set("dev").doc_ids + web_data.eval_set("heldout").doc_ids)
    eval_groups = {d.domain for d in documents if d.doc_id in eval_ids}
    assert not {d.domain for d in train} & eval_groups
    expected = {d.doc_id for d in documents if d.domain not in eval_groups}
    assert {d.doc_id for d in train} == expected  # nothing else is missing
    counts = web_data.manifest["counts"]
    assert counts["documents"] == 64
    assert counts["tokens"] == sum(len(v) for v in ids.values())
    assert counts["excluded_documents"] == 64 - len(expected) == 6 * 4
    assert counts["train"]["documents"] == len(train)
    assert counts["train"]["tokens"] == sum(len(ids[d.doc_id]) for d in train)
    # Eligible windows by brute force: every start s with s + 257 <= length.
    windows = sum(1 for d in train for s in range(len(ids[d.doc_id])) if s + 257 <= len(ids[d.doc_id]))
    assert counts["train"]["eligible_windows"] == windows == web_data.sampler(0).n_windows


def test_keep_eval_groups_removes_only_the_eval_documents(web_corpus, tmp_path):
    prepare(str(web_corpus["jsonl"]), tmp_path, remove_eval_groups=False, **WEB_OPTIONS)
    data = PreparedData.open(tmp_path)
    documents, ids = _independent_view(tmp_path, str(web_corpus["jsonl"]))
    by_tokens = {tuple(ids[d.doc_id]): d.doc_id for d in documents}
    train_ids = {by_tokens[tokens] for tokens in _train_documents(data)}
    eval_ids = set(data.eval_set("dev").doc_ids + data.eval_set("heldout").doc_ids)
    assert train_ids == {d.doc_id for d in documents} - eval_ids
    assert data.manifest["counts"]["excluded_documents"] == 6


def test_same_inputs_same_hashes_and_reuse(web_corpus, web_data, tmp_path):
    again = prepare(str(web_corpus["jsonl"]), tmp_path / "again", **WEB_OPTIONS)
    assert not again.reused
    for key in ("tokenizer", "eval_sets", "train", "counts", "input_fingerprint"):
        assert again.manifest[key] == web_data.manifest[key]
    for name in ("tokenizer.json", "train.bin", "train_docs.npy"):
        assert (tmp_path / "again" / name).read_bytes() == (web_data.path / name).read_bytes()
    assert hashlib.sha256((web_data.path / "train.bin").read_bytes()).hexdigest() == again.manifest["train"]["sha256"]
    before = (tmp_path / "again" / "train.bin").stat().st_mtime_ns
    reused = prepare(str(web_corpus["jsonl"]), tmp_path / "again", **WEB_OPTIONS)
    assert reused.reused and reused.manifest == again.manifest
    assert (tmp_path / "again" / "train.bin").stat().st_mtime_ns == before
    other_seed = prepare(str(web_corpus["jsonl"]), tmp_path / "again", split_seed=1, **WEB_OPTIONS)
    assert not other_seed.reused
    assert other_seed.manifest["eval_sets"]["dev"]["sha256"] != again.manifest["eval_sets"]["dev"]["sha256"]


def test_jsonl_gz_and_parquet_prepare_identically(web_corpus, web_data, tmp_path):
    for kind in ("gz", "parquet"):
        manifest = prepare(str(web_corpus[kind]), tmp_path / kind, **WEB_OPTIONS).manifest
        assert manifest["eval_sets"] == web_data.manifest["eval_sets"]
        assert manifest["train"]["sha256"] == web_data.manifest["train"]["sha256"]
        assert manifest["corpus"]["listing_sha256"] != web_data.manifest["corpus"]["listing_sha256"]


def test_stdlib_fixture_manifest(prepared_data):
    data = PreparedData.open(prepared_data)
    manifest = data.manifest
    assert manifest["corpus"]["spec"] == "builtin:python-stdlib"
    assert manifest["python_version"].count(".") == 2
    assert manifest["counts"]["documents"] == 100
    assert len(data.eval_set("dev")) == len(data.eval_set("heldout")) == 8
    assert manifest["tokenizer"]["sha256"] == hashlib.sha256(data.tokenizer_path.read_bytes()).hexdigest()
    assert data.manifest_sha256 == hashlib.sha256((prepared_data / "manifest.json").read_bytes()).hexdigest()
    assert manifest["eval_sets"]["dev"]["sha256"] == data.eval_set("dev").sha256


def test_eval_set_files_are_checked_against_the_manifest(web_data, tmp_path):
    import pyarrow.parquet as pq

    by_path = web_data.eval_set(web_data.path / "heldout.parquet")
    assert by_path.sha256 == web_data.eval_set("heldout").sha256 == web_data.manifest["eval_sets"]["heldout"]["sha256"]
    copy = tmp_path / "copy"
    copy.mkdir()
    for item in web_data.path.iterdir():
        (copy / item.name).write_bytes(item.read_bytes())
    table = pq.read_table(copy / "dev.parquet")
    pq.write_table(table.set_column(1, "domain", [[d + "x" for d in table.column("domain").to_pylist()]]),
                   copy / "dev.parquet")
    with pytest.raises(InputError, match=r"dev.parquet: content does not match the manifest's SHA-256"):
        PreparedData.open(copy).eval_set("dev")


def test_cli_prepares_caps_with_a_warning_and_prints_json(web_corpus, tmp_path):
    result = invoke("prepare", web_corpus["parquet"], "--out", tmp_path, "--eval-docs", 50, "--vocab-size", 320,
                    "--json")
    assert result.exit_code == 0, result.output
    assert "warning: " in result.stderr and "capped at 4 documents each (asked for 50)" in result.stderr
    manifest = json.loads(result.stdout)["manifest"]
    assert manifest["eval_sets"]["dev"]["documents"] == manifest["eval_sets"]["heldout"]["documents"] == 4
    assert manifest["counts"]["excluded_documents"] == 32


def test_cli_decode_errors_skip_counts_fail_exits(tmp_path, web_corpus):
    corpus = tmp_path / "bad.jsonl"
    corpus.write_bytes(web_corpus["jsonl"].read_bytes() + b'{"text": "caf\xe9", "url": "https://x.org/"}\n')
    result = invoke("prepare", corpus, "--out", tmp_path / "skip", "--eval-docs", 3, "--vocab-size", 320)
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "skip" / "manifest.json").read_text())["counts"]["undecodable_documents"] == 1
    result = invoke("prepare", corpus, "--out", tmp_path / "fail", "--eval-docs", 3, "--vocab-size", 320,
                    "--on-decode-error", "fail")
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {corpus}:65: undecodable UTF-8 at byte 13 " \
                                    "(use --on-decode-error skip to skip such documents)"


def _write(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.mark.parametrize("case, message", [
    ("empty", r"the corpus holds no document \(1 empty, 0 undecodable skipped\)"),
    ("no-text", r"no-text.jsonl:1: no `text` field"),
    ("few-groups", r"only 3 domain group\(s\) hold a document of at least 257 bytes"),
    ("missing", r"missing.jsonl: no such file or directory"),
    ("glob", r"nothing-\*.jsonl: the glob matches no file"),
    ("parquet-no-text", r"no-text.parquet: no `text` column \(columns: body, url\)"),
    ("bad-json", r"bad-json.jsonl:2: invalid JSON"),
    ("short", r"fewer than 2 domain groups hold a document of at least 257 tokens"),
    ("too-little-text", r"too little text to train a 8192-entry BPE"),
])
def test_cli_bad_input_is_one_line(tmp_path, web_corpus, prepared_data, case, message):
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = web_corpus["records"]
    spec = {
        "empty": lambda: _write(tmp_path / "empty.jsonl", [{"text": ""}]),
        "no-text": lambda: _write(tmp_path / "no-text.jsonl", [{"body": "x"}]),
        "few-groups": lambda: _write(tmp_path / "few.jsonl", [r for r in records if r["id"] < "doc-03"]),
        "missing": lambda: tmp_path / "missing.jsonl",
        "glob": lambda: tmp_path / "nothing-*.jsonl",
        "parquet-no-text": lambda: pq.write_table(pa.table({"body": ["x"], "url": ["https://a.org"]}),
                                                  tmp_path / "no-text.parquet") or tmp_path / "no-text.parquet",
        "bad-json": lambda: (tmp_path / "bad-json.jsonl").write_text('{"text": "a"}\n{"text": \n')
                            and tmp_path / "bad-json.jsonl",
        # 300 bytes but far fewer than 257 tokens per document under the standard-library tokenizer.
        "short": lambda: _write(tmp_path / "short.jsonl",
                                [{"text": "import os\n" * 30, "url": f"https://h{i}.org"} for i in range(40)]),
        "too-little-text": lambda: _write(tmp_path / "tiny.jsonl",
                                          [{"text": f"{i} " * 300, "url": f"https://h{i}.org"} for i in range(8)]),
    }[case]()
    options = {"too-little-text": ["--vocab-size", 8192], "short": ["--tokenizer", prepared_data / "tokenizer.json"]}
    result = invoke("prepare", spec, "--out", tmp_path / "out", "--eval-docs", 2,
                    *options.get(case, ["--vocab-size", 320]))
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert re.search(message, lines[0]), lines[0]
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.parametrize("args, message", [
    (["", "--out", "out"], "error: corpus: the path is empty; give a file, directory, glob, builtin: or hf: corpus"),
    (["CORPUS", "--out", ""], "error: --out: the path is empty; give a file or directory path"),
    (["CORPUS", "--out", "out", "--tokenizer", ""], "error: --tokenizer: the path is empty; give a file or directory "
                                                    "path"),
])
def test_cli_empty_paths_are_refused_before_reading_the_current_directory(tmp_path, web_corpus, monkeypatch,
                                                                          args, message):
    monkeypatch.chdir(tmp_path)
    result = invoke("prepare", *[web_corpus["jsonl"] if arg == "CORPUS" else arg for arg in args], "--vocab-size", 320)
    assert result.exit_code == 2 and result.stderr.strip() == message
    assert list(tmp_path.iterdir()) == []


def test_cli_warns_about_the_files_a_txt_directory_passes_over(tmp_path, web_corpus):
    corpus = tmp_path / "corpus"
    for record in web_corpus["records"]:
        group = corpus / record["url"].split("/")[2]
        group.mkdir(parents=True, exist_ok=True)
        (group / f"{record['id']}.txt").write_text(record["text"])
    (corpus / "notes.jsonl").write_text('{"text": "left out"}\n')
    (corpus / "README.md").write_text("left out")
    result = invoke("prepare", corpus, "--out", tmp_path / "out", "--eval-docs", 2, "--vocab-size", 320)
    assert result.exit_code == 0, result.output
    assert f"warning: {corpus}: read only the .txt files of the directory; 2 other file(s) passed over" in \
        result.stderr.splitlines()


def test_cli_names_the_files_a_txt_directory_passed_over_when_too_few_documents_are_left(tmp_path, web_corpus):
    corpus = tmp_path / "corpus"
    (corpus / "notes").mkdir(parents=True)
    (corpus / "notes" / "short.txt").write_text("too short for a window")
    for record in web_corpus["records"][:6]:
        (corpus / "notes" / f"{record['id']}.md").write_text(record["text"])
    result = invoke("prepare", corpus, "--out", tmp_path / "out", "--vocab-size", 320)
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.strip().endswith(f"; {corpus}: read only the .txt files of the directory; 6 other file(s) "
                                          "passed over")
    assert not (tmp_path / "out").exists()


def test_cli_hugging_face_without_network_or_package_is_one_line(tmp_path):
    result = invoke("prepare", "hf:HuggingFaceFW/fineweb-edu:sample-10BT", "--out", tmp_path)
    assert result.exit_code == 2
    expected = ("needs the optional `datasets` package" if importlib.util.find_spec("datasets") is None
                else "cannot load the dataset")
    assert expected in result.stderr and len(result.stderr.strip().splitlines()) == 1


def _snapshot(directory):
    """{name: bytes} of every entry of `directory`, hidden ones included."""
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


@pytest.mark.parametrize("case, message", [
    # fails while the corpus is first read
    ("no-text", r"no-text.jsonl:1: no `text` field"),
    # fails after a new tokenizer and evaluation sets were made: every document shares one `id`
    ("shared-ids", r"evaluation documents share `id` values \(5 duplicates\)"),
])
def test_a_failed_prepare_leaves_an_existing_data_directory_byte_for_byte(tmp_path, web_corpus, web_data, case,
                                                                         message):
    out = tmp_path / "data"
    out.mkdir()
    for item in web_data.path.iterdir():
        (out / item.name).write_bytes(item.read_bytes())
    before = _snapshot(out)
    corpus = {
        "no-text": lambda: _write(tmp_path / "no-text.jsonl", [{"body": "x"}]),
        "shared-ids": lambda: _write(tmp_path / "shared.jsonl", [{**r, "id": "same"} for r in web_corpus["records"]]),
    }[case]()
    result = invoke("prepare", corpus, "--out", out, "--eval-docs", 3, "--vocab-size", 300)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and re.search(message, lines[0]), result.stderr
    assert _snapshot(out) == before
    assert PreparedData.open(out).manifest == web_data.manifest


def test_prepare_over_an_existing_directory_replaces_every_file_and_leaves_no_staging(tmp_path, web_corpus, web_data):
    out = tmp_path / "data"
    out.mkdir()
    for item in web_data.path.iterdir():
        (out / item.name).write_bytes(item.read_bytes())
    result = prepare(str(web_corpus["jsonl"]), out, **{**WEB_OPTIONS, "vocab_size": 300})
    assert not result.reused and result.manifest["tokenizer"]["vocab_size"] == 300
    assert sorted(path.name for path in out.iterdir()) == sorted(path.name for path in web_data.path.iterdir())
    data = PreparedData.open(out)
    assert data.manifest == result.manifest
    assert hashlib.sha256((out / "tokenizer.json").read_bytes()).hexdigest() == result.manifest["tokenizer"]["sha256"]
    assert data.eval_set("dev").sha256 == result.manifest["eval_sets"]["dev"]["sha256"]
    assert hashlib.sha256((out / "train.bin").read_bytes()).hexdigest() == result.manifest["train"]["sha256"]
