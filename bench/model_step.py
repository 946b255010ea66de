"""Training-step and forward throughput: our baseline vs `transformers` LlamaForCausalLM, and GatedV vs baseline.

One run alternates the three models (same weights for ours and Llama; GatedV with the same seed) under the
SPEC §7 protocol of `trainer.bench` (rounds, warm-up calls, timed calls, median per round). The step is
the trainer's own: forward, next-token cross-entropy, backward, gradient clipping at 1.0 and the AdamW of
`gatedv train`; Llama gets exactly the same loss, clipping and optimizer, so the ratio compares the models.
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

import numpy as np
import torch

from trainer.bench import mode_calls, synthetic_batch, time_calls
from trainer.device import Precision, select_device
from trainer.hf_export import to_llama
from trainer.model import build_model, model_config


class LlamaLogits(torch.nn.Module):
    """LlamaForCausalLM with our call signature: token ids → logits."""

    def __init__(self, llama: torch.nn.Module) -> None:
        super().__init__()
        self.llama = llama

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.llama(input_ids=idx, use_cache=False).logits


def main() -> None:
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
                        help="cpu: this process's CPU time, steadier than wall time on a busy machine (use with --threads 1)")
    parser.add_argument("--seed", type=int, default=20270211)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.warmup, args.calls = 3, 1, 3
    if args.threads:
        torch.set_num_threads(args.threads)
    device = select_device(args.device)
    Precision(tf32=args.tf32).apply(device)

    baseline = build_model(model_config(args.config), args.seed, device)
    models = {
        "ours": baseline,
        "hf": LlamaLogits(to_llama(build_model(model_config(args.config), args.seed, device)).train()),
        "gatedv": build_model(model_config(args.config, "gatedv"), args.seed, device),
    }
    batch = synthetic_batch(baseline.config.vocab_size, args.batch, baseline.config.seq_len, device)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    load_before = os.getloadavg()
    medians = time_calls({name: mode_calls(m, batch, device) for name, m in models.items()},
                         rounds=args.rounds, warmup=args.warmup, timed=args.calls, sync=sync,
                         clock=time.process_time if args.clock == "cpu" else time.perf_counter)
    load_after = os.getloadavg()

    tokens = args.batch * baseline.config.seq_len
    result = {
        "config": args.config, "batch": args.batch, "seq_len": baseline.config.seq_len, "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads",
        "precision": "tf32" if args.tf32 else "fp32", "torch": torch.__version__, "clock": args.clock,
        "rounds": args.rounds, "warmup": args.warmup, "calls": args.calls,
        "load_average_before_after": [load_before[0], load_after[0]],
        "tokens_per_s": {name: {mode: tokens / float(np.median(t)) for mode, t in per.items()}
                         for name, per in medians.items()},
        # Per-round ratios, then their median.
        "ours_vs_hf_speedup": {mode: float(np.median(medians["hf"][mode] / medians["ours"][mode]))
                               for mode in ("forward", "step")},
        "gatedv_overhead": {mode: float(np.median(medians["gatedv"][mode] / medians["ours"][mode])) - 1
                            for mode in ("forward", "step")},
        "per_round_s": {name: {mode: t.tolist() for mode, t in per.items()} for name, per in medians.items()},
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{args.config} config, batch {args.batch} × {baseline.config.seq_len}, {result['precision']}, "
          f"{result['device_name']}, torch {torch.__version__}; {args.rounds} rounds × "
          f"({args.warmup} warm-up + {args.calls} timed), {args.clock} clock; load average {load_before[0]:.1f} → {load_after[0]:.1f}")
    print(f"{'':22}{'step tok/s':>12}{'forward tok/s':>15}")
    for name in models:
        print(f"{name:22}{result['tokens_per_s'][name]['step']:>12,.0f}{result['tokens_per_s'][name]['forward']:>15,.0f}")
    s, o = result["ours_vs_hf_speedup"], result["gatedv_overhead"]
    print(f"ours / transformers throughput: step {s['step']:.3f}×, forward {s['forward']:.3f}× (median per-round ratio)")
    print(f"GatedV overhead vs ours:        step {o['step']:+.2%}, forward {o['forward']:+.2%}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
