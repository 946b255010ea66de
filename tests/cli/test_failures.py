"""The failure contract of the statistics commands: nothing read is lost, no floating-point warning reaches the
user, every `--json` is strict JSON, and the tests that need a system program say so when it is absent."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import cli
import gatedv_stats.io.runfiles as runfiles
from conftest import REQUIRE_SYSTEM_TOOLS, require_program
from gatedv_stats.core.errors import InputError
from gatedv_stats.io.lossfiles import MAX_TARGET_NLL, validate_docs, write_loss_file
from gatedv_stats.stats import metrics
from gatedv_stats.testing import synthetic_runs
from helpers import invoke_with_warnings
from trainer.model.transformer import build_model, model_config
from trainer.run.checkpoint import save_checkpoint

N_DOCS = 12


def strict_loads(text: str) -> object:
    """json.loads that rejects NaN / Infinity tokens."""
    def reject(token: str) -> None:
        raise ValueError(f"non-standard JSON constant {token}")
    return json.loads(text, parse_constant=reject)


def assert_one_error(result, caught: list[str], *fragments: str) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output and caught == []
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def write_runs(root: Path, seeds=(1, 2, 3)) -> None:
    """Baseline and gatedv loss files of `seeds`, plus files a run tree also holds that are no loss files."""
    runs = synthetic_runs({"baseline": [30.0, 30.4, 29.9, 30.2][:len(seeds)],
                           "gatedv": [29.5, 29.9, 29.7, 29.6][:len(seeds)]}, n_docs=N_DOCS, rng_seed=4,
                          seeds=list(seeds))
    for run in runs:
        write_loss_file(root / run.arm / f"seed{run.seed}" / "dev.parquet", run.docs, {**run.meta, "eval_set": "dev"})
    # An evaluation set (a data directory's dev.parquet) and a curve: readable, without loss_sum, not loss files.
    (root / "data").mkdir()
    pd.DataFrame({"doc_id": ["a", "b"], "domain": ["x", "y"], "n_bytes": [3, 4]}).to_parquet(
        root / "data" / "dev.parquet")
    pd.DataFrame({"arm": ["baseline"], "seed": [1], "lr": [0.001], "step": [0], "dev_nll": [9.0]}).to_csv(
        root / "baseline" / "seed1" / "curve.csv", index=False)


def _truncated(root: Path) -> Path:
    path = root / "extra" / "truncated.parquet"
    path.parent.mkdir(exist_ok=True)
    data = (root / "baseline" / "seed1" / "dev.parquet").read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _undecodable(root: Path) -> Path:
    path = root / "extra" / "latin1.csv"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes("doc_id,n_targets,loss_sum,arm,seed\ncafé,256,800.5,baseline,9\n".encode("latin-1"))
    return path


def _denied(root: Path, monkeypatch) -> Path:
    """A loss file whose read fails with EACCES (patched: the superuser may read any file)."""
    path = root / "extra" / "denied.parquet"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes((root / "gatedv" / "seed1" / "dev.parquet").read_bytes())
    original = pq.read_schema

    def read_schema(where, *args, **kwargs):
        if Path(where).name == path.name:
            raise PermissionError(13, "Permission denied", str(where))
        return original(where, *args, **kwargs)

    monkeypatch.setattr(runfiles.pq, "read_schema", read_schema)
    return path


UNREADABLE = {
    "truncated parquet": (lambda root, mp: _truncated(root), "cannot read"),
    "undecodable csv": (lambda root, mp: _undecodable(root), "cannot read"),
    "permission denied": (_denied, "Permission denied"),
}


@pytest.mark.parametrize("kind", UNREADABLE)
def test_an_unreadable_file_in_a_directory_is_an_error_naming_it(kind, tmp_path, monkeypatch):
    write_runs(tmp_path)
    make, reason = UNREADABLE[kind]
    bad = make(tmp_path, monkeypatch)
    result, caught = invoke_with_warnings("bootstrap", tmp_path, "--baseline-arm", "baseline", "--variant-arm",
                                          "gatedv")
    assert_one_error(result, caught, f"error: {bad}: ", reason)


@pytest.mark.parametrize("command", [["bootstrap", "{root}", "--baseline-arm", "baseline", "--variant-arm", "gatedv"],
                                     ["report", "{root}", "--format", "md", "--out", "{root}/report.md"]])
def test_a_directory_that_cannot_be_listed_is_an_error_naming_it(command, tmp_path, monkeypatch):
    """A seed directory without read permission (patched for the superuser, whom permissions do not stop)."""
    write_runs(tmp_path)
    denied = tmp_path / "gatedv" / "seed2"
    original = os.scandir

    def scandir(path="."):
        if Path(path) == denied:
            raise PermissionError(13, "Permission denied", str(path))
        return original(path)

    if os.geteuid() == 0:
        monkeypatch.setattr(os, "scandir", scandir)
    denied.chmod(0)
    try:
        result, caught = invoke_with_warnings(*(arg.format(root=tmp_path) for arg in command))
    finally:
        denied.chmod(0o755)
    assert_one_error(result, caught, f"error: {denied}: cannot list the directory: Permission denied")


def test_readable_files_without_loss_sum_are_not_loss_files(tmp_path):
    write_runs(tmp_path)
    result, caught = invoke_with_warnings("bootstrap", tmp_path, "--baseline-arm", "baseline", "--variant-arm",
                                          "gatedv", "--json", "--samples", "100")
    assert result.exit_code == 0, result.output
    assert strict_loads(result.stdout)["n_pairs"] == 3 and result.stderr == "" and caught == []


def _with_every_unreadable(root: Path, monkeypatch) -> list[str]:
    write_runs(root)
    return sorted(str(make(root, monkeypatch)) for make, _ in UNREADABLE.values())


# command: (arguments, the number of paired seeds in its JSON)
SKIPPING = {
    "bootstrap": (["{root}", "--baseline-arm", "baseline", "--variant-arm", "gatedv", "--samples", "100"],
                  lambda payload: payload["n_pairs"]),
    "analyze": (["--baseline", "{root}", "--variant", "{root}/gatedv", "--baseline-arm", "baseline", "--samples",
                 "100", "--permutations", "100"], lambda payload: payload["comparison"]["n_pairs"]),
    "arms": (["{root}", "--reference", "baseline", "--permutations", "100"],
             lambda payload: payload["arms"][0]["n_pairs"]),
    "plan": (["{root}", "--effect", "0.02"], lambda payload: payload["n_seeds"]),
}


@pytest.mark.parametrize("command", SKIPPING)
def test_skip_unreadable_warns_lists_them_and_gives_the_complete_result(command, tmp_path, monkeypatch):
    unreadable = _with_every_unreadable(tmp_path, monkeypatch)
    arguments, n_pairs = SKIPPING[command]
    args = [command, *(arg.format(root=tmp_path) for arg in arguments)]
    result, caught = invoke_with_warnings(*args, "--json")
    assert_one_error(result, caught, unreadable[0])  # without the flag: the first of them, by path
    result, caught = invoke_with_warnings(*args, "--json", "--skip-unreadable")
    assert result.exit_code == 0, result.output
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning: skipped unreadable")]
    assert [line.split()[3].rstrip(":") for line in warned] == unreadable and caught == []
    payload = strict_loads(result.stdout)
    assert [entry["path"] for entry in payload["skipped_unreadable"]] == unreadable
    assert all(entry["reason"] for entry in payload["skipped_unreadable"])
    assert n_pairs(payload) == 3  # every readable run is in the result


def test_report_lists_the_skipped_files_in_its_provenance(tmp_path, monkeypatch):
    unreadable = _with_every_unreadable(tmp_path, monkeypatch)
    out = tmp_path / "report.md"
    args = ["report", tmp_path, "--format", "md", "--samples", "100", "--out", out]
    result, caught = invoke_with_warnings(*args)
    assert_one_error(result, caught, unreadable[0])
    assert not out.exists()
    result, caught = invoke_with_warnings(*args, "--skip-unreadable")
    assert result.exit_code == 0, result.output
    assert result.stderr.count("warning: skipped unreadable") == 3 and result.stdout.strip() == f"wrote {out}"
    provenance = out.read_text().split("Provenance", 1)[1]
    assert "Unreadable files skipped (3; --skip-unreadable)" in provenance
    for path in unreadable:
        assert os.path.relpath(path, tmp_path) in provenance


# --- numbers ---


def _overflowing_runs(root: Path, loss_sum: float) -> list[str]:
    args = []
    for arm, flag in (("baseline", "--baseline"), ("gatedv", "--variant")):
        args.append(flag)
        for seed in (1, 2, 3):
            path = root / f"{arm}{seed}.csv"
            pd.DataFrame({"doc_id": [f"d{i}" for i in range(5)], "n_targets": 256,
                          "loss_sum": loss_sum * (1 + seed / 1000), "arm": arm, "seed": seed}).to_csv(path, index=False)
            args.append(str(path))
    return args


@pytest.mark.parametrize("command", ["bootstrap", "analyze"])
def test_loss_sums_near_the_float64_limit_are_one_row_naming_error_without_warnings(command, tmp_path):
    result, caught = invoke_with_warnings(command, *_overflowing_runs(tmp_path, 1e308), "--json")
    assert_one_error(result, caught, f"{tmp_path / 'baseline1.csv'}: row 1: loss_sum is more than "
                                     f"{MAX_TARGET_NLL:g} nats per target")


def _runs_at_the_limit(root: Path) -> Path:
    """Three seed pairs whose runs lie at the per-target bound or at zero, the two arms crossed: the widest spread
    of perplexities a valid input can hold."""
    rows = [{"arm": arm, "seed": seed, "doc_id": f"d{i}", "n_targets": 256, "domain": f"g{i % 2}",
             "loss_sum": MAX_TARGET_NLL * 256 * ((seed + (arm == "gatedv")) % 2) * (1 - i / 1000)}
            for arm in ("baseline", "gatedv") for seed in (1, 2, 3) for i in range(N_DOCS)]
    pd.DataFrame(rows).to_csv(root / "limit.csv", index=False)
    return root / "limit.csv"


PAIR = ["--baseline-arm", "baseline", "--variant-arm", "gatedv", "--samples", "100"]


@pytest.mark.parametrize("command", [
    ["bootstrap", "{table}", "--method", "bca", *PAIR],
    ["analyze", "--baseline", "{table}", "--variant", "{table}", "--by", "domain", *PAIR],
    ["arms", "{table}", "--reference", "baseline"],
    ["report", "{table}", "--format", "md", "--samples", "100", "--out", "{root}/report.md"],
])
def test_loss_sums_at_the_limit_compute(command, tmp_path):
    """Every accepted input computes: the bound keeps sums and squares of perplexities finite."""
    table = _runs_at_the_limit(tmp_path)
    result, caught = invoke_with_warnings(*(arg.format(table=table, root=tmp_path) for arg in command))
    assert result.exit_code == 0 and caught == [], result.output


@pytest.mark.parametrize("command", ["bootstrap", "analyze"])
def test_a_floating_point_fault_in_the_statistics_is_one_error_line(command, tmp_path, monkeypatch):
    """A statistic that overflows (here perplexities made to) ends as one line, without a warning."""
    monkeypatch.setattr(metrics, "perplexity", lambda nll: np.exp(np.asarray(nll, dtype=np.float64) * 1000))
    result, caught = invoke_with_warnings(command, *_overflowing_runs(tmp_path, 5 * 256), "--samples", "100", "--json")
    assert_one_error(result, caught, "error: numerical failure (overflow encountered in")


def test_every_valid_column_sums_to_a_finite_float64():
    """Rows at the per-target bound with the largest n_targets still sum, and exponentiate, finitely."""
    n_targets = np.full(10_000, 2**53)
    docs = validate_docs(pd.DataFrame({"doc_id": np.arange(10_000).astype(str), "n_targets": n_targets,
                                       "loss_sum": MAX_TARGET_NLL * n_targets}), "x")
    assert np.isfinite(docs["loss_sum"].sum()) and np.isfinite(np.exp(docs["loss_sum"].sum() / n_targets.sum()) ** 2)
    with pytest.raises(InputError, match=rf"^x: row 2: loss_sum is more than {MAX_TARGET_NLL:g} nats per target"):
        validate_docs(pd.DataFrame({"doc_id": ["a", "b"], "n_targets": [1, 1],
                                    "loss_sum": [MAX_TARGET_NLL, MAX_TARGET_NLL + 1e-9]}), "x")


# --- strict JSON from every command ---


@pytest.fixture(scope="module")
def tiny_run(prepared_data, tmp_path_factory):
    """A two-update tiny run (checkpoint and curve) trained through the CLI, with its --json output."""
    run_dir = tmp_path_factory.mktemp("tiny") / "run"
    result = CliRunner().invoke(cli.app, ["train", "--data", str(prepared_data), "--config", "tiny", "--seed", "1",
                                          "--updates", "2", "--batch-size", "2", "--out", str(run_dir),
                                          "--device", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    return run_dir, result.stdout


def _check_strict(result) -> dict:
    assert result.exit_code == 0, result.output
    return strict_loads(result.stdout)


@pytest.mark.slow
def test_training_and_evaluation_json_is_strict(tiny_run, prepared_data, tmp_path):
    run_dir, train_json = tiny_run
    assert math.isfinite(strict_loads(train_json)["dev_nll"])
    runner = CliRunner()
    _check_strict(runner.invoke(cli.app, ["evaluate", str(run_dir / "checkpoint.pt"), "--out",
                                          str(tmp_path / "d.parquet"), "--device", "cpu", "--json"]))
    _check_strict(runner.invoke(cli.app, ["moments", "--data", str(prepared_data), "--config", "tiny", "--seed", "1",
                                          "--windows", "2", "--device", "cpu", "--json"]))
    _check_strict(runner.invoke(cli.app, ["params", "--config", "small", "--json"]))
    _check_strict(runner.invoke(cli.app, ["params", "--knobs", "--json"]))
    copy = tmp_path / "data"
    copy.mkdir()
    for path in prepared_data.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    assert _check_strict(runner.invoke(cli.app, ["prepare", "builtin:python-stdlib", "--out", str(copy), "--eval-docs",
                                                 "8", "--max-docs", "100", "--json"]))["reused"] is True


@pytest.mark.slow
def test_bench_json_is_strict(tmp_path):
    paths = []
    for variant in ("baseline", "gatedv"):
        paths.append(tmp_path / f"{variant}.pt")
        save_checkpoint(paths[-1], build_model(model_config("tiny", variant, vocab_size=256, seq_len=16), 1),
                        extra={"run": {"seed": 1}})
    result = CliRunner().invoke(cli.app, ["bench", str(paths[0]), "--variant", str(paths[1]), "--rounds", "1",
                                          "--warmup", "0", "--calls", "1", "--batch", "1", "--device", "cpu", "--json",
                                          "--out", str(tmp_path / "bench.json")])
    assert _check_strict(result)["format"] == "gatedv-bench-1"
    strict_loads((tmp_path / "bench.json").read_text())


@pytest.mark.slow
def test_sweep_and_select_lr_json_after_a_diverged_run_is_strict(prepared_data, tmp_path):
    """The learning rate 1e3 diverges: its status is diverged and its development NLL null, listed as such."""
    grid = tmp_path / "grid.toml"
    grid.write_text(f'name = "g"\ndata = "{prepared_data}"\nconfig = "tiny"\nvariants = ["baseline"]\nseeds = [1]\n'
                    'lrs = [0.001, 1000.0]\nupdates = 3\neval_every = 1\nbatch_size = 2\nout = "runs"\n')
    runs = _check_strict(CliRunner().invoke(cli.app, ["sweep", str(grid), "--device", "cpu", "--json"]))["runs"]
    by_lr = {run["lr"]: run for run in runs}
    assert by_lr[1000.0]["status"] == "diverged" and by_lr[1000.0]["dev_nll"] is None
    assert by_lr[0.001]["status"] == "finished" and math.isfinite(by_lr[0.001]["dev_nll"])
    selected = _check_strict(CliRunner().invoke(cli.app, ["select-lr", str(grid), "--seeds", "2", "--json"]))
    assert selected["selected"] == {"baseline": 0.001}


def test_demo_json_is_strict_with_an_undefined_throughput(tmp_path, monkeypatch):
    """The demo's own work is tested in test_demo.py; here a result with a NaN goes through the command."""
    import demo

    result = demo.DemoResult(out=str(tmp_path), corpus="c", updates=1, seeds=(1, 2), eval_docs={"dev": 1},
                             comparisons={}, reports=(), wall_seconds=1.0, tokens_per_second=math.nan,
                             stage_seconds={"training": 1.0})
    monkeypatch.setattr(demo, "run_demo", lambda *args, **kwargs: result)
    payload = _check_strict(CliRunner().invoke(cli.app, ["demo", "--out", str(tmp_path), "--json"]))
    assert payload["tokens_per_second"] is None and payload["non_finite_as_null"] == ["tokens_per_second"]


