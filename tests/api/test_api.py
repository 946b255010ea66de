"""The Python API (`import gatedv_stats as gv`): its results are the command line's, they read well where they are
shown, errors name parameters, and every public name is documented and typed."""

from __future__ import annotations

import doctest
import importlib
import inspect
import json
import re
import subprocess
import sys
import typing
from pathlib import Path

import altair as alt
import numpy as np
import pandas as pd
import pytest

import gatedv_stats as gv
from gatedv_stats.io.jsonout import strict_json
from gatedv_stats.io.lossfiles import write_loss_file
from gatedv_stats.testing import example_study, synthetic_runs
from helpers import invoke, invoke_json

PPLS = {"baseline": [30.0, 30.6, 30.2], "gatedv": [29.5, 30.3, 29.8], "q-silu": [30.3, 30.8, 30.55]}


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    for run in synthetic_runs(PPLS, n_docs=24, rng_seed=0):
        write_loss_file(root / f"{run.arm}_{run.seed}.parquet", run.docs, {**run.meta, "eval_set": "dev"})
    return root


def cli_text(*args: object) -> str:
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return result.stdout.rstrip("\n")


def same_json(result: gv.ComparisonResult | gv.AnalysisResult | gv.ArmsResult | gv.PlanResult, payload: dict) -> None:
    assert json.loads(strict_json(result.to_dict())) == payload


PAIR = ["--baseline-arm", "baseline", "--variant-arm", "gatedv", "--samples", "200"]


def test_compare_is_bootstrap(runs_dir):
    result = gv.compare(runs_dir, baseline_arm="baseline", variant_arm="gatedv", n_resamples=200)
    same_json(result, invoke_json("bootstrap", runs_dir, *PAIR))
    assert str(result) == cli_text("bootstrap", runs_dir, *PAIR)
    assert repr(result).startswith("Comparison(gatedv vs baseline: ") and "\n" not in repr(result)
    assert "; 3 seed pairs, 24 documents)" in repr(result) and result.verdict_text in repr(result)
    frame = result.to_frame()
    assert frame.shape[0] == 1 and frame.loc[0, "verdict"] == result.verdict_text
    assert frame.loc[0, "delta_p"] == pytest.approx(result.delta_p)  # fields of the comparison, on the result
    html = result._repr_html_()
    assert html.startswith('<div class="table-wrap">') and "<table id=\"table-verdicts\">" in html
    assert "<table id=\"table-comparison\">" in html and f"<strong>{result.verdict_text}</strong>" in html
    chart = result.plot()
    assert isinstance(chart, alt.VConcatChart) and chart.to_dict()["vconcat"]


def test_analyze_arms_and_plan_are_their_commands(runs_dir):
    analysis = gv.analyze(runs_dir, baseline_arm="baseline", variant_arm="gatedv", n_resamples=200,
                          n_permutations=200)
    same_json(analysis, invoke_json("analyze", runs_dir, *PAIR, "--permutations", "200"))
    assert repr(analysis).startswith("Analysis(gatedv vs baseline: ")
    assert {"permutation_p_value", "bca_low", "t_p_value"} <= set(analysis.to_frame().columns)
    arms = gv.arms(runs_dir, reference="baseline", n_permutations=200)
    same_json(arms, invoke_json("arms", runs_dir, "--reference", "baseline", "--permutations", "200"))
    assert str(arms) == cli_text("arms", runs_dir, "--reference", "baseline", "--permutations", "200")
    assert list(arms.to_frame()["arm"]) == ["gatedv", "q-silu"] and "Holm-adjusted" in repr(arms)
    assert arms._repr_html_().count("<strong>") == 2 and isinstance(arms.plot(), alt.VConcatChart)
    pilot = [run for run in gv.load(runs_dir) if run.arm != "q-silu"]
    plan = gv.plan(pilot, effect=0.02)
    pilot_dir = runs_dir.parent / "pilot"
    for run in pilot:
        write_loss_file(pilot_dir / f"{run.arm}_{run.seed}.parquet", run.docs, run.meta)
    payload = invoke_json("plan", pilot_dir, "--effect", "0.02")
    assert {key: value for key, value in json.loads(strict_json(plan.to_dict())).items() if key != "inputs"} == \
        {key: value for key, value in payload.items() if key != "inputs"}
    assert repr(plan).startswith("Plan(gatedv vs baseline: ") and plan.to_frame().shape[0] == 1
    assert '<table id="table-plan">' in plan._repr_html_()


