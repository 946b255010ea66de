"""The cost-benchmark protocol (docs/method.md §7) with a fake clock (round structure, medians, ratios,
aggregation) and `gatedv bench` itself."""

from __future__ import annotations

import json
import statistics

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import trainer.run.bench
from cli import app
from experiments import write_runs
from gatedv_stats.core.integrity import check_seal
from gatedv_stats.io.benchfiles import read_bench_result
from helpers import assert_input_error, full_disk_line, invoke, tree
from trainer.model.transformer import build_model, model_config
from trainer.run.bench import BenchResult, ModeResult, PairResult, time_calls
from trainer.run.checkpoint import save_checkpoint


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_time_calls_round_structure_and_per_round_medians():
    clock, log, syncs = FakeClock(), [], []
    rounds, warmup, timed = 3, 2, 3
    rng = np.random.default_rng(0)
    # Per (model, mode): every call's duration, in call order; warm-ups take 100 s so a leak would show.
    durations = {}
    for name, scale in (("baseline", 1.0), ("variant", 1.1)):
        for mode, base in (("forward", 0.2), ("step", 0.7)):
            per_round = [[100.0] * warmup + list(base * scale * rng.uniform(0.9, 1.3, timed)) for _ in range(rounds)]
            durations[name, mode] = per_round

    def call(name, mode):
        stream = iter(d for round_ in durations[name, mode] for d in round_)

        def fn():
            log.append((name, mode))
            clock.now += next(stream)

        return fn

    calls = {name: {mode: call(name, mode) for mode in ("forward", "step")} for name in ("baseline", "variant")}
    medians = time_calls(calls, rounds=rounds, warmup=warmup, timed=timed, clock=clock,
                         sync=lambda: syncs.append(clock.now))

    per_call = warmup + timed
    expected_log = []
    for r in range(rounds):
        order = ["baseline", "variant"] if r % 2 == 0 else ["variant", "baseline"]
        for mode in ("forward", "step"):
            for name in order:
                expected_log += [(name, mode)] * per_call
    assert log == expected_log
    assert len(syncs) == 2 * timed * rounds * 4  # before and after every timed call
    for (name, mode), per_round in durations.items():
        expected = [statistics.median(r[warmup:]) for r in per_round]
        np.testing.assert_allclose(medians[name][mode], expected, rtol=1e-12)


def _pair(seed, forward, step, memory):
    modes = {
        "forward": ModeResult(tuple(forward[0]), tuple(forward[1])),
        "step": ModeResult(tuple(step[0]), tuple(step[1])),
    }
    return PairResult(seed=seed, baseline={"path": "b"}, variant={"path": "v"}, modes=modes,
                      peak_memory_bytes={"baseline": memory[0], "variant": memory[1]})


def test_aggregation_median_over_rounds_then_mean_over_seeds():
    rng = np.random.default_rng(1)
    pairs, expected_forward, expected_step = [], [], []
    for seed in (11, 12, 13):
        fb, fv = rng.uniform(1, 2, 7), rng.uniform(1, 2, 7)
        sb, sv = rng.uniform(3, 4, 7), rng.uniform(3, 4, 7)
        pairs.append(_pair(seed, (fb, fv), (sb, sv), (1000 + seed, 2000 + seed)))
        expected_forward.append(statistics.median([v / b for b, v in zip(fb, fv)]))
        expected_step.append(statistics.median([v / b for b, v in zip(sb, sv)]))
    settings = {"baseline_arm": "baseline", "variant_arm": "gatedv", "rounds": 7, "warmup": 3, "calls": 10,
                "batch_size": 8, "seq_len": 256, "device_name": "fake", "memory_kind": "cpu_peak_rss"}
    result = BenchResult(settings=settings, pairs=tuple(pairs))
    summary = result.to_dict()["summary"]
    assert summary["forward_ratio"] == pytest.approx(statistics.fmean(expected_forward), rel=1e-12)
    assert summary["step_ratio"] == pytest.approx(statistics.fmean(expected_step), rel=1e-12)
    assert summary["peak_memory_baseline_bytes"] == 1012 and summary["peak_memory_variant_bytes"] == 2012
    assert pairs[0].modes["forward"].to_dict()["ratios"] == pytest.approx(
        list(np.asarray(pairs[0].modes["forward"].variant_s) / np.asarray(pairs[0].modes["forward"].baseline_s)))
    text = result.summary()
    assert "training-step ratio" in text and f"{summary['step_ratio']:.6f}" in text


def test_time_calls_rejects_empty_protocol():
    with pytest.raises(ValueError, match="rounds"):
        time_calls({"a": {"forward": lambda: None}}, rounds=0, warmup=3, timed=10)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    paths = {}
    for variant, seed in (("baseline", 1), ("gatedv", 1), ("gatedv", 2)):
        cfg = model_config("tiny", variant, vocab_size=256, seq_len=32)
        paths[variant, seed] = root / f"{variant}-{seed}.pt"
        save_checkpoint(paths[variant, seed], build_model(cfg, seed), extra={"run": {"seed": seed}})
    diverged = build_model(model_config("tiny", "gatedv", vocab_size=256, seq_len=32), 1)
    with torch.no_grad():
        diverged.embed.weight[0, 0] = float("inf")
    paths["diverged", 1] = root / "diverged-1.pt"
    save_checkpoint(paths["diverged", 1], diverged, extra={"run": {"seed": 1}})
    return paths


