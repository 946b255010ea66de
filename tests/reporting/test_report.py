"""`gatedv report` in Markdown and LaTeX from loss files built to have the paper's per-arm means and SDs
(docs/method.md §8)."""

from __future__ import annotations

import json
import math
import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cli import app
from experiments import (
    SAMPLES,
    medium_experiment,
    report,
    runner,
    small_experiment,
    write_bench,
    write_curves,
    write_runs,
)
from gatedv_stats.io.lossfiles import read_loss_file, write_loss_file
from gatedv_stats.reporting import latex_escape
from gatedv_stats.testing import ppls_with_moments


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> dict:
    root = small_experiment(tmp_path_factory.mktemp("small"))
    out = tmp_path_factory.mktemp("small-out")
    return {"root": root, "md": report([root], out / "report.md", "md"),
            "latex": report([root], out / "report.tex", "latex"), "out": out}


@pytest.fixture(scope="module")
def medium(tmp_path_factory) -> dict:
    root = medium_experiment(tmp_path_factory.mktemp("medium"))
    return {"root": root, "md": report([root], root / "report.md", "md")}


def md_row(text: str, *cells: str) -> bool:
    """True when a Markdown table row starts with these cells."""
    return ("| " + " | ".join(cells) + " |") in text


@pytest.mark.slow
def test_table3_small_in_markdown_and_latex(small):
    assert md_row(small["md"], "gatedv", "59.118 ± 0.530", "57.916 ± 0.782", "−2.03%", "5/5")
    assert "gatedv & 59.118 $\\pm$ 0.530 & 57.916 $\\pm$ 0.782 & $-$2.03\\% & 5/5 &" in small["latex"]


def test_table3_nll_difference_matches_a_brute_force_loop(small):
    """D printed in the table equals mean_s (NLL_var,s − NLL_base,s) computed here straight from the files."""
    nll = {}
    for path in (small["root"] / "heldout-0.0048-None").glob("*.parquet"):
        frame = pd.read_parquet(path)
        arm, seed = path.stem.rsplit("_", 1)
        nll[(arm, int(seed))] = frame["loss_sum"].sum() / frame["n_targets"].sum()
    assert math.isclose(np.mean([math.exp(nll[("baseline", s)]) for s in range(5)]), 59.118, rel_tol=1e-12)
    d = np.mean([nll[("gatedv", s)] - nll[("baseline", s)] for s in range(5)])
    printed = f"{d:.6f}".replace("-", "\u2212")
    line = next(line for line in small["md"].splitlines() if line.startswith("| gatedv | 59.118"))
    assert f"| {printed} |" in line
    low, high = re.search(r"\[(\S+), (\S+)\]", line).groups()
    as_float = lambda text: float(text.replace("\u2212", "-"))  # noqa: E731
    assert as_float(low) < d < as_float(high)
    assert f"B = {SAMPLES}" in small["md"]


def test_table4_rows_in_markdown_and_latex(small):
    md, tex = small["md"], small["latex"]
    assert md_row(md, "q-silu", "58.580 ± 0.557", "59.522 ± 0.337", "+1.61%", "0/3")
    assert md_row(md, "gatedv", "58.580 ± 0.557", "58.039 ± 0.525", "−0.92%", "3/3")
    assert md_row(md, "qkv-silu", "58.580 ± 0.557", "58.458 ± 0.485", "−0.21%", "2/3")
    assert "q-silu & 58.580 $\\pm$ 0.557 & 59.522 $\\pm$ 0.337 & +1.61\\% & 0/3" in tex
    assert "qkv-silu & 58.580 $\\pm$ 0.557 & 58.458 $\\pm$ 0.485 & $-$0.21\\% & 2/3" in tex


def test_table5_controls_against_baseline_and_gatedv(small):
    md, tex = small["md"], small["latex"]
    assert md_row(md, "affine-match", "56.180 ± 0.462", "55.551 ± 0.498", "−1.12%", "3/3", "+2.02%", "0/3")
    assert md_row(md, "moment-silu", "56.180 ± 0.462", "55.983 ± 0.787", "−0.35%")
    assert "| +2.82% | 0/3 |" in next(line for line in md.splitlines()
                                      if line.startswith("| moment-silu") and "+2.82%" in line)
    assert "affine-match & 56.180 $\\pm$ 0.462 & 55.551 $\\pm$ 0.498 & $-$1.12\\% & 3/3 & +2.02\\% & 0/3" in tex
    assert "ΔP vs gatedv" in md and "$\\Delta_P$ vs gatedv" in tex


