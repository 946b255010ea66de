"""Downstream-task scoring time: one checkpoint on a 1,000-item multiple-choice task through the harness's evaluator.

What `gatedv evaluate CKPT --tasks` runs (`gatedv_cli.training.evaluate_tasks`): the harness builds the 4,000
(context, choice) requests, `CheckpointLM` scores them, the logs are written and imported as an item-score file.
The checkpoint is an untrained model of the size (the time does not depend on the weights) over a data directory's
tokenizer; the task is synthetic (seeded), with 4 choices of 1-3 words after a 8-16-word question. With `--hf` the
harness's own `hf` model scores the same task on the `export-hf` directory of the same weights (baseline only).

    python bench/task_scoring.py --data DATA                 # small, 1,000 items, 2 threads
    python bench/task_scoring.py --data DATA --hf --json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from gatedv_cli.training import evaluate_tasks
from trainer.data.prepared import PreparedData
from trainer.model.transformer import build_model, model_config
from trainer.run.checkpoint import save_checkpoint
from trainer.run.harness import DEFAULT_BATCH_SIZE

WORDS = ("def", "class", "return", "import", "value", "list", "file", "path", "name", "error", "self", "data",
         "read", "write", "open", "close", "line", "text", "number", "string", "object", "type", "index", "key")


def write_task(directory: Path, items: int, seed: int = 0) -> None:
    """A seeded multiple-choice task `bench_mc` of `items` items over a JSONL file in `directory`."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(items):
        question = " ".join(rng.choice(WORDS, size=int(rng.integers(8, 17))))
        choices = [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 4)))) for _ in range(4)]
        rows.append({"question": question, "choices": choices, "answer": int(rng.integers(4))})
    (directory / "bench_mc.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    (directory / "bench_mc.yaml").write_text("\n".join([
        "task: bench_mc", "dataset_path: json", "dataset_kwargs:", "  data_files:",
        f"    test: {json.dumps(str(directory / 'bench_mc.jsonl'))}", "output_type: multiple_choice",
        "test_split: test", "fewshot_split: test", 'doc_to_text: "Question: {{question}}\\nAnswer:"',
        'doc_to_choice: "{{choices}}"', "doc_to_target: answer", "metric_list:",
        "  - {metric: acc, aggregation: mean, higher_is_better: true}", "metadata: {version: 1.0}"]) + "\n")


def checkpoint_of(size: str, data: Path, path: Path) -> Path:
    """An untrained baseline of `size` saved as a `gatedv train` checkpoint of the data directory `data`."""
    prepared = PreparedData.open(data)
    model = build_model(model_config(size), seed=0)
    run = {"variant": "baseline", "seed": 0, "lr": 0.0, "size": size, "data": str(data)}
    save_checkpoint(path, model, extra={"update": 0, "run": run, "data_manifest_sha256": prepared.manifest_sha256})
    return path


def hf_seconds(checkpoint: Path, work: Path, batch_size: int) -> tuple[float, float]:
    """Wall and CPU seconds of the harness's `hf` model on the task, over the export of `checkpoint`."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    from trainer.hf.export import export_hf

    export_hf(checkpoint, work / "hf")
    start, cpu = time.perf_counter(), time.process_time()
    lm_eval.simple_evaluate(model="hf", model_args=f"pretrained={work / 'hf'},dtype=float32", device="cpu",
                            batch_size=batch_size, tasks=["bench_mc"], log_samples=True, bootstrap_iters=0,
                            task_manager=TaskManager(include_path=str(work), include_defaults=False))
    return time.perf_counter() - start, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="a prepared data directory (its tokenizer)")
    parser.add_argument("--config", default="small")
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--hf", action="store_true", help="also time the harness's hf model on the export")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        os.environ["HF_DATASETS_CACHE"] = str(work / "datasets-cache")
        write_task(work, args.items)
        checkpoint = checkpoint_of(args.config, Path(args.data), work / "checkpoint.pt")
        start, cpu = time.perf_counter(), time.process_time()
        result = evaluate_tasks([checkpoint], "bench_mc", work / "scores", include_path=[str(work)],
                                batch_size=args.batch_size, device="cpu", progress=False)
        ours, ours_cpu = time.perf_counter() - start, time.process_time() - cpu
        theirs, theirs_cpu = hf_seconds(checkpoint, work, args.batch_size) if args.hf else (None, None)
    figures = {"config": args.config, "items": args.items, "requests": 4 * args.items, "threads": args.threads,
               "batch_size": args.batch_size, "seconds": round(ours, 2), "cpu_seconds": round(ours_cpu, 2),
               "items_per_second": round(args.items / ours, 1), "acc": result.runs[0].files[0].means["acc"],
               "hf_seconds": None if theirs is None else round(theirs, 2),
               "hf_cpu_seconds": None if theirs_cpu is None else round(theirs_cpu, 2),
               "load_average": round(os.getloadavg()[0], 2)}
    if args.json:
        print(json.dumps(figures))
        return
    line = f"{args.config}, {args.items} items (4 choices), {args.threads} threads: {ours:.1f} s " \
           f"({args.items / ours:.0f} items/s)"
    print(line + (f"; the harness's hf model on the export: {theirs:.1f} s" if theirs is not None else ""))


if __name__ == "__main__":
    main()