def test_load_returns_the_runs_it_read(runs_dir):
    runs = gv.load(runs_dir)
    assert len(runs) == 9 and runs.arms == ["baseline", "gatedv", "q-silu"]
    assert repr(runs) == "Runs(9 runs of 3 arms (baseline, gatedv, q-silu) on dev)"
    assert list(runs.to_frame().columns[:3]) == ["arm", "seed", "eval_set"] and "baseline on dev" in str(runs)
    assert gv.compare(runs, baseline_arm="baseline", variant_arm="gatedv", n_resamples=200).to_dict() == \
        gv.compare(runs_dir, baseline_arm="baseline", variant_arm="gatedv", n_resamples=200).to_dict()


def test_paired_losses_from_a_long_frame_and_from_arrays():
    runs = synthetic_runs({"baseline": PPLS["baseline"], "gatedv": PPLS["gatedv"]}, n_docs=24, rng_seed=0)
    frame = pd.concat([run.docs.assign(arm=run.arm, seed=run.seed) for run in runs], ignore_index=True)
    paired = gv.pair(frame)
    assert (paired.baseline_arm, paired.variant_arm, paired.n_pairs, paired.n_docs) == ("baseline", "gatedv", 3, 24)
    by_frame = gv.compare(paired, n_resamples=200)
    by_runs = gv.compare(runs, baseline_arm="baseline", variant_arm="gatedv", n_resamples=200)
    assert by_frame.delta_p == by_runs.delta_p and by_frame.verdict_text == by_runs.verdict_text
    by_arrays = gv.compare(baseline=paired.baseline, variant=paired.variant, n_targets=paired.n_units,
                           variant_arm="gatedv", n_resamples=200)
    assert by_arrays.estimate == pytest.approx(by_runs.estimate, rel=1e-12)
    with pytest.raises(gv.InputError, match="frame: a long table needs the columns arm and seed"):
        gv.pair(frame.drop(columns="seed"))


def test_errors_name_the_parameter_and_the_cli_names_the_flag(runs_dir):
    with pytest.raises(gv.ParameterError, match=r"^name the arms to compare with variant_arm \(arms found"):
        gv.compare(runs_dir, baseline_arm="baseline")
    with pytest.raises(gv.ParameterError, match="^baseline_arm and variant_arm both name 'gatedv'"):
        gv.compare(runs_dir, baseline_arm="gatedv", variant_arm="gatedv")
    with pytest.raises(gv.ParameterError, match="^reference: no runs of arm 'lstm'"):
        gv.arms(runs_dir, reference="lstm")
    with pytest.raises(gv.ParameterError, match="^confidence_level: "):
        gv.compare(runs_dir, baseline_arm="baseline", variant_arm="gatedv", confidence_level=1.5)
    result = invoke("bootstrap", runs_dir, "--baseline-arm", "gatedv", "--variant-arm", "gatedv")
    assert result.exit_code == 2 and result.stderr.startswith("error: --baseline-arm and --variant-arm both name")


@pytest.mark.slow  # starts a Python process
def test_the_verdict_line_prints_from_one_call():
    code = ("import gatedv_stats as gv; print(gv.compare(baseline=[[3.1, 2.9, 3.3, 3.0], [3.2, 2.8, 3.4, 3.1]], "
            "variant=[[3.0, 2.8, 3.2, 2.9], [3.1, 2.8, 3.3, 3.0]]))")
    text = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert text.startswith("variant vs baseline: 2 paired seeds, 4 documents\n") and "\nverdict: " in text


