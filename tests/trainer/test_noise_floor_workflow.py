"""examples/noise-floor.md, run as written with short training: five baseline seeds, the floor, one seed of GatedV
and of a candidate that changes nothing, their verdicts and the plan."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "examples" / "noise-floor.md"


@pytest.mark.slow
def test_the_noise_floor_walkthrough_runs_and_gives_one_seed_verdicts(tmp_path):
    script = re.search(r"```bash\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S).group(1)
    env = {**os.environ, "TRAIN_ARGS": "--updates 20 --device cpu"}
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "noise floor of baseline (loss per token)" in out and "4 df, from 5 A/A runs" in out
    assert (tmp_path / "floor.json").is_file()
    verdicts = re.findall(r"^verdict: (.+)$", out, re.M)
    assert len(verdicts) == 2 and all(verdict.startswith(("better", "worse", "no detectable", "equivalent"))
                                      for verdict in verdicts)
    assert verdicts[1].startswith(("equivalent", "no detectable difference"))  # the candidate that changes nothing
    assert out.count("their variance from the noise floor") == 2
    assert "paired seeds needed" in out or "no number of seeds reaches the power" in out
