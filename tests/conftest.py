"""Shared test configuration."""

import functools
import gc
import os
import shutil
import sys

# Tests must never reach a hub or the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Under xdist (the fast loop: one worker per core) each worker computes on one thread, set before torch is
# imported: a worker's own intra-op threads would only contend with the other workers for the same cores.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
# The bytecode of what the tests import, pytest's rewritten test modules included, is cached even where
# PYTHONDONTWRITEBYTECODE is set: compiling some 250 modules again costs every run about 3 s of its collection.
sys.dont_write_bytecode = False

import pytest  # noqa: E402

# .ci/run sets this: there a system program a test needs must be installed, and its absence fails the test.
REQUIRE_SYSTEM_TOOLS = "GATEDV_REQUIRE_SYSTEM_TOOLS"


def require_program(name: str, install: str) -> str:
    """The path of the system program `name`; when it is absent the test is skipped with a one-line reason
    naming it and `install`, or fails where REQUIRE_SYSTEM_TOOLS=1."""
    path = shutil.which(name)
    if path is not None:
        return path
    reason = f"{name} is not installed (install it with: {install})"
    if os.environ.get(REQUIRE_SYSTEM_TOOLS) == "1":
        pytest.fail(f"{reason}; {REQUIRE_SYSTEM_TOOLS}=1 requires it", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pdflatex() -> str:
    return require_program("pdflatex", "apt-get install texlive-latex-base texlive-latex-recommended")


@pytest.fixture(scope="session")
def chromium_program() -> str:
    return require_program("chromium", "apt-get install chromium")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze the objects of every imported module before the tests run: a full garbage collection scans every
    object alive, about 0.2 s with torch, transformers and hypothesis loaded; frozen objects leave each collection
    only what the tests themselves create.

    Also: typer's test runner builds the click command from the app on every call (about 10 ms, and the tests make
    hundreds of calls); the app does not change during a run, so it is built once per app. Only where the collected
    modules imported the runner: tests that run no command do not load typer."""
    gc.freeze()
    testing = sys.modules.get("typer.testing")
    if testing is not None:
        testing._get_command = functools.cache(testing._get_command)


# --- data fixtures ---


@pytest.fixture(scope="session")
def prepared_data(tmp_path_factory):
    """A data directory prepared once per session from the first 100 documents of builtin:python-stdlib.

    8,192-entry tokenizer, 8 development and 8 held-out documents; a few seconds on 2 cores.
    """
    from trainer.data.prepare import prepare

    out = tmp_path_factory.mktemp("prepared-data")
    prepare("builtin:python-stdlib", out, eval_docs=8, max_docs=100, progress=False)
    return out


@pytest.fixture(scope="session")
def web_corpus(tmp_path_factory):
    """A small FineWeb-style corpus written by the tests: the same 64 records as JSONL, JSONL.gz and Parquet.

    16 hosts (mixed case, some with `www.`), 4 documents each: three long ones and one too short to evaluate;
    the text mixes ASCII with multi-byte characters. Returns {"records", "jsonl", "gz", "parquet"}.
    """
    import gzip
    import json

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(20270211)
    syllables = ["ka", "lo", "mi", "ter", "san", "dor", "el", "qui", "ra", "ve", "no", "stu", "café", "naïve", "日本",
                 "🙂", "über", "x9"]
    hosts = [f"{'www.' if i % 3 == 0 else ''}{'Host' if i % 2 else 'host'}{i}.example.{'org' if i % 4 else 'com'}"
             for i in range(16)]
    records = []
    for i, host in enumerate(hosts):
        for j in range(4):
            n_words = 8 if j == 3 else int(rng.integers(220, 320))
            words = ["".join(rng.choice(syllables, size=int(rng.integers(1, 4)))) for _ in range(n_words)]
            records.append({"id": f"doc-{i:02d}-{j}", "url": f"https://{host}/page/{j}?q=1", "dump": "CC-TEST",
                            "text": " ".join(words) + ".\n"})
    out = tmp_path_factory.mktemp("web-corpus")
    lines = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records).encode("utf-8")
    (out / "jsonl").mkdir()
    (out / "jsonl" / "part.jsonl").write_bytes(lines)
    (out / "gz").mkdir()
    (out / "gz" / "part.jsonl.gz").write_bytes(gzip.compress(lines, mtime=0))
    (out / "parquet").mkdir()
    pq.write_table(pa.Table.from_pylist(records), out / "parquet" / "part.parquet")
    return {"records": records, "jsonl": out / "jsonl" / "part.jsonl", "gz": out / "gz" / "part.jsonl.gz",
            "parquet": out / "parquet" / "part.parquet"}


@pytest.fixture
def sample():
    """Skewed per-document loss differences d_i and varying target counts of 400 documents (bootstrap tests)."""
    import numpy as np

    rng = np.random.default_rng(11)
    n_targets = rng.integers(40, 257, size=400).astype(np.float64)
    d = (rng.normal(-0.02, 0.08, size=400) + rng.exponential(0.03, size=400)) * n_targets  # skewed differences
    return d, n_targets


# --- a full disk ---


@pytest.fixture
def full_disk(monkeypatch):
    """A file system that fills up: call it (`full_disk(after=0)`) and every write through the atomic layer
    (`gatedv_stats.core.atomic.HashingWriter`: every file gatedv writes) raises ENOSPC once `after` more bytes were
    written, as the operating system would. Returns the state: `.writes` counts the writes refused."""
    import errno
    import types

    from gatedv_stats.core.atomic import HashingWriter

    state = types.SimpleNamespace(budget=None, writes=0)
    original = HashingWriter.write

    def write(self, data):
        size = memoryview(data).nbytes
        if state.budget is not None and size > state.budget:
            state.writes += 1
            error = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self.error = self.error or error
            raise error
        if state.budget is not None:
            state.budget -= size
        return original(self, data)

    def fill(after: int = 0):
        state.budget = after
        return state

    monkeypatch.setattr(HashingWriter, "write", write)
    return fill