def test_learning_rates_side_by_side(small):
    assert md_row(small["md"], "0.0024", "56.180 ± 0.462", "54.450 ± 0.140", "−3.08%")
    assert md_row(small["md"], "0.0048", "58.580 ± 0.557", "58.039 ± 0.525", "−0.92%")


def test_latex_uses_booktabs_and_markdown_figures_exist(small):
    tex = small["latex"]
    assert tex.count("\\begin{tabular}") == tex.count("\\bottomrule") >= 4
    assert "\\toprule" in tex and "\\midrule" in tex and "\\usepackage{booktabs}" in tex
    pdfs = re.findall(r"\\includegraphics\[[^\]]*\]\{([^}]+)\}", tex)
    assert len(pdfs) == 6 and all((small["out"] / name).read_bytes().startswith(b"%PDF") for name in pdfs)
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", small["md"])
    assert figures, "the Markdown report shows figures"
    for name in figures:
        svg = (small["out"] / name).read_text(encoding="utf-8")
        # a rendered chart: its title (per-seed / per-document figures) or the forest plot's D axis
        assert svg.lstrip().startswith("<svg") and ("Per-" in svg or "D (nats / target)" in svg)


def test_sections_without_inputs_say_why(small):
    md = small["md"]
    assert "No curve files (curve.csv) among the inputs" in md
    assert "No loss file was evaluated with an overridden value activation" in md


def test_provenance_lists_every_file_with_its_sha256(small):
    import hashlib

    files = sorted(small["root"].rglob("*.parquet"))
    assert len(files) == 10 + 12 + 12
    for path in files:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        assert f"`{digest}`" in small["md"], path
    assert re.search(r"\| Bootstrap resamples B \| 200 \|", small["md"])
    assert re.search(r"\| Bootstrap RNG seed \| 0 \|", small["md"])
    assert "gatedv-stats version (this report)" in small["md"]


@pytest.mark.slow
def test_medium_lr_selection_table3_and_inference_swap(medium):
    md = medium["md"]
    assert md_row(md, "baseline", "26.158", "36.853", "20.938", "**20.558**", "21.558")
    assert md_row(md, "gatedv", "26.158", "37.451", "20.632", "**20.062**", "21.005")
    assert md_row(md, "g2-headwise", "26.186", "—", "21.189", "**20.630**", "21.568")
    assert "selection seed 20270201" in md
    assert md_row(md, "gatedv", "20.233 ± 0.068", "19.748 ± 0.047", "−2.40%", "3/3")
    assert md_row(md, "baseline (trained linear)", "20.233 ± 0.068", "102.565 ± 31.053")
    assert md_row(md, "gatedv (trained silu)", "4,300.232 ± 899.037", "19.748 ± 0.047")
    assert md_row(md, "baseline", "medium", "12 / 384", "6 / 64", "1,152", "26,158,464")  # setup
    assert md_row(md, "Full-context forward time ratio", "1.000000", "1.007003")
    assert md_row(md, "Training-step time ratio", "1.000000", "1.011433")
    assert md_row(md, "Peak memory, CUDA peak allocated (GiB)", "1.7525", "1.8569")


@pytest.mark.slow
def test_default_output_inside_the_experiment_and_curves(tmp_path):
    root = small_experiment(tmp_path / "exp")
    write_curves(root / "runs" / "curve.csv", {"baseline": 59.0, "gatedv": 57.9}, [0, 1, 2, 3, 4], 0.0048)
    for variant in ("baseline", "gatedv"):  # trainer run records (gatedv train): the Table 1 analogue
        record = {"size": "small", "variant": variant, "seed": 0, "lr": 0.0048, "updates": 32768, "warmup": 512,
                  "batch_size": 8, "parameters": 2328192,
                  "model_config": {"n_layers": 6, "d_model": 128, "n_heads": 4, "d_ff": 384, "vocab_size": 8192,
                                   "seq_len": 256}}
        (root / "runs" / f"{variant}-0").mkdir(parents=True)
        (root / "runs" / f"{variant}-0" / "run.json").write_text(json.dumps(record), encoding="utf-8")
    result = runner.invoke(app, ["report", str(root), "--format", "md", "--samples", "50"])
    assert result.exit_code == 0, result.output
    md = (root / "report.md").read_text(encoding="utf-8")
    assert "(report_figures/delta-p-curve-lr-0-0048.svg)" in md
    assert "(report_figures/final-quarter-lr-0-0048.svg)" in md
    assert (root / "report_figures" / "delta-p-curve-lr-0-0048.svg").stat().st_size > 1000
    assert re.search(r"\| runs/curve\.csv \| curve file \| `[0-9a-f]{64}` \|", md)
    assert md_row(md, "baseline", "small", "6 / 128", "4 / 32", "384", "8,192", "2,328,192", "32,768", "512", "8",
                  "67,108,864", "0.0024, 0.0048")
    assert "No benchmark results (bench\\*.json" in md  # Markdown-escaped star


