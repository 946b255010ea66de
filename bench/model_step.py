"""Training-step and forward throughput: our baseline vs `transformers` LlamaForCausalLM, and GatedV vs baseline.

One run alternates the three models (same weights for ours and Llama; GatedV with the same seed) under the
cost protocol (docs/method.md §7) of `trainer.run.bench` (rounds, warm-up calls, timed calls, median per round). The
step is forward with next-token cross-entropy (ours: `model(inputs, targets)`, the chunked fused readout loss; Llama:
its logits and `F.cross_entropy`), backward, gradient clipping at 1.0 and the AdamW of `gatedv train` for both.
Ratios are taken per round (both models ran back to back) and summarised by their median, which keeps them
meaningful on a shared machine; the absolute tokens/s are not.

    python bench/model_step.py                 # small config, batch 8 × 256, FP32
    python bench/model_step.py --quick         # fewer rounds (a minute or two)
    python bench/model_step.py --config medium --device cuda --tf32
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import cast

import numpy as np
import torch
import torch.nn.functional as F

from kernel_floor import kernel_floor_line, kernel_seconds
from trainer.hf.export import to_llama
from trainer.model.transformer import build_model, count_parameters, model_config
from trainer.run.bench import mode_calls, synthetic_batch, time_calls
from trainer.run.device import Precision, select_device

# Dense peak TFLOPS (FP32, TF32) by GPU name, from the vendors' data sheets; --peak-tflops overrides.
PEAK_TFLOPS = {"H200": (67.0, 494.7), "H100 PCIe": (51.2, 378.0), "H100": (67.0, 494.7), "A100": (19.5, 156.0)}


def peak_tflops(device: torch.device, tf32: bool, override: float | None) -> float | None:
    if override:
        return override
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peaks[tf32] for key, peaks in PEAK_TFLOPS.items() if key in name), None)


def training_flops_per_token(n_params: int, n_layers: int, d_model: int, seq_len: int) -> float:
    """6N + 12·L·d·T (the PaLM convention; the tied readout is counted once in N)."""
    return 6 * n_params + 12 * n_layers * d_model * seq_len


class LlamaLogits(torch.nn.Module):
    """LlamaForCausalLM with our call signature: token ids → logits, or with targets → mean cross-entropy."""

    def __init__(self, llama: torch.nn.Module) -> None:
        super().__init__()
        self.llama = llama

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        logits = self.llama(input_ids=idx, use_cache=False).logits
        if targets is None:
            return logits
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="small")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="3 rounds × (1 warm-up + 3 timed) calls")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--tf32", action="store_true", help="TF32 matmuls (CUDA only)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: this process's CPU time, steadier than wall time on a busy machine "
                             "(use with --threads 1)")
    parser.add_argument("--peak-tflops", type=float, default=None, help="device peak for MFU (default: known GPUs)")
    parser.add_argument("--seed", type=int, default=20270211)
    parser.add_argument("--compile", action="store_true",
                        help="also time torch.compile(ours), after checking it gives the eager loss within 1e-5")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.warmup, args.calls = 3, 1, 3
    return args


def build_models(args: argparse.Namespace, device: torch.device, batch: torch.Tensor) -> tuple[dict, float | None]:
    """Ours, the transformers Llama with the same weights, GatedV, and (with --compile) torch.compile(ours) after
    checking that it gives the eager loss; returns the models and that loss difference."""
    baseline = build_model(model_config(args.config), args.seed, device)
    models = {
        "ours": baseline,
        "hf": LlamaLogits(to_llama(build_model(model_config(args.config), args.seed, device)).train()),
        "gatedv": build_model(model_config(args.config, "gatedv"), args.seed, device),
    }
    if not args.compile:
        return models, None
    # torch.compile of a module returns an OptimizedModule (a Module), which its stub types as a plain callable.
    compiled = cast(torch.nn.Module, torch.compile(build_model(model_config(args.config), args.seed, device)))
    with torch.no_grad():
        eager_loss, compiled_loss = baseline(batch[:, :-1], batch[:, 1:]), compiled(batch[:, :-1], batch[:, 1:])
    difference = abs(eager_loss.item() - compiled_loss.item())
    if difference > 1e-5:
        raise SystemExit(f"torch.compile changed the loss: {eager_loss.item()} vs {compiled_loss.item()}")
    models["ours-compiled"] = compiled
    return models, difference


def measure(args: argparse.Namespace, device: torch.device) -> tuple[dict, dict, float | None, float | None]:
    """The alternating protocol over every model; per-round medians, load averages, the step's kernel floor."""
    cfg = model_config(args.config)
    batch = synthetic_batch(cfg.vocab_size, args.batch, cfg.seq_len, device)
    models, compiled_loss_diff = build_models(args, device, batch)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    load_before = os.getloadavg()
    calls = {name: mode_calls(m, batch, device) for name, m in models.items()}
    if args.compile:  # compile both graphs outside the timed protocol
        calls["ours-compiled"]["forward"]()
        calls["ours-compiled"]["step"]()
    medians = time_calls(calls, rounds=args.rounds, warmup=args.warmup, timed=args.calls, sync=sync,
                         clock=time.process_time if args.clock == "cpu" else time.perf_counter)
    load = {"before": load_before[0], "after": os.getloadavg()[0]}
    # On a CPU, the step's matrix products and attention kernels alone (profiled after the timed protocol).
    kernel_step_s = kernel_seconds(calls["ours"]["step"])[0] if device.type == "cpu" else None
    return medians, load, kernel_step_s, compiled_loss_diff


