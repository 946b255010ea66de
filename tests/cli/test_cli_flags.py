"""Every invalid numeric flag of every command: exit 2 and one `error:` line that names the flag, no traceback.

The checks run before any expensive work, so each case needs at most small input files.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cli import app
from gatedv_stats.io.lossfiles import write_loss_file
from gatedv_stats.testing import synthetic_runs
from helpers import assert_input_error, invoke

runner = CliRunner()


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("runs")
    for run in synthetic_runs({"baseline": [30.0, 30.4, 29.9], "gatedv": [29.5, 29.9, 29.6]}, n_docs=12, rng_seed=2):
        write_loss_file(folder / f"{run.arm}_{run.seed}.parquet", run.docs, {**run.meta, "eval_set": "dev"})
    return folder


def pair(folder):
    return ["--baseline", *(str(path) for path in sorted(folder.glob("baseline_*"))),
            "--variant", *(str(path) for path in sorted(folder.glob("gatedv_*")))]


CASES = [  # command, arguments before the flag (callable of the fixtures), flag, bad value
    ("bootstrap", pair, "--samples", "1"),
    ("bootstrap", pair, "--level", "0"),
    ("bootstrap", pair, "--seed", "-1"),
    ("analyze", pair, "--samples", "0"),
    ("analyze", pair, "--level", "1"),
    ("analyze", pair, "--seed", "-3"),
    ("analyze", pair, "--permutations", "0"),
    ("analyze", pair, "--bins", "0"),
    ("analyze", pair, "--min-docs", "1"),
    ("arms", lambda d: [str(d), "--reference", "baseline"], "--alpha", "1.5"),
    ("arms", lambda d: [str(d), "--reference", "baseline"], "--permutations", "0"),
    ("arms", lambda d: [str(d), "--reference", "baseline"], "--seed", "-1"),
    ("plan", lambda d: [str(d), "--effect", "0.02"], "--alpha", "0"),
    ("plan", lambda d: [str(d), "--effect", "0.02"], "--power", "1"),
    ("plan", lambda d: [str(d)], "--effect", "-1"),
    ("report", lambda d: [str(d), "--out", str(d / "r.md"), "--format", "md"], "--samples", "1"),
    ("report", lambda d: [str(d), "--out", str(d / "r.md"), "--format", "md"], "--seed", "-1"),
]


@pytest.mark.parametrize(("command", "before", "flag", "value"), CASES,
                         ids=[f"{c}{f}={v}" for c, _, f, v in CASES])
def test_invalid_numeric_flag_is_one_line_naming_it(runs_dir, command, before, flag, value):
    result = runner.invoke(app, [command, *before(runs_dir), flag, value])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag}: "), result.stderr
    assert "Traceback" not in result.output


TRAINER_CASES = [  # no data needed: each check runs before any file is opened
    (["train", "--data", "nowhere", "--out", "run"], "--seed", "-1"),
    (["train", "--data", "nowhere", "--seed", "1", "--out", "run"], "--lr", "0"),
    (["train", "--data", "nowhere", "--seed", "1", "--out", "run"], "--updates", "0"),
    (["train", "--data", "nowhere", "--seed", "1", "--out", "run"], "--batch-size", "0"),
    (["train", "--data", "nowhere", "--seed", "1", "--out", "run"], "--eval-every", "0"),
    (["evaluate", "missing.pt", "--out", "x.parquet"], "--batch-size", "0"),
    (["moments", "--data", "nowhere", "--seed", "1"], "--windows", "0"),
    (["moments", "--data", "nowhere"], "--seed", "-2"),
    (["demo", "--out", "demo"], "--seeds", "1"),
    (["demo", "--out", "demo"], "--updates", "0"),
    (["prepare", "builtin:python-stdlib", "--out", "data"], "--eval-docs", "0"),
    (["prepare", "builtin:python-stdlib", "--out", "data"], "--vocab-size", "10"),
    (["prepare", "builtin:python-stdlib", "--out", "data"], "--split-seed", "-1"),
    (["bench", "a.pt", "--variant", "b.pt"], "--rounds", "0"),
    (["bench", "a.pt", "--variant", "b.pt"], "--calls", "0"),
    (["bench", "a.pt", "--variant", "b.pt"], "--batch", "0"),
]


@pytest.mark.parametrize(("before", "flag", "value"), TRAINER_CASES,
                         ids=[f"{b[0]}{f}={v}" for b, f, v in TRAINER_CASES])
def test_invalid_trainer_flag_is_one_line_naming_it(tmp_path, monkeypatch, before, flag, value):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, [*before, flag, value])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines()[-1].startswith(f"error: {flag}: "), result.stderr
    assert "Traceback" not in result.output and not any(tmp_path.iterdir())  # nothing written


def test_a_parameter_error_survives_a_process_boundary():
    """Report comparisons may be analyzed on worker processes; their errors come back whole."""
    import pickle

    from gatedv_stats.core.errors import ParameterError

    error = pickle.loads(pickle.dumps(ParameterError("n_resamples", "must be at least 2 (got 1)")))
    assert (error.parameter, error.detail, str(error)) == ("n_resamples", "must be at least 2 (got 1)",
                                                           "n_resamples: must be at least 2 (got 1)")


def test_evaluate_takes_set_as_a_hidden_old_name_of_eval_set(tmp_path):
    """`evaluate --set` is still read as `--eval-set` (it is refused where a set is not allowed, as --eval-set is),
    is not listed in --help, and the two together are one error."""
    help_text = invoke("evaluate", "--help").stdout
    assert "--eval-set" in help_text and "--set " not in help_text
    out = tmp_path / "out.parquet"
    for flag in ("--eval-set", "--set"):
        result = invoke("evaluate", "--hf", tmp_path / "no-model", "--data", "builtin:python-stdlib", flag, "heldout",
                        "--out", out)
        assert result.exit_code == 2 and "no such option" not in result.stderr, result.stderr
    assert_input_error(invoke("evaluate", tmp_path / "ck.pt", "--eval-set", "dev", "--set", "dev", "--out", out),
                       "--eval-set, --set", "give it once")
