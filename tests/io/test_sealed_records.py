"""A sealed record whose seal was removed (a noise floor, a sequential design) is refused as damaged, in one line."""

from __future__ import annotations

import json

import pytest

import gatedv_stats as gv
from gatedv_stats.core.errors import InputError
from gatedv_stats.io.designfiles import read_design_file
from gatedv_stats.io.floorfiles import read_floor_file
from gatedv_stats.testing import example_study


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sealed")
    runs = gv.load(example_study(folder / "study"))
    gv.noise_floor([run for run in runs if run.arm == "baseline"], out=folder / "floor.json")
    gv.sequential(runs, design=folder / "design.json", baseline_arm="baseline", variant_arm="gatedv", max_seeds=3)
    return folder


@pytest.mark.parametrize(("name", "read"), [("floor.json", read_floor_file), ("design.json", read_design_file)])
def test_a_record_whose_seal_was_removed_is_refused_as_damaged(records, tmp_path, name, read):
    read(records / name)  # as written: read
    content = json.loads((records / name).read_text())
    del content["sha256"]
    unsealed = tmp_path / name
    unsealed.write_text(json.dumps(content))
    with pytest.raises(InputError, match=f"{name}: damaged: it records no sha256 of its content"):
        read(unsealed)
