#!/usr/bin/env bash
# CUDA checks in under five minutes, ending with one summary:
#   1. the test suite's CUDA-marked tests (pytest -m cuda);
#   2. the training-step benchmark (ours vs transformers Llama, GatedV vs baseline) for the small and medium
#      configs in FP32 and TF32, with MFU;
#   3. `gatedv bench` (docs/method.md §7, Table 6) on two freshly initialised medium models (baseline and GatedV,
#      one seed);
#   4. the `large` size of examples/large-context.toml (110M parameters, 2,048-token context): training-step
#      throughput, MFU and GPU-hours per run in TF32 and bf16, peak memory beside `gatedv params --memory`.
# Usage: bash bench/gpu.sh [OUT_DIR]      (default: a new temporary directory; JSON results are kept there)
set -euo pipefail
cd "$(dirname "$0")/.."

python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'bench/gpu.sh: no CUDA device')"
OUT="${1:-$(mktemp -d -t gatedv-gpu-XXXXXX)}"
mkdir -p "$OUT"
echo "results in $OUT" >&2

tests_status=0
python -m pytest -m cuda -q -p no:cacheprovider tests 2>&1 | tee "$OUT/cuda-tests.txt" || tests_status=$?

for config in small medium; do
  for precision in fp32 tf32; do
    flag=""
    if [ "$precision" = tf32 ]; then flag="--tf32"; fi
    echo "step benchmark: $config $precision" >&2
    python bench/model_step.py --config "$config" --device cuda $flag --rounds 5 --warmup 3 --calls 10 --json \
      > "$OUT/step-$config-$precision.json"
  done
done

python - "$OUT" <<'EOF'
import sys
from pathlib import Path

from trainer.model.transformer import build_model, model_config
from trainer.run.checkpoint import save_checkpoint

out = Path(sys.argv[1])
for variant in ("baseline", "gatedv"):
    model = build_model(model_config("medium", variant), 20270211, "cpu")
    save_checkpoint(out / f"medium-{variant}.pt", model, extra={"run": {"variant": variant, "seed": 20270211}})
EOF
gatedv bench "$OUT/medium-baseline.pt" --variant "$OUT/medium-gatedv.pt" --device cuda --out "$OUT/bench.json" \
  > "$OUT/bench.txt"

for variant in baseline gatedv; do
  for precision in tf32 bf16; do
    echo "large step: $variant $precision" >&2
    python bench/large_step.py --variant "$variant" --precision "$precision" --json > "$OUT/large-$variant-$precision.json"
  done
done

python - "$OUT" "$tests_status" <<'EOF'
import json
import sys
from pathlib import Path

out, tests_status = Path(sys.argv[1]), int(sys.argv[2])
tests = (out / "cuda-tests.txt").read_text().strip().splitlines()
print("\n=== bench/gpu.sh summary ===")
print(f"CUDA-marked tests: {tests[-1] if tests else 'no output'} (exit {tests_status})")
print(f"{'config':8}{'precision':10}{'ours tok/s':>12}{'hf tok/s':>12}{'ours/hf':>9}{'GatedV step':>13}{'MFU ours':>10}")
for config in ("small", "medium"):
    for precision in ("fp32", "tf32"):
        r = json.loads((out / f"step-{config}-{precision}.json").read_text())
        mfu = f"{r['mfu']['ours']:.1%}" if r["mfu"] else "n/a"
        print(f"{config:8}{precision:10}{r['tokens_per_s']['ours']['step']:>12,.0f}"
              f"{r['tokens_per_s']['hf']['step']:>12,.0f}{r['ours_vs_hf_speedup']['step']:>8.3f}×"
              f"{r['gatedv_overhead']['step']:>+13.2%}{mfu:>10}")
print(f"device: {r['device_name']}, torch {r['torch']}")
print("\ngatedv bench (medium, fresh weights, seed 20270211):")
print((out / "bench.txt").read_text().rstrip())
print("\nlarge (examples/large-context.toml), batch 64 x 2048 in 8 micro-batches:")
print(f"{'variant':10}{'precision':10}{'tok/s':>10}{'MFU':>8}{'GPU-h/run':>11}{'peak GiB':>10}{'estimate GiB':>14}")
for variant in ("baseline", "gatedv"):
    for precision in ("tf32", "bf16"):
        r = json.loads((out / f"large-{variant}-{precision}.json").read_text())
        mfu = f"{r['mfu']:.1%}" if r["mfu"] else "n/a"
        print(f"{variant:10}{precision:10}{r['tokens_per_s']:>10,.0f}{mfu:>8}{r['gpu_hours_per_run']:>11.1f}"
              f"{r['peak_allocated_bytes'] / 2**30:>10.2f}{r['estimated_bytes'] / 2**30:>14.2f}")
sys.exit(tests_status)
EOF
