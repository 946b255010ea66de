"""examples/research-loop.py, shortened: a floor, two candidates decided sequentially and entered in a ledger, and
the report's ledger section."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_research_loop_decides_each_candidate_and_enters_it_in_the_ledger(tmp_path):
    done = subprocess.run([sys.executable, ROOT / "examples" / "research-loop.py", "--out", tmp_path / "loop",
                           "--updates", "4", "--candidates", "3", "--max-seeds", "2"],
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert out.startswith("noise floor of baseline (loss per token)") and "from 5 A/A runs" in out
    decided = re.findall(r"^(gatedv|same|narrow-ffn) +stop: (.+?) \(", out, re.M)
    assert [name for name, _ in decided] == ["gatedv", "same", "narrow-ffn"]
    entered = re.findall(r"^(gatedv|same|narrow-ffn) +stop: (.+?) \(.*\n +ledger: (keep|discard) \(stage-wise p", out,
                         re.M)
    assert len(entered) == 3 and all((kept == "keep") == (stop == "better") for _, stop, kept in entered)
    assert re.search(r"^runs trained for the candidates and their baseline: \d+, against 8 for a fixed design", out,
                     re.M)
    assert "| Step | Candidate | Against |" in out  # the report's ledger section
    shown = subprocess.run(["gatedv", "ledger", tmp_path / "loop" / "ledger.db", "show", "--json"],
                           capture_output=True, text=True, check=True)
    entries = [entry for entry in json.loads(shown.stdout)["entries"] if entry["kind"] is None]
    assert [entry["candidate"] for entry in entries] == ["gatedv", "same", "narrow-ffn"]
    assert all(entry["candidate_files"] and entry["reference_files"] and entry["p_source"] == "stage-wise"
               for entry in entries)