@pytest.mark.parametrize("command", [
    ["bootstrap", "--baseline", "{b}", "--variant", "{v}", "--samples", "100"],
    ["analyze", "--baseline", "{b}", "--variant", "{v}", "--samples", "100", "--permutations", "100"],
    ["arms", "{b}", "{v}", "--reference", "baseline", "--permutations", "100"],
])
def test_statistics_json_with_one_seed_is_strict_and_leaves_the_undefined_null(command, tmp_path):
    write_runs(tmp_path, seeds=(1,))
    b, v = tmp_path / "baseline" / "seed1" / "dev.parquet", tmp_path / "gatedv" / "seed1" / "dev.parquet"
    result, caught = invoke_with_warnings(*[arg.format(b=b, v=v) for arg in command], "--json")
    _check_strict(result)
    assert ": null" in result.stdout and caught == []  # seed-level spreads and tests are undefined for one seed


def test_plan_json_is_strict(tmp_path):
    write_runs(tmp_path, seeds=(1, 2))
    result, _ = invoke_with_warnings("plan", tmp_path, "--effect", "0.02", "--json")
    assert _check_strict(result)["baseline_arm"] == "baseline"


# --- system programs ---


def test_a_missing_system_program_skips_with_the_install_command_unless_ci_requires_it(monkeypatch):
    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv(REQUIRE_SYSTEM_TOOLS, raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped:
        require_program("pdflatex", "apt-get install texlive-latex-base")
    assert str(skipped.value) == "pdflatex is not installed (install it with: apt-get install texlive-latex-base)"
    monkeypatch.setenv(REQUIRE_SYSTEM_TOOLS, "1")
    with pytest.raises(pytest.fail.Exception, match=r"^pdflatex is not installed .*; GATEDV_REQUIRE_SYSTEM_TOOLS=1"):
        require_program("pdflatex", "apt-get install texlive-latex-base")


def test_an_installed_system_program_is_found_on_the_path(tmp_path, monkeypatch):
    program = tmp_path / "chromium"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert require_program("chromium", "apt-get install chromium") == str(program)


@pytest.mark.parametrize("args, line", [
    (["bootstrap", "--foo"], "error: No such option: --foo (see 'gatedv bootstrap --help')"),
    (["bootstrap", "--samples", "abc"], "error: Invalid value for '--samples'"),
    (["sweep"], "error: Missing argument 'experiment' (see 'gatedv sweep --help')"),
    (["nosuch"], "error: No such command 'nosuch' (see 'gatedv --help')"),
])
def test_a_usage_error_is_one_line_naming_the_help(args, line):
    result = CliRunner().invoke(cli.app, args, prog_name="gatedv")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [result.stderr.strip()] and result.stderr.startswith(line), result.stderr
    assert result.stdout == ""


def test_a_failure_after_skipping_unreadable_files_still_names_them(tmp_path, monkeypatch):
    """The error that ends the command comes after the warnings of the files it passed over, which may be why."""
    write_runs(tmp_path)
    unreadable = tmp_path / "gatedv" / "seed2" / "dev.parquet"
    unreadable.write_bytes(b"not parquet")
    result, _ = invoke_with_warnings("bootstrap", tmp_path, "--baseline-arm", "baseline", "--variant-arm", "gatedv",
                                     "--skip-unreadable")
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"warning: skipped unreadable {unreadable}: ")
    assert lines[1].startswith("error: seeds present in one arm only: baseline 2")
    result, _ = invoke_with_warnings("bootstrap", tmp_path, "--baseline-arm", "baseline", "--variant-arm", "gatedv",
                                     "--skip-unreadable", "--allow-unpaired", "--samples", "100")
    assert result.exit_code == 0 and result.stderr.count("warning: skipped unreadable") == 1, result.stderr
