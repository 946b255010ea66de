"""In-memory scoring throughput: `score_model` on a model in memory against `gatedv evaluate --hf` on its saved copy.

One model (the baseline of `--config`, random weights, as a `transformers` Llama) scores a data directory's
evaluation set both ways, each from the call to its loss file on disk: `evaluate_hf` (what `gatedv evaluate --hf`
runs: it loads the directory, hashes its weight files, checks causality, scores) and `score_model` (hashes the
state dict and the tokenizer, checks causality, scores). Both score the stored token ids (the saved copy holds the
data directory's tokenizer.json) with the same batch size, under the alternating protocol of `trainer.run.bench`
(one timed call per route per round, order alternating). It prints the documents per second of each, their ratio
(the median of the per-round ratios) and the largest difference between their loss sums, which must be 0.

    python bench/score_in_memory.py --data DATA                          # small, dev set, 5 rounds
    python bench/score_in_memory.py --data DATA --threads 1 --clock cpu  # steadier on a busy machine
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from gatedv_stats.io.lossfiles import read_loss_file
from trainer.data.prepared import PreparedData
from trainer.hf.evaluate import DEFAULT_BATCH_SIZE, evaluate_hf
from trainer.hf.export import to_llama
from trainer.hf.score import score_model
from trainer.model.transformer import build_model, model_config
from trainer.run.bench import time_calls
from trainer.run.device import select_device


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="a prepared data directory")
    parser.add_argument("--eval-set", default="dev")
    parser.add_argument("--config", default="small")
    parser.add_argument("--batch", type=int, default=DEFAULT_BATCH_SIZE, help="windows per forward pass")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: this process's CPU time, steadier on a busy machine (use with --threads 1)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = select_device(args.device)
    data = PreparedData.open(args.data)
    llama = to_llama(build_model(model_config(args.config, vocab_size=data.vocab_size), 20270211, device))
    work = Path(tempfile.mkdtemp(prefix="score-in-memory-"))
    try:
        saved = work / "model"
        llama.save_pretrained(saved)
        shutil.copyfile(data.tokenizer_path, saved / "tokenizer.json")
        (saved / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
        routes = {
            "in memory": lambda: score_model(llama, None, args.data, work / "memory.parquet", arm="bench", seed=0,
                                             eval_set=args.eval_set, batch_size=args.batch, progress=False),
            "evaluate --hf": lambda: evaluate_hf(saved, args.data, work / "hf.parquet", eval_set=args.eval_set,
                                                 arm="bench", device=str(device), batch_size=args.batch,
                                                 progress=False),
        }
        for route in routes.values():  # warm-up: one call each
            route()
        sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
        load_before = os.getloadavg()
        medians = time_calls({name: {"score": call} for name, call in routes.items()}, rounds=args.rounds, warmup=0,
                             timed=1, sync=sync,
                             clock=time.process_time if args.clock == "cpu" else time.perf_counter)
        load_after = os.getloadavg()
        memory, hf = read_loss_file(work / "memory.parquet"), read_loss_file(work / "hf.parquet")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    n_docs = len(memory.docs)
    seconds = {name: medians[name]["score"] for name in routes}
    result = {
        "config": args.config, "eval_set": args.eval_set, "documents": n_docs, "batch": args.batch,
        "device": str(device), "threads": torch.get_num_threads(), "clock": args.clock, "rounds": args.rounds,
        "torch": torch.__version__,
        "load_average_before_after": [load_before[0], load_after[0]],
        "documents_per_s": {name: n_docs / float(np.median(s)) for name, s in seconds.items()},
        "in_memory_vs_evaluate_hf": float(np.median(seconds["evaluate --hf"] / seconds["in memory"])),
        "max_abs_loss_sum_diff": float(np.max(np.abs(memory.docs["loss_sum"] - hf.docs["loss_sum"]))),
        "per_round_s": {name: s.tolist() for name, s in seconds.items()},
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{args.config} config as Llama, {args.eval_set} set: {n_docs} documents, batch {args.batch}, {device}, "
          f"{torch.get_num_threads()} threads, {args.clock} clock, {args.rounds} rounds; load average "
          f"{load_before[0]:.1f} → {load_after[0]:.1f}")
    for name in routes:
        print(f"{name:14} {result['documents_per_s'][name]:>9,.1f} documents/s "
              f"(median {float(np.median(seconds[name])):.3f} s)")
    print(f"in memory / evaluate --hf throughput: {result['in_memory_vs_evaluate_hf']:.3f}× (median per-round ratio); "
          f"max |loss-sum difference| {result['max_abs_loss_sum_diff']:.2e} nats")


if __name__ == "__main__":
    main()