@pytest.mark.slow  # starts a Python process
def test_importing_the_package_loads_no_api_until_it_is_used():
    code = ("import sys, gatedv_stats as gv; assert 'gatedv_stats.api' not in sys.modules; gv.compare; "
            "import gatedv_stats.reporting; assert gv.report.__module__ == 'gatedv_stats.api'; "
            "assert set(gv.__all__) <= set(dir(gv))")
    subprocess.run([sys.executable, "-c", code], check=True)


def _public(name: str) -> list[tuple[str, object]]:
    """A public name, and for a class its public methods and properties (its own, not inherited from pandas or
    dataclasses)."""
    value = getattr(gv, name)
    if not inspect.isclass(value):
        return [(name, value)]
    members = [(name, value)]
    for attr, member in vars(value).items():
        if not attr.startswith("_") and (inspect.isfunction(member) or isinstance(member, (property, classmethod))):
            members.append((f"{name}.{attr}", member))
    return members


@pytest.mark.parametrize("name", [name for name in gv.__all__ if name != "__version__"])
def test_every_public_name_has_a_docstring_and_type_hints(name):
    for qualified, member in _public(name):
        function = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
        assert inspect.getdoc(function), f"{qualified} has no docstring"
        if inspect.isclass(function):
            continue
        hints = typing.get_type_hints(function, globalns=vars(sys.modules[function.__module__]))
        parameters = [p for p in inspect.signature(function).parameters if p not in ("self", "cls")]
        missing = [p for p in parameters if p not in hints and not p.startswith("*")]
        assert not missing and "return" in hints, f"{qualified}: no type hints for {missing or 'return'}"


def test_an_array_of_the_wrong_shape_names_its_parameter():
    with pytest.raises(gv.ParameterError, match="^variant: "):
        gv.compare(baseline=np.ones((2, 3)), variant=np.ones((3, 3)))


def test_arms_takes_the_old_name_of_its_sign_vectors_with_a_deprecation_warning(tmp_path):
    runs_dir = tmp_path / "runs"
    for run in synthetic_runs({"baseline": [30.0, 30.4, 29.9], "gatedv": [29.5, 29.8, 29.4]}, n_docs=20, rng_seed=4):
        write_loss_file(runs_dir / f"{run.arm}-{run.seed}.parquet", run.docs, {**run.meta, "eval_set": "heldout"})
    with pytest.warns(DeprecationWarning, match="n_permutations"):
        old = gv.arms(runs_dir, reference="baseline", n_resamples=300)
    assert old.to_dict() == gv.arms(runs_dir, reference="baseline", n_permutations=300).to_dict()
    with pytest.raises(gv.ParameterError, match="give n_permutations or its deprecated name n_resamples, not both"):
        gv.arms(runs_dir, reference="baseline", n_resamples=300, n_permutations=300)


def test_dir_lists_the_public_names_only():
    import gatedv_stats.api
    import gatedv_stats.results  # noqa: F401 (submodules imported become attributes of the package)

    assert gv.sequential is gatedv_stats.api.sequential  # with the other calls: no module named after a command
    assert not Path(gatedv_stats.api.__file__).with_name("decide.py").exists()
    public = sorted(name for name in gv.__all__ if not name.startswith("__"))
    assert [name for name in dir(gv) if not name.startswith("__")] == public
    assert "__version__" in dir(gv) and "__all__" in dir(gv)
    with pytest.warns(DeprecationWarning, match="TaskPlanResult is deprecated"):
        assert gv.TaskPlanResult is gv.PlanResult
    assert "TaskPlanResult" not in dir(gv)


def _numpydoc_names() -> list[str]:
    """Every public name of `gv`, and the public methods of `gv.Ledger`."""
    names = [name for name in gv.__all__ if name != "__version__"]
    return names + [f"Ledger.{attr}" for attr, member in vars(gv.Ledger).items()
                    if not attr.startswith("_") and inspect.isfunction(member)]


def _sections(docstring: str) -> dict[str, str]:
    """The numpydoc sections of a docstring (a heading underlined by dashes), each its text."""
    lines = inspect.cleandoc(docstring).splitlines()
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line, following in zip(lines, [*lines[1:], ""]):
        if line.strip() and set(following.strip()) == {"-"} and len(following.strip()) == len(line.strip()):
            current = sections.setdefault(line.strip(), [])
        elif current is not None and not (set(line.strip()) == {"-"} and current == []):
            current.append(line)
    return {name: "\n".join(text) for name, text in sections.items()}