def test_without_reference_arm_sections_say_why_then_reference_option(tmp_path):
    write_runs(tmp_path, {"alpha": ppls_with_moments(30.0, 0.2, 3), "beta": ppls_with_moments(29.0, 0.3, 3)},
               eval_set="heldout", lr=0.001)
    md = report([tmp_path], tmp_path / "a.md", "md")
    assert "No reference arm: no loss file has arm 'baseline'; choose one with --reference." in md
    assert "30.000 ± 0.200" not in md
    md = report([tmp_path], tmp_path / "b.md", "md", "--reference", "alpha")
    assert md_row(md, "beta", "30.000 ± 0.200", "29.000 ± 0.300", "−3.33%", "3/3")


def test_mixed_evaluation_sets_leave_the_table_out_and_the_rest_renders(tmp_path):
    write_runs(tmp_path / "a", {"baseline": [20.0, 21.0]}, eval_set="heldout", lr=0.001,
               extra={"eval_set_sha256": "a" * 64})
    write_runs(tmp_path / "b", {"gatedv": [19.0, 20.0]}, eval_set="heldout", lr=0.001,
               extra={"eval_set_sha256": "b" * 64})
    md = report([tmp_path], tmp_path / "r.md", "md")
    assert "not one evaluation set" in md
    assert "No evaluation set and learning rate holds the reference arm" in md
    assert "## Provenance" in md


def test_unreadable_and_missing_inputs_fail_with_one_line(tmp_path):
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"not a parquet file")
    for args, message in (([str(broken)], "broken.parquet: cannot read"),
                          ([str(tmp_path / "absent")], "absent: no such file or directory"),
                          ([str(tmp_path / "notes.txt")], "no such file")):
        result = runner.invoke(app, ["report", *args, "--format", "md", "--out", str(tmp_path / "r.md")])
        assert result.exit_code == 2, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.output
    write_bench(tmp_path / "bench.json", format="something-else")
    result = runner.invoke(app, ["report", str(tmp_path / "bench.json"), str(small_input(tmp_path)), "--out",
                                 str(tmp_path / "r.md")])
    assert result.exit_code == 2 and "bench.json: not a gatedv bench result" in result.output, result.output
    twice = small_input(tmp_path / "twice")
    copy = tmp_path / "copy" / "baseline_0.parquet"
    copy.parent.mkdir()
    copy.write_bytes(next(twice.rglob("baseline_0.parquet")).read_bytes())
    result = runner.invoke(app, ["report", str(twice), str(copy), "--out", str(tmp_path / "r.md")])
    assert result.exit_code == 2 and ("arm baseline seed 0 on eval set heldout at LR 0.001 appears twice"
                                      in result.output)
    (tmp_path / "notes.txt").write_text("hello")
    result = runner.invoke(app, ["report", str(tmp_path / "notes.txt"), "--out", str(tmp_path / "r.md")])
    assert result.exit_code == 2 and "notes.txt: not a loss file" in result.output
    assert not (tmp_path / "r.md").exists()


def test_a_curve_file_that_is_a_directory_is_one_line_naming_it(tmp_path):
    runs = small_input(tmp_path)
    (runs / "gatedv" / "curve.csv").mkdir(parents=True)
    result = runner.invoke(app, ["report", str(runs), "--format", "md", "--out", str(tmp_path / "r.md")])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and lines == [f"error: {runs / 'gatedv' / 'curve.csv'}: cannot read: Is a directory"]


