"""What the test modules share: `gatedv` run in this process, the shape of its refusals, and small fixtures' pieces."""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from typer.testing import CliRunner, Result

import cli

if TYPE_CHECKING:  # torch, scipy and the trainer are imported by the helpers that need them, not by every test module
    from trainer.model.transformer import Transformer

# A vocabulary and context small enough for models built in a test, large enough for every variant.
SMALL_VOCAB = {"vocab_size": 512, "seq_len": 32}


def invoke(*args: object) -> Result:
    """`gatedv ARGS` run in this process; each argument is passed as its string."""
    return CliRunner().invoke(cli.app, [str(arg) for arg in args])


def invoke_with_warnings(*args: object) -> tuple[Result, list[str]]:
    """`invoke`, with the message of every Python warning raised meanwhile (pytest would otherwise swallow it)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = invoke(*args)
    return result, [str(warning.message) for warning in caught]


def invoke_json(*args: object) -> dict:
    """The JSON of `gatedv ARGS --json`, which must succeed."""
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def sweep_json(path: Path, *args: str) -> dict:
    """The JSON of `gatedv sweep PATH --json ARGS`, which must succeed."""
    return invoke_json("sweep", path, *args)


def assert_input_error(result: Result, *fragments: str) -> None:
    """Bad input: exit 2 and a single `error:` line holding every fragment, without a traceback."""
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert result.stderr.startswith("error: ")
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr + result.stdout
    for fragment in fragments:
        assert fragment in result.stderr, (fragment, result.stderr)


def assert_refused(result: Result, out: Path, *messages: str) -> None:
    """A refused evaluation or import: exit 2, a single `error:` line holding every message, and no file `out`."""
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and len(result.stderr.strip().splitlines()) == 1, result.stderr
    for message in messages:
        assert message in result.stderr, result.stderr
    assert not out.exists()


def designs(grid: Path) -> dict[str, dict]:
    """Each design file of the grid's sequential sweep, read with its seal checked: its design and its looks (without
    their inputs, which name the files' paths)."""
    from gatedv_cli.until_decided import design_directory
    from gatedv_stats.analysis.sequential import load_design

    found = {}
    for path in sorted(design_directory(grid).glob("*.json")):
        content = load_design(path).to_dict()
        found[path.name] = {"design": content["design"],
                            "looks": [{k: v for k, v in look.items() if k != "inputs"} for look in content["looks"]]}
    return found


def tree(root: Path) -> dict[str, str]:
    """Every file under `root` (temporary files and locks too) and the SHA-256 of its bytes."""
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file()}


def final_files(root: Path) -> dict[str, str]:
    """`tree` without the hidden files: what lies under final names, not a write's `.NAME.*.tmp` or a `.NAME.lock`."""
    return {name: sha for name, sha in tree(root).items() if not Path(name).name.startswith(".")}


def full_disk_line(result: Result, *fragments: str) -> str:
    """A full disk: exit 4 and one `error:` line (after any progress bars) holding every fragment; no traceback."""
    assert result.exit_code == 4, result.output
    lines = result.stderr.strip().splitlines()
    assert [line for line in lines if line.startswith("error")] == lines[-1:], result.stderr
    assert "Traceback" not in result.output
    for fragment in ("No space left on device", *fragments):
        assert fragment in lines[-1], (fragment, lines[-1])
    return lines[-1]


def ratio(d: np.ndarray, n: np.ndarray, axis: int = -1) -> np.ndarray:
    """The ratio estimator Σd / Σn along `axis`, vectorised as scipy.stats.bootstrap calls it."""
    return np.sum(d, axis=axis) / np.sum(n, axis=axis)


def small_vocab_model(variant: str = "baseline", seed: int = 0, size: str = "tiny") -> Transformer:
    """A `size` model of `variant` over SMALL_VOCAB, initialised from `seed`."""
    from trainer.model.transformer import build_model, model_config

    return build_model(model_config(size, variant, **SMALL_VOCAB), seed)


def tiny_grid(data: object, *, variants: Sequence[str] | dict[str, dict] = ("baseline",), seeds: Sequence[int] = (1,),
              lrs: Sequence[float] = (0.001,), name: str = "grid", **fields: object) -> str:
    """An experiment file of the tiny size on `data`: `variants` presets, or a mapping of new variants to their
    knobs (`[variants.NAME]` tables); `fields` the other keys (updates, eval_every, batch_size, eval_sets, out:
    "runs" unless given)."""
    keys = {"name": name, "data": str(data), "config": "tiny", "seeds": list(seeds), "lrs": list(lrs),
            "out": "runs", **fields}
    lines = [f"{key} = {json.dumps(value)}" for key, value in keys.items()]
    if isinstance(variants, dict):
        for variant, knobs in variants.items():
            lines += [f"[variants.{variant}]", *(f"{knob} = {json.dumps(value)}" for knob, value in knobs.items())]
    else:
        lines.insert(3, f"variants = {json.dumps(list(variants))}")
    return "\n".join(lines) + "\n"
