"""Sealed records (a noise floor, a sequential design): one whose seal was removed, or a floor sealed with a field of
the wrong kind, is refused in one line naming the file and what is wrong."""

from __future__ import annotations

import json
import re

import pytest

import gatedv_stats as gv
from gatedv_stats.core.errors import InputError
from gatedv_stats.core.integrity import sealed
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


@pytest.mark.parametrize(("field", "value", "message"), [
    ("seed_variance", 1e308, "field 'seed_variance' must be a positive number up to 1e+100"),
    ("n_sources", "x", "field 'n_sources': 'x' is not an integer >= 0"),
    ("values", None, "field 'values' must be a list"),
    ("seeds", 3, "field 'seeds' must be a list"),
    ("inputs", 1.5, "field 'inputs' must be a list"),
])
def test_a_floor_sealed_with_a_field_of_the_wrong_kind_is_refused_naming_it(records, tmp_path, field, value,
                                                                              message):
    content = json.loads((records / "floor.json").read_text())
    content.pop("sha256")
    content[field] = value
    written = tmp_path / "floor.json"
    written.write_text(json.dumps(sealed(content, "sha256")))  # as a writer of a broken floor would seal it
    with pytest.raises(InputError, match=re.escape(f"floor.json: {message}")):
        read_floor_file(written)