def test_a_file_named_twice_counts_once_and_the_same_input_twice_is_refused(tmp_path):
    from gatedv_stats.io.discovery import discover_inputs

    runs = small_input(tmp_path)
    write_bench(runs / "bench.json")
    write_curves(runs / "gatedv" / "curve.csv", {"gatedv": 19.5}, [0, 1], 0.001)
    inputs = discover_inputs([runs, Path(f"{runs}/./bench.json"), Path(f"{runs}/gatedv/../gatedv/curve.csv")])
    assert len(inputs.bench) == 1 and len(inputs.curves) == 18
    assert sorted(file.kind for file in inputs.files if file.kind != "loss file") == ["bench results", "curve file"]
    result = runner.invoke(app, ["report", str(runs), str(runs), "--format", "md", "--out", str(tmp_path / "r.md")])
    assert result.exit_code == 2 and result.output.strip() == f"error: {runs}: given twice among the inputs"


RUN_RECORD = {"variant": "gatedv", "size": "tiny", "seed": 1, "lr": 0.004, "updates": 500, "warmup": 50,
              "batch_size": 8, "parameters": 1000, "knobs": {}, "model_config": {"d_model": 64, "n_heads": 2}}


@pytest.mark.parametrize(("field", "value", "message"), [
    ("model_config", [1], "model_config: expected a JSON object, got [1]"),
    ("model_config", {"d_model": "x", "n_heads": 2}, "model_config.d_model: 'x' is not an integer >= 1"),
    ("lr", "x", "lr: 'x' is not a positive number"),
    ("parameters", "many", "parameters: 'many' is not an integer >= 0"),
    ("seed", "x", "seed: 'x' is not an integer from 0 to"),
    ("variant", 5, "variant: 5 is not text"),
    ("knobs", "none", "knobs: expected a JSON object"),
])
def test_a_run_json_field_of_the_wrong_kind_is_one_line_naming_file_and_field(tmp_path, field, value, message):
    runs = small_input(tmp_path)
    record = runs / "gatedv" / "run.json"
    record.parent.mkdir(exist_ok=True)
    record.write_text(json.dumps({**RUN_RECORD, field: value}), encoding="utf-8")
    result = runner.invoke(app, ["report", str(runs), "--format", "md", "--samples", "50", "--out",
                                 str(tmp_path / "r.md")])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {record}: {message}"), lines
    record.write_text(json.dumps(RUN_RECORD), encoding="utf-8")
    result = runner.invoke(app, ["report", str(runs), "--format", "md", "--samples", "50", "--out",
                                 str(tmp_path / "r.md")])
    assert result.exit_code == 0, result.output


def small_input(folder: Path) -> Path:
    write_runs(folder / "runs", {"baseline": [20.0, 21.0], "gatedv": [19.0, 20.0]}, eval_set="heldout", lr=0.001)
    return folder / "runs"


def test_bad_options_fail_with_one_line(small, tmp_path):
    for args, message in ((["--format", "pdf"], "--format pdf: expected one of html, md, latex"),
                          (["--reference", "nope"], "--reference nope: no loss file has this arm"),
                          (["--samples", "0"], "--samples: must be at least 2"),
                          (["--samples", "1"], "--samples: must be at least 2"),
                          (["--seed", "-1"], "--seed: must be an integer from 0 to")):
        result = runner.invoke(app, ["report", str(small["root"]), "--out", str(tmp_path / "r.md"), *args])
        assert result.exit_code == 2, result.output
        assert result.output.strip().startswith("error: ") and message in result.output


def test_latex_escape():
    assert latex_escape("a_b & 50% #1 {x} ~ ^") == r"a\_b \& 50\% \#1 \{x\} \textasciitilde{} \textasciicircum{}"
    assert latex_escape("−2.03% ± ΔP P̄ \\") == r"$-$2.03\% $\pm$ $\Delta_P$ $\overline{P}$ \textbackslash{}"
    assert latex_escape("1.2 → 1.1 × 2 ≥ 1") == r"1.2 $\rightarrow$ 1.1 $\times$ 2 $\geq$ 1"
    assert latex_escape("λ-σ Σ Α `x` --seed") == (r"$\lambda$-$\sigma$ $\Sigma$ A \textasciigrave{}x\textasciigrave{} "
                                                  r"-{}-seed")


