"""Every command checks where it writes before any work: one `error:` line naming the flag and the path, exit 2.

Each command gets inputs that do not exist: the output error coming out instead of an input error shows the
check runs first. Non-writable directories are simulated by patching the `os.access`-based check, since the
superuser (as in CI containers) may write into a read-only directory.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

import gatedv_stats.core.outputs as outputs
from gatedv_stats.core.errors import InputError
from gatedv_stats.core.outputs import check_output_dir, check_output_file
from gatedv_stats.io.lossfiles import write_loss_file
from helpers import invoke

SWEEP = """
name = "grid"
data = "missing-data"
config = "tiny"
variants = ["baseline"]
seeds = [1]
lrs = [0.001]
out = "{out}"
"""


def _sweep_args(tmp_path: Path, out: Path) -> list[str]:
    path = tmp_path / "grid.toml"
    path.write_text(SWEEP.format(out=out))
    return ["sweep", str(path), "--device", "cpu"]


# command: (arguments given the output path, the flag an error names, "file" or "dir")
COMMANDS = {
    "train": (lambda tmp, out: ["train", "--data", str(tmp / "missing"), "--config", "tiny", "--seed", "1",
                                "--out", str(out)], "--out", "dir"),
    "evaluate": (lambda tmp, out: ["evaluate", str(tmp / "missing.pt"), "--out", str(out)], "--out", "file"),
    "prepare": (lambda tmp, out: ["prepare", str(tmp / "missing.jsonl"), "--out", str(out)], "--out", "dir"),
    "report": (lambda tmp, out: ["report", str(tmp / "missing"), "--format", "md", "--out", str(out)], "--out", "file"),
    "bench": (lambda tmp, out: ["bench", str(tmp / "a.pt"), "--variant", str(tmp / "b.pt"), "--out", str(out)],
              "--out", "file"),
    "moments": (lambda tmp, out: ["moments", "--data", str(tmp / "missing"), "--config", "tiny", "--seed", "1",
                                  "--out", str(out)], "--out", "file"),
    "select-lr": (lambda tmp, out: ["select-lr", str(tmp / "missing.toml"), "--out", str(out)], "--out", "file"),
    "demo": (lambda tmp, out: ["demo", "--out", str(out), "--corpus", str(tmp / "missing.jsonl")], "--out", "dir"),
    "export-hf": (lambda tmp, out: ["export-hf", str(tmp / "missing.pt"), str(out)], "OUT_DIR", "dir"),
    "export-tasks": (lambda tmp, out: ["export-tasks", str(tmp / "missing"), "--out", str(out)], "--out", "dir"),
    "sweep": (_sweep_args, "grid.toml: out", "dir"),
}


def _file_name(command: str) -> str:
    """An output name of the kind the command writes."""
    return {"report": "out.md", "evaluate": "out.parquet"}.get(command, "out")


def _assert_output_error(result, flag: str, *fragments: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert lines[0].startswith("error: ") and f"{flag}: " in lines[0], lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def _wrong_kind(tmp_path: Path, command: str, kind: str) -> tuple[Path, str]:
    """An output path that exists as the other kind; returns it and the path the error names."""
    if command == "report":  # a directory means report.md inside it, here itself a directory
        (tmp_path / "out" / "report.md").mkdir(parents=True)
        return tmp_path / "out", str(tmp_path / "out" / "report.md")
    out = tmp_path / "out"
    if kind == "dir":
        out.write_text("a file")
    else:
        out.mkdir()
    return out, str(out)


@pytest.mark.parametrize("command", COMMANDS)
def test_an_output_of_the_wrong_kind_is_one_line(command, tmp_path):
    make_args, flag, kind = COMMANDS[command]
    out, named = _wrong_kind(tmp_path, command, kind)
    args = make_args(tmp_path, out)
    before = sorted(tmp_path.rglob("*"))
    result = invoke(*args)
    _assert_output_error(result, flag, named, "is a directory" if kind == "file" else "is not a directory")
    assert sorted(tmp_path.rglob("*")) == before  # nothing written, nothing removed


@pytest.mark.parametrize("command", COMMANDS)
def test_an_output_under_a_file_is_one_line(command, tmp_path):
    make_args, flag, _ = COMMANDS[command]
    (tmp_path / "plain").write_text("a file")
    out = tmp_path / "plain" / "sub" / _file_name(command)
    args = make_args(tmp_path, out)
    before = sorted(tmp_path.rglob("*"))
    result = invoke(*args)
    _assert_output_error(result, flag, f"cannot create {out}: {tmp_path / 'plain'} is not a directory")
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize("command", COMMANDS)
def test_an_output_in_a_directory_without_write_permission_is_one_line(command, tmp_path, monkeypatch):
    make_args, flag, _ = COMMANDS[command]
    args = make_args(tmp_path, tmp_path / "locked" / _file_name(command))  # sweep writes its TOML first
    (tmp_path / "locked").mkdir()
    monkeypatch.setattr(outputs, "_writable", lambda directory: Path(directory).name != "locked")
    result = invoke(*args)
    _assert_output_error(result, flag, f"{tmp_path / 'locked'} is not writable (permission denied)")
    assert list((tmp_path / "locked").iterdir()) == []


def test_writable_is_os_access_and_a_read_only_directory_fails_where_access_says_so(tmp_path, monkeypatch):
    """The check asks os.access for write and search permission on the directory that would receive the output."""
    asked = []

    def access(path, mode):
        asked.append((Path(path), mode))
        return False

    monkeypatch.setattr(outputs.os, "access", access)
    with pytest.raises(InputError, match="not writable"):
        check_output_file(tmp_path / "new" / "file.json", "--out")
    assert asked == [(tmp_path, os.W_OK | os.X_OK)]
    with pytest.raises(InputError, match=r"--out: .*run: directory is not writable"):
        (tmp_path / "run").mkdir()
        check_output_dir(tmp_path / "run", "--out")


def test_good_output_locations_pass(tmp_path):
    check_output_file(tmp_path / "a" / "b" / "file.parquet", "--out")
    check_output_file(tmp_path / "a.txt", "--out")
    (tmp_path / "existing.txt").write_text("replaced by the command")
    check_output_file(tmp_path / "existing.txt", "--out")
    check_output_dir(tmp_path, "--out")
    check_output_dir(tmp_path / "new" / "deeper", "--out")
    check_output_file("relative-file.json", "--out")
    assert sorted(tmp_path.iterdir()) == [tmp_path / "existing.txt"]  # a check creates nothing


def test_an_empty_output_path_is_refused_not_taken_for_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for check in (check_output_file, check_output_dir):
        with pytest.raises(InputError, match="^--out: the path is empty"):
            check(" ", "--out")
    for command, (make_args, flag, _) in COMMANDS.items():
        if command != "sweep":  # its output is a field of the experiment file
            _assert_output_error(invoke(*make_args(tmp_path, "")), flag, "the path is empty")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [["evaluate", "missing.pt"], ["evaluate", "--hf", "missing-model", "--data", "x"],
                                  ["import", "lm-eval", "missing.jsonl", "--arm", "a"]])
def test_a_loss_file_must_be_named_parquet_before_any_work(args, tmp_path):
    out = tmp_path / "losses.csv"
    result = invoke(*args, "--out", out)
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: --out: {out}: the file is written as Parquet; name it *.parquet"
    with pytest.raises(InputError, match=r"loss file: .*losses\.csv: the file is written as Parquet"):
        write_loss_file(out, pd.DataFrame({"doc_id": ["a"], "n_targets": [1], "loss_sum": [1.0]}),
                        {"arm": "a", "seed": 1})
    assert not out.exists()


FILE_COMMANDS = [command for command, (_, _, kind) in COMMANDS.items() if kind == "file"]


@pytest.mark.parametrize("command", FILE_COMMANDS)
def test_a_pipe_at_the_output_is_refused_and_left_in_place(command, tmp_path):
    """An atomic write renames over its target: a pipe, socket or device there would be replaced by a file."""
    pipe = tmp_path / _file_name(command)
    os.mkfifo(pipe)
    make_args, flag, _ = COMMANDS[command]
    _assert_output_error(invoke(*make_args(tmp_path, pipe)), flag, f"{pipe} exists and is not a regular file")
    assert pipe.is_fifo()


@pytest.mark.parametrize("args", [
    lambda tmp: ["select-lr", str(tmp / "grid.toml"), "--out", str(tmp / "grid.toml")],
    lambda tmp: ["bench", str(tmp / "a.pt"), "--variant", str(tmp / "b.pt"), "--out", str(tmp / "a.pt")],
    lambda tmp: ["evaluate", str(tmp / "run.pt"), "--eval-set", str(tmp / "docs.parquet"), "--out",
                 str(tmp / "docs.parquet")],
    lambda tmp: ["import", "lm-eval", str(tmp / "docs.parquet"), "--arm", "a", "--out", str(tmp / "docs.parquet")],
], ids=["select-lr", "bench", "evaluate", "import"])
def test_an_output_that_is_one_of_the_inputs_is_refused_before_any_work(args, tmp_path):
    result = invoke(*args(tmp_path))
    _assert_output_error(result, "--out", "is one of the inputs; write the output to another file")
    assert list(tmp_path.iterdir()) == []


def test_a_report_never_replaces_a_file_it_reads(tmp_path):
    """The default output sits in the experiment directory; an --out that names one of the loss files found there
    (also through a link) is refused, and the file keeps its bytes."""
    from experiments import write_runs

    write_runs(tmp_path / "exp", {"baseline": [20.0, 20.5], "gatedv": [19.6, 20.0]}, eval_set="dev", lr=0.004)
    loss_file = next((tmp_path / "exp").rglob("baseline_1.parquet"))
    before = loss_file.read_bytes()
    (tmp_path / "link.md").symlink_to(loss_file)
    for out in (loss_file, tmp_path / "link.md"):
        result = invoke("report", tmp_path / "exp", "--format", "md", "--out", out)
        _assert_output_error(result, "--out", f"{out} is one of the inputs")
    assert loss_file.read_bytes() == before
    assert not list(tmp_path.glob("*_figures"))


@pytest.mark.parametrize("command", ["evaluate", "moments", "report", "bench"])
def test_an_output_inside_a_prepared_data_directory_is_refused(command, tmp_path):
    """A prepared data directory's files (manifest, tokenizer, evaluation sets) are every run's inputs."""
    data = tmp_path / "data"
    data.mkdir()
    for name in ("manifest.json", "tokenizer.json"):
        (data / name).write_text("{}")
    make_args, flag, _ = COMMANDS[command]
    out = data / ("dev.parquet" if command == "evaluate" else "manifest.json" if command == "moments" else "out.md")
    before = {path: path.read_bytes() for path in data.iterdir()}
    _assert_output_error(invoke(*make_args(tmp_path, out)), flag, f"{out} is inside the prepared data directory")
    assert {path: path.read_bytes() for path in data.iterdir()} == before


def test_a_report_named_for_another_format_is_refused(tmp_path):
    out = tmp_path / "r.html"
    result = invoke("report", tmp_path / "missing", "--format", "md", "--out", out)
    _assert_output_error(result, "--out", f"{out} ends in .html, the html format's name, but --format is md; name it "
                                          "*.md or give --format html")