@pytest.mark.slow
def test_bench_cli_on_tiny_checkpoints_writes_table6_json(checkpoints, tmp_path):
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(app, [
        "bench", str(checkpoints["baseline", 1]), "--variant", str(checkpoints["gatedv", 1]),
        "--rounds", "2", "--warmup", "1", "--calls", "2", "--batch", "2", "--device", "cpu", "--out", str(out),
    ])
    assert result.exit_code == 0, result.output
    assert "training-step ratio" in result.output
    data = json.loads(out.read_text())
    assert data["format"] == "gatedv-bench-1"
    assert (data["baseline_arm"], data["variant_arm"], data["memory_kind"]) == ("baseline", "gatedv", "cpu_peak_rss")
    pair = data["pairs"][0]
    assert pair["seed"] == 1 and len(pair["modes"]["step"]["ratios"]) == 2
    assert all(t > 0 for t in pair["modes"]["forward"]["baseline_s"] + pair["modes"]["step"]["variant_s"])
    assert data["summary"]["forward_ratio"] == pytest.approx(
        statistics.median(pair["modes"]["forward"]["ratios"]))
    # Peak RSS of a process that imported torch and ran a model: well above 50 MiB, below 8 GiB.
    assert 50 * 2**20 < pair["peak_memory_bytes"]["baseline"] < 8 * 2**30


@pytest.fixture
def quick_bench(checkpoints, monkeypatch):
    """`gatedv bench` of one seed pair, one round of one call, with `ARGS`; peak memory as measured elsewhere (it
    takes a fresh process per model, seconds each)."""
    monkeypatch.setattr(trainer.run.bench, "peak_memory_bytes",
                        lambda paths, device, batch_size: {arm: 100 * 2**20 for arm in paths})
    return lambda *args: invoke("bench", checkpoints["baseline", 1], "--variant", checkpoints["gatedv", 1],
                                "--rounds", "1", "--warmup", "0", "--calls", "1", "--batch", "1", "--device", "cpu",
                                *args)


def test_a_bench_result_is_sealed_and_a_damaged_one_is_refused_in_one_line(quick_bench, tmp_path):
    out = tmp_path / "bench.json"
    assert quick_bench("--out", out).exit_code == 0
    check_seal(json.loads(out.read_text()), "sha256", out, "", required=True)
    assert read_bench_result(out)["pairs"][0]["seed"] == 1  # read back whole, its seal checked
    write_runs(tmp_path / "runs", {"baseline": [30.0, 30.3], "gatedv": [29.0, 29.4]}, eval_set="heldout", lr=0.001)
    report = ("report", out, tmp_path / "runs", "--out", tmp_path / "report.md", "--samples", "100")
    out.write_text(out.read_text().replace('"rounds": 1', '"rounds": 2'))
    assert_input_error(invoke(*report), f"{out}: damaged: its content does not match the sha256 it records (sha256); "
                                        "run gatedv bench again")
    out.write_text(out.read_text()[:100])
    assert_input_error(invoke(*report), f"{out}: cannot read JSON: ", "run gatedv bench again")
    assert not (tmp_path / "report.md").exists()


def test_bench_on_a_full_disk_keeps_the_result_written_before(quick_bench, tmp_path, full_disk):
    out = tmp_path / "bench.json"
    assert quick_bench("--out", out).exit_code == 0
    before = tree(tmp_path)
    full_disk(after=0)
    full_disk_line(quick_bench("--out", out), f"{out}: could not be written", "the previous bench.json is kept")
    assert tree(tmp_path) == before


@pytest.mark.parametrize("case,message", [
    ("count", "need one --variant checkpoint per baseline checkpoint"),
    ("seed", "seed 2 is not the seed 1"),
    ("missing", "checkpoint not found"),
    ("itself", "baseline-1.pt is given more than once"),
    ("twice", "gatedv-1.pt is given more than once"),
    ("diverged", "diverged-1.pt: embed.weight holds non-finite values"),
    ("out", "--out: the path is empty"),
])
def test_bench_cli_bad_input(checkpoints, tmp_path, case, message):
    base = str(checkpoints["baseline", 1])
    variants = {
        "count": [str(checkpoints["gatedv", 1]), "--variant", str(checkpoints["gatedv", 2])],
        "seed": [str(checkpoints["gatedv", 2])],
        "missing": [str(tmp_path / "none.pt")],
        "itself": [base],
        "twice": [str(checkpoints["gatedv", 1]), str(checkpoints["gatedv", 1])],
        "diverged": [str(checkpoints["diverged", 1])],
        "out": [str(checkpoints["gatedv", 1]), "--out", ""],
    }[case]
    result = CliRunner().invoke(app, ["bench", base, "--variant", *variants, "--rounds", "1", "--calls", "1"])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_bench_out_of_memory_is_one_line_naming_batch(checkpoints):
    result = CliRunner().invoke(app, [
        "bench", str(checkpoints["baseline", 1]), "--variant", str(checkpoints["gatedv", 1]),
        "--rounds", "1", "--warmup", "0", "--calls", "1", "--batch", str(10**12), "--device", "cpu",
    ])
    assert result.exit_code == 4
    assert "out of memory on cpu" in result.output and "lower --batch" in result.output
    assert "Traceback" not in result.output


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_bench_on_cuda_measures_peak_allocated_memory(checkpoints):
    from trainer.run.bench import run_bench

    result = run_bench([checkpoints["baseline", 1]], [checkpoints["gatedv", 1]], rounds=1, warmup=1, calls=2,
                       batch_size=2, device=torch.device("cuda"), progress=False)
    data = result.to_dict()
    assert data["memory_kind"] == "cuda_max_allocated"
    assert 0 < data["summary"]["peak_memory_baseline_bytes"] < 2**30
    assert data["summary"]["step_ratio"] > 0
