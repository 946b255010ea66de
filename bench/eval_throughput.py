"""Evaluation throughput: per-document loss sums over 2,048 windows, our baseline vs `transformers` Llama.

Both models go through `trainer.run.evaluate.document_loss_sums` (what `gatedv evaluate` runs), on the same
weights and the same fixed synthetic windows (2,048 × 257 tokens, as a paper-sized evaluation set), under
the alternating protocol of `trainer.run.bench` (one timed pass per model per round, order alternating). It
also prints the largest difference between the two models' loss sums, which must be float noise.

    python bench/eval_throughput.py            # 2,048 windows, 3 rounds
    python bench/eval_throughput.py --quick    # 256 windows, 2 rounds
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

from kernel_floor import kernel_floor_line, kernel_seconds
from trainer.hf.export import to_llama
from trainer.model.transformer import build_model, model_config
from trainer.run.bench import synthetic_batch, time_calls
from trainer.run.device import select_device
from trainer.run.evaluate import EVAL_BATCH_SIZE, WindowScorer, document_loss_sums


class LlamaLoss(torch.nn.Module):
    """LlamaForCausalLM behind our `loss(idx, targets, reduction)` so that `document_loss_sums` can run it."""

    def __init__(self, llama: torch.nn.Module) -> None:
        super().__init__()
        self.llama = llama

    def loss(self, idx: torch.Tensor, targets: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        logits = self.llama(input_ids=idx, use_cache=False).logits
        losses = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction=reduction)
        return losses.view(targets.shape) if reduction == "none" else losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="small")
    parser.add_argument("--windows", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=EVAL_BATCH_SIZE, help="windows per forward pass")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="256 windows, 2 rounds")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: this process's CPU time, steadier on a busy machine (use with --threads 1)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.windows, args.rounds = 256, 2
    if args.threads:
        torch.set_num_threads(args.threads)
    device = select_device(args.device)
    cfg = model_config(args.config)
    windows = synthetic_batch(cfg.vocab_size, args.windows, cfg.seq_len, torch.device("cpu")).numpy()
    ours = build_model(cfg, 20270211, device)
    models: dict[str, WindowScorer] = {"ours": ours, "hf": LlamaLoss(to_llama(build_model(cfg, 20270211, device)))}
    sums = {}

    def evaluate(name: str):
        def run() -> None:
            sums[name] = document_loss_sums(models[name], windows, device=device, batch_size=args.batch)
        return run

    for name in models:  # warm-up on one batch each
        document_loss_sums(models[name], windows[: args.batch], device=device, batch_size=args.batch)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    load_before = os.getloadavg()
    medians = time_calls({name: {"evaluate": evaluate(name)} for name in models}, rounds=args.rounds, warmup=0,
                         timed=1, sync=sync, clock=time.process_time if args.clock == "cpu" else time.perf_counter)
    load_after = os.getloadavg()
    tokens = args.windows * cfg.seq_len
    kernel_s = None
    if device.type == "cpu":  # kernel time of the first 4 batches, scaled to the whole set
        sample = windows[: 4 * args.batch]
        kernel_s = kernel_seconds(lambda: document_loss_sums(ours, sample, device=device, batch_size=args.batch),
                                  repeats=1)[0] * len(windows) / len(sample)
    result = {
        "config": args.config, "windows": args.windows, "batch": args.batch, "device": str(device),
        "threads": torch.get_num_threads(), "clock": args.clock, "rounds": args.rounds, "torch": torch.__version__,
        "load_average_before_after": [load_before[0], load_after[0]],
        "tokens_per_s": {name: tokens / float(np.median(t["evaluate"])) for name, t in medians.items()},
        "ours_vs_hf_speedup": float(np.median(medians["hf"]["evaluate"] / medians["ours"]["evaluate"])),
        "ours_kernel_s": kernel_s,
        "ours_vs_hf_ceiling": float(np.median(medians["hf"]["evaluate"])) / kernel_s if kernel_s else None,
        "max_abs_loss_sum_diff": float(np.max(np.abs(sums["ours"] - sums["hf"]))),
        "per_round_s": {name: t["evaluate"].tolist() for name, t in medians.items()},
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{args.config} config, {args.windows} windows × {cfg.seq_len} targets, batch {args.batch}, {device}, "
          f"{torch.get_num_threads()} threads, {args.clock} clock, {args.rounds} rounds; "
          f"load average {load_before[0]:.1f} → {load_after[0]:.1f}")
    for name in models:
        print(f"{name:6} {result['tokens_per_s'][name]:>10,.0f} tokens/s")
    print(f"ours / transformers evaluation throughput: {result['ours_vs_hf_speedup']:.3f}× (median per-round ratio); "
          f"max |loss-sum difference| {result['max_abs_loss_sum_diff']:.2e} nats")
    if kernel_s:
        print(kernel_floor_line("ours (evaluation)", kernel_s, float(np.median(medians["ours"]["evaluate"])),
                                "transformers", float(np.median(medians["hf"]["evaluate"]))))


if __name__ == "__main__":
    main()