def _documented_parameters(section: str) -> list[list[str]]:
    """The names a Parameters section documents, in the groups it documents them (its unindented lines: `name`,
    `a, b` or `name : type`)."""
    return [[name.strip() for name in line.split(":")[0].split(",")] for line in section.splitlines()
            if line and not line[0].isspace()]


@pytest.mark.parametrize("name", _numpydoc_names())
def test_every_public_name_has_numpydoc_sections_and_its_examples_run(name, tmp_path):
    value: typing.Any = gv
    for part in name.split("."):
        value = getattr(value, part)
    sections = _sections(inspect.getdoc(value) or "")
    try:
        parameters = [p for p in inspect.signature(value).parameters if p not in ("self", "cls")]
    except ValueError:  # an exception class of the builtin constructor takes its message alone
        parameters = []
    if parameters:
        assert "Parameters" in sections, f"{name}: no Parameters section"
        groups = _documented_parameters(sections["Parameters"])
        documented = [parameter for group in groups for parameter in group]
        assert sorted(documented) == sorted(parameters), f"{name}: Parameters documents {documented}"
        # the reference shows a group of names with one type (the first's): only names of one type share an entry
        signature = inspect.signature(value).parameters
        mixed = [group for group in groups if len({str(signature[p].annotation) for p in group}) > 1]
        assert not mixed, f"{name}: parameters of different types documented together: {mixed}"
    if not inspect.isclass(value):
        assert "Returns" in sections, f"{name}: no Returns section"
    assert "Examples" in sections, f"{name}: no Examples section"
    test = doctest.DocTestParser().get_doctest(sections["Examples"], {"gv": gv, "example_study": example_study,
                                                                      "tmp_dir": tmp_path}, name, None, 0)
    assert test.examples, f"{name}: its Examples section holds no example"
    failures: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test, out=failures.append)
    assert runner.failures == 0, "".join(failures)


API_PAGE = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def _rendered_by_the_api_page() -> dict[int, str]:
    """The objects docs/api.md renders through mkdocstrings (`::: path`, its `members` option), by identity: a
    class or function directive renders itself, a module its members (`members: [...]`, else its `__all__`)."""
    rendered: dict[int, str] = {}
    for match in re.finditer(r"^::: ([\w.]+)\n((?:[ \t]+.*\n)*)", API_PAGE.read_text(), flags=re.MULTILINE):
        path, options = match.group(1), match.group(2)
        module_name, _, attr = path.rpartition(".")
        try:
            value = importlib.import_module(path)
        except ModuleNotFoundError:
            value = getattr(importlib.import_module(module_name), attr)
        rendered[id(value)] = path
        if inspect.ismodule(value):
            listed = re.search(r"members:\s*\[([^\]]*)\]", options)
            if re.search(r"members:\s*false", options):
                continue
            members = ([name.strip().strip("\"'") for name in listed.group(1).split(",")] if listed else
                       list(value.__all__))
            rendered.update({id(getattr(value, member)): f"{path}.{member}" for member in members})
    return rendered


def test_the_api_page_renders_every_public_name():
    rendered = _rendered_by_the_api_page()
    missing = [name for name in gv.__all__ if name != "__version__" and id(getattr(gv, name)) not in rendered]
    assert not missing, f"docs/api.md renders no mkdocstrings directive for {missing}"


def test_a_plan_from_a_floor_and_a_pilot_whose_document_part_is_zero_reads_as_text(tmp_path: Path) -> None:
    runs = gv.load(example_study(tmp_path))
    floor = gv.noise_floor([run for run in runs if run.arm == "baseline"], out=tmp_path / "floor.json")
    result = gv.plan(runs, effect=0.02, noise_floor=floor)
    assert result.plan.document_df is None and result.plan.document_part == 0.0
    assert "  document part 0, from gatedv vs baseline, 3 seed pairs × 60 units" in str(result).splitlines()