def summarise(args: argparse.Namespace, device: torch.device, medians: dict, load: dict,
              kernel_step_s: float | None, compiled_loss_diff: float | None) -> dict:
    cfg = model_config(args.config)
    tokens = args.batch * cfg.seq_len
    parameters = count_parameters(build_model(cfg, args.seed, "meta"))
    flops_per_token = training_flops_per_token(parameters, cfg.n_layers, cfg.d_model, cfg.seq_len)
    peak = peak_tflops(device, args.tf32, args.peak_tflops)
    step_tokens_per_s = {name: tokens / float(np.median(per["step"])) for name, per in medians.items()}
    return {
        "config": args.config, "batch": args.batch, "seq_len": cfg.seq_len, "device": str(device),
        "device_name": (torch.cuda.get_device_name(device) if device.type == "cuda"
                        else f"CPU, {torch.get_num_threads()} threads"),
        "precision": "tf32" if args.tf32 else "fp32", "torch": torch.__version__, "clock": args.clock,
        "rounds": args.rounds, "warmup": args.warmup, "calls": args.calls,
        "load_average_before_after": [load["before"], load["after"]],
        "tokens_per_s": {name: {mode: tokens / float(np.median(t)) for mode, t in per.items()}
                         for name, per in medians.items()},
        # Per-round ratios, then their median.
        "ours_vs_hf_speedup": {mode: float(np.median(medians["hf"][mode] / medians["ours"][mode]))
                               for mode in ("forward", "step")},
        "gatedv_overhead": {mode: float(np.median(medians["gatedv"][mode] / medians["ours"][mode])) - 1
                            for mode in ("forward", "step")},
        "ours_step_kernel_s": kernel_step_s,
        "ours_vs_hf_step_ceiling": (float(np.median(medians["hf"]["step"])) / kernel_step_s) if kernel_step_s else None,
        "compiled_vs_eager_loss_diff": compiled_loss_diff,
        "training_flops_per_token": flops_per_token,
        "peak_tflops": peak,
        "mfu": ({name: rate * flops_per_token / (peak * 1e12) for name, rate in step_tokens_per_s.items()}
                if peak else None),
        "per_round_s": {name: {mode: t.tolist() for mode, t in per.items()} for name, per in medians.items()},
    }


def print_result(result: dict, medians: dict) -> None:
    load_before, load_after = result["load_average_before_after"]
    print(f"{result['config']} config, batch {result['batch']} × {result['seq_len']}, {result['precision']}, "
          f"{result['device_name']}, torch {result['torch']}; {result['rounds']} rounds × "
          f"({result['warmup']} warm-up + {result['calls']} timed), {result['clock']} clock; load average "
          f"{load_before:.1f} → {load_after:.1f}")
    print(f"{'':22}{'step tok/s':>12}{'forward tok/s':>15}")
    for name, rates in result["tokens_per_s"].items():
        print(f"{name:22}{rates['step']:>12,.0f}{rates['forward']:>15,.0f}")
    s, o = result["ours_vs_hf_speedup"], result["gatedv_overhead"]
    print(f"ours / transformers throughput: step {s['step']:.3f}×, forward {s['forward']:.3f}× "
          "(median per-round ratio)")
    print(f"GatedV overhead vs ours:        step {o['step']:+.2%}, forward {o['forward']:+.2%}")
    if result["ours_step_kernel_s"]:
        print(kernel_floor_line("ours (step)", result["ours_step_kernel_s"], float(np.median(medians["ours"]["step"])),
                                "transformers", float(np.median(medians["hf"]["step"]))))
    if "ours-compiled" in medians:
        compiled_speedup = float(np.median(medians["ours"]["step"] / medians["ours-compiled"]["step"]))
        print(f"torch.compile(ours): step {compiled_speedup:.3f}× eager; |loss difference| "
              f"{result['compiled_vs_eager_loss_diff']:.1e}")
    if result["mfu"]:
        print(f"MFU of the training step (6N + 12·L·d·T FLOPs/token, peak {result['peak_tflops']:g} TFLOPS): "
              + ", ".join(f"{name} {mfu:.1%}" for name, mfu in result["mfu"].items()))
    sys.stdout.flush()


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = select_device(args.device)
    Precision(tf32=args.tf32).apply(device)
    medians, load, kernel_step_s, compiled_loss_diff = measure(args, device)
    result = summarise(args, device, medians, load, kernel_step_s, compiled_loss_diff)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_result(result, medians)


if __name__ == "__main__":
    main()