@pytest.mark.slow
def test_a_report_of_greek_arm_names_compiles_with_pdflatex(tmp_path, pdflatex):
    write_runs(tmp_path, {"baseline": [30.0, 30.4], "λ-σ`gate`--v2": [29.9, 30.2]}, eval_set="heldout", lr=0.004)
    tex = tmp_path / "report.tex"
    report([tmp_path], tex, "latex")
    done = subprocess.run([pdflatex, "-interaction=nonstopmode", "-halt-on-error", tex.name], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]


@pytest.mark.slow
def test_latex_reports_compile_with_pdflatex(small, medium, tmp_path, pdflatex):
    """The LaTeX output is a complete document (booktabs tables, figures) that pdflatex typesets without error."""
    medium_tex = medium["root"] / "report.tex"
    report([medium["root"]], medium_tex, "latex")
    for tex in (small["out"] / "report.tex", medium_tex):
        done = subprocess.run([pdflatex, "-interaction=nonstopmode", "-halt-on-error", tex.name], cwd=tex.parent,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:]
        assert tex.with_suffix(".pdf").read_bytes().startswith(b"%PDF")
        assert "Overfull \\hbox" not in done.stdout, "a table or figure runs off the page"


def test_a_custom_variant_shows_its_knobs_in_the_setup(tmp_path):
    write_runs(tmp_path, {"baseline": [30.0, 30.4], "k-silu": [29.9, 30.2]}, eval_set="heldout", lr=0.004)
    for path in tmp_path.rglob("k-silu_*.parquet"):
        run = read_loss_file(path)
        write_loss_file(path, run.docs, {**run.meta, "knobs": {"key_act": "silu", "qk_norm": True}})
    md = report([tmp_path], tmp_path / "report.md", "md")
    setup = md[md.index("## Setup"):md.index("## Learning-rate selection")]
    assert md_row(setup, "k-silu", r"key\_act=silu, qk\_norm=True") and md_row(setup, "baseline", "—")


@pytest.mark.slow
def test_a_rewritten_report_removes_the_figures_it_no_longer_shows(tmp_path):
    for eval_set in ("dev", "heldout"):
        write_runs(tmp_path / "exp", {"baseline": [20.0, 20.5], "gatedv": [19.6, 20.0]}, eval_set=eval_set, lr=0.004)
    out = tmp_path / "r.md"
    assert runner.invoke(app, ["report", str(tmp_path / "exp"), "-f", "md", "-o", str(out)]).exit_code == 0
    figures = tmp_path / "r_figures"
    shown = sorted(path.name for path in figures.glob("*.svg"))
    assert any("heldout" in name for name in shown), shown
    (figures / "notes.txt").write_text("the user's")
    for path in (tmp_path / "exp").glob("heldout-*"):
        for file in path.iterdir():
            file.unlink()
        path.rmdir()
    assert runner.invoke(app, ["report", str(tmp_path / "exp"), "-f", "md", "-o", str(out)]).exit_code == 0
    left = sorted(path.name for path in figures.glob("*.svg"))
    assert left == [name for name in shown if "heldout" not in name] and left
    assert all(f"r_figures/{name}" in out.read_text() for name in left)
    assert (figures / "notes.txt").read_text() == "the user's"


def test_a_comparison_left_out_is_warned_about_and_the_verdicts_say_why(tmp_path):
    write_runs(tmp_path / "exp", {"baseline": [20.0, 20.5], "gatedv": [19.6, 20.0]}, eval_set="dev", lr=0.004)
    variant_file = next((tmp_path / "exp").rglob("gatedv_1.parquet"))
    run = read_loss_file(variant_file)
    write_loss_file(variant_file, run.docs.iloc[1:], run.meta)  # one document missing
    result = runner.invoke(app, ["report", str(tmp_path / "exp"), "-f", "md", "-o", str(tmp_path / "r.md")])
    assert result.exit_code == 0, result.output
    warning = result.stderr.strip()
    assert warning.startswith("warning: development set, gatedv vs baseline, LR 0.004: left out because documents "
                              "differ between paired runs") and len(warning.splitlines()) == 1
    verdicts = (tmp_path / "r.md").read_text().split("## Verdicts", 1)[1].split("##", 1)[0]
    assert "No verdict: every comparison with the reference arm 'baseline' was left out" in verdicts


