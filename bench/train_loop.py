"""Training throughput of `gatedv train` against the bare update it is built around.

Peer: a plain loop over the same precomputed batches doing exactly the trainer's arithmetic per update
(forward, next-token cross-entropy, backward, clipping at 1.0, AdamW of `make_optimizer`) and nothing else.
`train()` adds the sampler, the LR schedule, the finiteness check (one host sync per update) and the progress
bar; its tokens/s exclude the development evaluations, as `TrainResult.tokens_per_second` does. The two
alternate over rounds; the ratio is taken per round and its median reported.

    python bench/train_loop.py --data gatedv-demo/data                    # tiny, 40 updates, 3 rounds
    python bench/train_loop.py --data DATA --config small --device cuda --updates 200
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch

from trainer.data.prepared import PreparedData
from trainer.model.transformer import build_model, model_config
from trainer.run.device import select_device
from trainer.run.recipe import CLIP_NORM, RunSpec, Runtime, make_optimizer
from trainer.run.train import next_token_loss, train


def bare_loop(data: PreparedData, size: str, updates: int, batch: int, device: torch.device) -> float:
    """Tokens/s of the bare updates (batches drawn before the clock starts)."""
    model = build_model(model_config(size, "gatedv"), 1, device)
    optimizer = make_optimizer(model, 1e-3, device)
    sampler = data.sampler(1)
    batches = [sampler.batch(u, batch).to(device) for u in range(updates)]
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    sync()
    began = time.perf_counter()
    for tokens in batches:
        next_token_loss(model, tokens).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    sync()
    return updates * batch * model.config.seq_len / (time.perf_counter() - began)


def trainer_loop(data: PreparedData, size: str, updates: int, batch: int, device: str) -> float:
    spec = RunSpec.make(data.path, size, "gatedv", 1, lr=1e-3, updates=updates, eval_every=updates, batch_size=batch)
    with tempfile.TemporaryDirectory() as run_dir:
        return train(spec, run_dir, runtime=Runtime(device=device, progress=False)).tokens_per_second


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="A prepared data directory.")
    parser.add_argument("--config", default="tiny")
    parser.add_argument("--updates", type=int, default=40)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    data = PreparedData.open(args.data)
    device = select_device(args.device)
    load_before = os.getloadavg()[0]
    bare, ours = [], []
    for _ in range(args.rounds):
        bare.append(bare_loop(data, args.config, args.updates, args.batch, device))
        ours.append(trainer_loop(data, args.config, args.updates, args.batch, args.device))
    ratios = [o / b for o, b in zip(ours, bare)]
    print(f"{args.config} config, batch {args.batch} x 256, {args.updates} updates x {args.rounds} rounds, {device}, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}; load average "
          f"{load_before:.1f} -> {os.getloadavg()[0]:.1f}")
    print(f"bare update loop (peer): {statistics.median(bare):>10,.0f} tokens/s  (rounds: "
          f"{', '.join(f'{value:,.0f}' for value in bare)})")
    print(f"gatedv train:            {statistics.median(ours):>10,.0f} tokens/s  (rounds: "
          f"{', '.join(f'{value:,.0f}' for value in ours)})")
    print(f"train / bare: {statistics.median(ratios):.3f} (median per-round ratio)")


if __name__ == "__main__":
    main()
