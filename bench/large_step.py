"""Training-step throughput, MFU and peak memory of the `large` size of examples/large-context.toml on one GPU.

One step is what `gatedv train` runs: the batch in micro-batches (`--grad-accum`), AdamW, under TF32 or bf16
autocast. MFU counts 6N + 12·L·d·T FLOPs per token (bench/model_step.py) against the GPU's dense TF32 peak, or its
bf16 peak (twice the TF32 one on A100 / H100 / H200). The peak allocated memory is printed beside the estimate of
`gatedv params --memory` for the same step.

    python bench/large_step.py --precision bf16 --json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_step import peak_tflops, training_flops_per_token  # noqa: E402
from trainer.grid.experiment import load_experiment  # noqa: E402
from trainer.model.memory import estimate_memory  # noqa: E402
from trainer.model.transformer import build_model, count_parameters  # noqa: E402
from trainer.run.device import Precision  # noqa: E402
from trainer.run.recipe import make_optimizer  # noqa: E402
from trainer.run.train import Objective, accumulate_gradients  # noqa: E402

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "large-context.toml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", choices=("tf32", "bf16"), default="tf32")
    parser.add_argument("--variant", default="baseline")
    parser.add_argument("--grad-accum", type=int, default=8)
    parser.add_argument("--checkpoint-activations", action="store_true")
    parser.add_argument("--steps", type=int, default=5, help="timed steps (after two untimed ones)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    device = torch.device("cuda")
    grid = load_experiment(EXAMPLE)
    spec = grid.spec(args.variant, grid.lrs[grid.variants[0]][0], grid.seeds[0])
    cfg = spec.model_config()
    precision = Precision(tf32=True, bf16=args.precision == "bf16")
    precision.apply(device)
    model = build_model(cfg, spec.seed, device)
    model.checkpoint_activations = args.checkpoint_activations
    optimizer = make_optimizer(model, spec.lr, device)
    objective = Objective(model)
    generator = torch.Generator().manual_seed(0)
    batch = torch.randint(0, cfg.vocab_size, (spec.batch_size, cfg.seq_len + 1), generator=generator).to(device)
    torch.cuda.reset_peak_memory_stats(device)
    seconds = []
    for step in range(args.steps + 2):
        torch.cuda.synchronize(device)
        began = time.perf_counter()
        accumulate_gradients(objective, batch, args.grad_accum, lambda: precision.autocast(device))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize(device)
        if step >= 2:
            seconds.append(time.perf_counter() - began)
    parameters = count_parameters(model)
    tokens_per_s = spec.batch_size * cfg.seq_len / sorted(seconds)[len(seconds) // 2]
    peak = peak_tflops(device, True, None)
    if peak is not None and args.precision == "bf16":
        peak *= 2
    flops = training_flops_per_token(parameters, cfg.n_layers, cfg.d_model, cfg.seq_len) * tokens_per_s
    estimate = estimate_memory(cfg, parameters, spec.batch_size, grad_accum=args.grad_accum,
                               checkpoint_activations=args.checkpoint_activations)
    result = {"variant": args.variant, "precision": args.precision, "parameters": parameters,
              "batch_size": spec.batch_size, "grad_accum": args.grad_accum, "seq_len": cfg.seq_len,
              "checkpoint_activations": args.checkpoint_activations, "tokens_per_s": tokens_per_s,
              "mfu": flops / (peak * 1e12) if peak else None,
              "gpu_hours_per_run": spec.updates * spec.batch_size * cfg.seq_len / tokens_per_s / 3600,
              "peak_allocated_bytes": torch.cuda.max_memory_allocated(device), "estimated_bytes": estimate.total,
              "device_name": torch.cuda.get_device_name(device), "torch": torch.__version__}
    print(json.dumps(result) if args.json else result)


if __name__ == "__main__":
    main()