@pytest.mark.slow
def test_sets_whose_names_differ_only_in_punctuation_get_figures_and_ids_of_their_own(tmp_path):
    """"a b" and "a-b" make the same key: each table and figure still gets its own id and file."""
    write_runs(tmp_path / "exp", {"baseline": [20.0, 20.5], "gatedv": [19.6, 20.0]}, eval_set="a b", lr=0.004)
    write_runs(tmp_path / "exp", {"baseline": [20.0, 20.5], "gatedv": [21.0, 21.5]}, eval_set="a-b", lr=0.004, seed=2)
    out = tmp_path / "r.md"
    assert runner.invoke(app, ["report", str(tmp_path / "exp"), "-f", "md", "-o", str(out)]).exit_code == 0
    shown = re.findall(r"r_figures/([a-z0-9-]+\.svg)", out.read_text())
    assert len(shown) == len(set(shown)) and {"doc-differences-a-b.svg", "doc-differences-a-b-2.svg"} <= set(shown)
    figures = tmp_path / "r_figures"
    assert (figures / "doc-differences-a-b.svg").read_text() != (figures / "doc-differences-a-b-2.svg").read_text()
    html = tmp_path / "r.html"
    assert runner.invoke(app, ["report", str(tmp_path / "exp"), "-o", str(html)]).exit_code == 0
    ids = re.findall(r'\bid="([^"]+)"', html.read_text())
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


@pytest.mark.parametrize(("change", "message"), [
    ({"summary": {"forward_ratio": 1.0, "step_ratio": float("nan"), "peak_memory_baseline_bytes": 1,
                  "peak_memory_variant_bytes": 1}}, "summary.step_ratio: NaN is not a finite positive number"),
    ({"summary": {"forward_ratio": -1.0, "step_ratio": 1.0, "peak_memory_baseline_bytes": 1,
                  "peak_memory_variant_bytes": 1}}, "summary.forward_ratio: -1.0 is not a finite positive number"),
    ({"variant_arm": None}, "variant_arm: null is not a non-empty name"),
    ({"rounds": 0}, "rounds: 0 is not an integer of at least 1"),
    ({"pairs": []}, "pairs: [] is not a list of seed pairs (at least one, each an object of its results)"),
])
def test_a_bench_result_out_of_range_is_refused_naming_the_field(tmp_path, change, message):
    write_bench(tmp_path / "bench.json", **change)
    result = runner.invoke(app, ["report", str(tmp_path / "bench.json"), str(small_input(tmp_path)), "--format", "md",
                                 "--out", str(tmp_path / "r.md")])
    assert result.exit_code == 2 and result.stderr == f"error: {tmp_path / 'bench.json'}: {message}\n", result.output


def test_an_arm_without_the_references_learning_rate_is_named_with_why(tmp_path):
    """A model scored with evaluate --hf records no learning rate, so it shares no group with the reference."""
    write_runs(tmp_path / "exp", {"baseline": [20.0, 20.5]}, eval_set="heldout", lr=0.004)
    write_runs(tmp_path / "exp", {"hfx": [19.0, 19.5]}, eval_set="heldout", lr=None)
    result = runner.invoke(app, ["report", str(tmp_path / "exp"), "-f", "md", "-o", str(tmp_path / "r.md")])
    assert result.exit_code == 0, result.output
    assert result.stderr == ("warning: held-out set, hfx at LR unrecorded: left out because the reference arm "
                             "'baseline' has no runs at this learning rate on this set (compare them with gatedv "
                             "bootstrap, which pairs any two arms).\n")
    verdicts = (tmp_path / "r.md").read_text()
    assert "No verdict: every comparison with the reference arm 'baseline' was left out" in verdicts


@pytest.mark.slow
def test_without_format_the_report_takes_the_format_its_name_says(tmp_path):
    write_runs(tmp_path / "exp", {"baseline": [20.0, 20.5], "gatedv": [19.6, 20.0]}, eval_set="dev", lr=0.004)
    for name, start in (("r.md", "# Paired comparison report"), ("r.tex", "% Paired comparison report"),
                        ("r.html", "<!DOCTYPE")):
        result = runner.invoke(app, ["report", str(tmp_path / "exp"), "--samples", "100", "-o", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        assert (tmp_path / name).read_text().lstrip().startswith(start), name
