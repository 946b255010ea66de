"""Cost benchmark (paper Table 6, docs/method.md §7): paired time ratios and peak memory of two model checkpoints.

Protocol. Fixed synthetic inputs (batch 8 × 256). Over R rounds the two models alternate (baseline first
in even rounds, variant first in odd rounds, so neither always runs on a warmer machine); per round and mode
(full-context forward; training step) each model makes W untimed warm-up calls and then K timed calls, with
the device synchronised before and after each timed call. Per round the median call time of each model and
their ratio variant / baseline; per seed the median ratio over rounds; the reported ratio is the mean over
seeds. Peak memory is measured per model on its own: CUDA peak allocated memory (counters reset between the
two models), or on a CPU the peak resident set size of a fresh process that runs only that model.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from gatedv_stats.core.errors import InputError, ParameterError, RunFailure
from gatedv_stats.core.files import file_sha256
from gatedv_stats.io.benchfiles import BENCH_FORMAT

MODES = ("forward", "step")
GIB = 1024**3


def check_protocol(rounds: int, warmup: int, calls: int) -> None:
    """R ≥ 1 rounds, W ≥ 0 warm-up calls and K ≥ 1 timed calls."""
    for flag, value, minimum in (("--rounds", rounds, 1), ("--warmup", warmup, 0), ("--calls", calls, 1)):
        if value < minimum:
            raise InputError(f"{flag}: must be at least {minimum}, got {value}")


def time_calls(
    calls: dict[str, dict[str, Callable[[], object]]],
    *,
    rounds: int,
    warmup: int,
    timed: int,
    clock: Callable[[], float] = time.perf_counter,
    sync: Callable[[], None] = lambda: None,
) -> dict[str, dict[str, np.ndarray]]:
    """Run the alternating protocol over `calls[model][mode]`; return `[model][mode]` → (rounds,) medians (s).

    Models alternate order every round (the first model of `calls` leads even rounds); within a round each
    mode runs for each model in turn: `warmup` untimed calls, then `timed` calls each bracketed by `sync`.
    """
    check_protocol(rounds, warmup, timed)
    names = list(calls)
    modes = list(calls[names[0]])
    medians = {name: {mode: np.empty(rounds) for mode in modes} for name in names}
    for r in range(rounds):
        for mode in modes:
            for name in names if r % 2 == 0 else names[::-1]:
                fn = calls[name][mode]
                for _ in range(warmup):
                    fn()
                times = np.empty(timed)
                for k in range(timed):
                    sync()
                    start = clock()
                    fn()
                    sync()
                    times[k] = clock() - start
                medians[name][mode][r] = np.median(times)
    return medians


@dataclass(frozen=True)
class ModeResult:
    """One mode of one seed pair: per-round median call times and their ratios."""

    baseline_s: tuple[float, ...]
    variant_s: tuple[float, ...]

    @property
    def ratios(self) -> np.ndarray:
        return np.asarray(self.variant_s) / np.asarray(self.baseline_s)

    @property
    def ratio(self) -> float:
        """Median over rounds of the per-round ratio variant / baseline."""
        return float(np.median(self.ratios))

    def to_dict(self) -> dict:
        return {"baseline_s": list(self.baseline_s), "variant_s": list(self.variant_s),
                "ratios": self.ratios.tolist(), "ratio": self.ratio}


@dataclass(frozen=True)
class PairResult:
    """One seed: the two checkpoints, the modes' results and each model's peak memory (bytes)."""

    seed: int | None
    baseline: dict  # path, sha256, variant name
    variant: dict
    modes: dict[str, ModeResult]
    peak_memory_bytes: dict[str, int]  # "baseline" / "variant"

    def to_dict(self) -> dict:
        return {"seed": self.seed, "baseline": self.baseline, "variant": self.variant,
                "modes": {mode: result.to_dict() for mode, result in self.modes.items()},
                "peak_memory_bytes": self.peak_memory_bytes}


@dataclass(frozen=True)
class BenchResult:
    """The benchmark: settings, one PairResult per seed, and the Table 6 summary."""

    settings: dict
    pairs: tuple[PairResult, ...]

    def mode_ratio(self, mode: str) -> float:
        """Mean over seeds of the per-seed median ratio."""
        return float(np.mean([pair.modes[mode].ratio for pair in self.pairs]))

    def peak_memory(self, arm: str) -> int:
        """Median over seeds of the arm's peak memory (bytes)."""
        return int(np.median([pair.peak_memory_bytes[arm] for pair in self.pairs]))

    def summary_dict(self) -> dict:
        return {
            "forward_ratio": self.mode_ratio("forward"),
            "step_ratio": self.mode_ratio("step"),
            "peak_memory_baseline_bytes": self.peak_memory("baseline"),
            "peak_memory_variant_bytes": self.peak_memory("variant"),
            "peak_memory_ratio": self.peak_memory("variant") / self.peak_memory("baseline"),
        }

    def to_dict(self) -> dict:
        return {"format": BENCH_FORMAT, **self.settings, "pairs": [pair.to_dict() for pair in self.pairs],
                "summary": self.summary_dict()}

    def summary(self) -> str:
        s = self.summary_dict()
        arms = (self.settings["baseline_arm"], self.settings["variant_arm"])
        memory = self.settings["memory_kind"]
        lines = [
            f"{'':30}{arms[0]:>14}{arms[1]:>14}",
            f"{'full-context forward ratio':30}{1.0:>14.6f}{s['forward_ratio']:>14.6f}",
            f"{'training-step ratio':30}{1.0:>14.6f}{s['step_ratio']:>14.6f}",
            f"{'peak memory (GiB, ' + memory + ')':30}"
            f"{s['peak_memory_baseline_bytes'] / GIB:>14.4f}{s['peak_memory_variant_bytes'] / GIB:>14.4f}",
            "",
            f"{len(self.pairs)} seed pair(s); {self.settings['rounds']} rounds × ({self.settings['warmup']} warm-up + "
            f"{self.settings['calls']} timed) calls per mode; batch {self.settings['batch_size']} × "
            f"{self.settings['seq_len']}; {self.settings['device_name']}",
        ]
        for pair in self.pairs:
            lines.append(f"  seed {pair.seed}: forward {pair.modes['forward'].ratio:.4f} "
                         f"(rounds {', '.join(f'{x:.3f}' for x in pair.modes['forward'].ratios)}), "
                         f"step {pair.modes['step'].ratio:.4f}")
        return "\n".join(lines)


# --- the two modes on a real model -----------------------------------------------------------------------


def synthetic_batch(vocab_size: int, batch_size: int, seq_len: int, device: torch.device) -> torch.Tensor:
    """Fixed token windows (batch_size, seq_len + 1): inputs and next-token targets, the same for every model."""
    generator = torch.Generator().manual_seed(0)
    return torch.randint(0, vocab_size, (batch_size, seq_len + 1), generator=generator).to(device)


def mode_calls(model: torch.nn.Module, batch: torch.Tensor, device: torch.device) -> dict[str, Callable[[], object]]:
    """The two timed calls of one model: a full-context forward (logits, no gradient), and a training step:
    mean next-token cross-entropy through `model(inputs, targets)`, backward, gradient clipping and the AdamW
    of `gatedv train` (`trainer.run.recipe.make_optimizer`)."""
    from trainer.run.recipe import CLIP_NORM, make_optimizer

    optimizer = make_optimizer(model, 1e-4, device)
    inputs, targets = batch[:, :-1], batch[:, 1:]

    def forward() -> None:
        with torch.no_grad():
            model(inputs)

    def step() -> None:
        model(inputs, targets).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return {"forward": forward, "step": step}


def _run_seed(extra: dict) -> int | None:
    run = extra.get("run")
    return run.get("seed") if isinstance(run, dict) else None


def peak_memory_bytes(checkpoints: dict[str, Path], device: torch.device, batch_size: int) -> dict[str, int]:
    """Peak memory of each model doing one forward and one training step, each measured apart from the others.

    CUDA: peak allocated memory, counters reset before each model. CPU: peak RSS of a fresh Python process
    per checkpoint (`python -m trainer.run.bench --peak-rss`; run side by side, so the models never mix).
    """
    if device.type == "cuda":
        from trainer.run.checkpoint import load_checkpoint

        peaks = {}
        for arm, checkpoint in checkpoints.items():
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
            model = load_checkpoint(checkpoint, device).model
            batch = synthetic_batch(model.config.vocab_size, batch_size, model.config.seq_len, device)
            calls = mode_calls(model, batch, device)
            calls["forward"]()
            calls["step"]()
            torch.cuda.synchronize(device)
            peaks[arm] = int(torch.cuda.max_memory_allocated(device))
            del model, calls, batch
        torch.cuda.empty_cache()
        return peaks
    children = {
        arm: subprocess.Popen(
            [sys.executable, "-m", "trainer.run.bench", "--peak-rss", str(path), "--batch", str(batch_size)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for arm, path in checkpoints.items()
    }
    peaks = {}
    for arm, child in children.items():
        stdout, stderr = child.communicate()
        if child.returncode != 0:
            last = stderr.strip().splitlines()[-1] if stderr.strip() else f"exit status {child.returncode}"
            raise RunFailure(f"{checkpoints[arm]}: the peak-memory process failed ({last})")
        peaks[arm] = int(json.loads(stdout)["peak_rss_bytes"])
    return peaks


def run_bench(
    baseline_checkpoints: Sequence[str | os.PathLike[str]],
    variant_checkpoints: Sequence[str | os.PathLike[str]],
    *,
    rounds: int = 7,
    warmup: int = 3,
    calls: int = 10,
    batch_size: int = 8,
    device: torch.device | str | None = None,  # or a name as select_device takes it (auto, cuda:N, ...); None: cpu
    progress: bool = True,
) -> BenchResult:
    """The cost protocol (docs/method.md §7) over seed pairs (baseline_checkpoints[i], variant_checkpoints[i])."""
    from tqdm import tqdm

    from trainer.run.device import out_of_memory_as, select_device

    if batch_size < 1:
        raise ParameterError("batch_size", f"must be at least 1, got {batch_size}")
    device = select_device(device) if isinstance(device, str) else device or torch.device("cpu")
    check_protocol(rounds, warmup, calls)
    _check_distinct([*baseline_checkpoints, *variant_checkpoints])
    if not baseline_checkpoints or len(baseline_checkpoints) != len(variant_checkpoints):
        raise InputError(f"bench: need one --variant checkpoint per baseline checkpoint "
                         f"(got {len(baseline_checkpoints)} baseline, {len(variant_checkpoints)} variant)")
    pairs, arms = [], set()
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    for base_path, var_path in tqdm(list(zip(map(Path, baseline_checkpoints), map(Path, variant_checkpoints))),
                                    desc="bench seed pairs", unit="pair", file=sys.stderr, disable=not progress):
        base, var, seed = _load_pair(base_path, var_path, device)
        arms.add((base.config.variant, var.config.variant))
        with out_of_memory_as(lambda cause: RunFailure(
                f"out of memory on {device} benchmarking {base_path} and {var_path} ({cause}); "
                f"lower --batch ({batch_size})")):
            batch = synthetic_batch(base.config.vocab_size, batch_size, base.config.seq_len, device)
            medians = time_calls(
                {"baseline": mode_calls(base.model, batch, device), "variant": mode_calls(var.model, batch, device)},
                rounds=rounds, warmup=warmup, timed=calls, sync=sync,
            )
            del base, var
            peaks = peak_memory_bytes({"baseline": base_path, "variant": var_path}, device, batch_size)
        pairs.append(PairResult(
            seed=seed,
            baseline={"path": str(base_path), "sha256": file_sha256(base_path)},
            variant={"path": str(var_path), "sha256": file_sha256(var_path)},
            modes={mode: ModeResult(tuple(medians["baseline"][mode]), tuple(medians["variant"][mode]))
                   for mode in MODES},
            peak_memory_bytes=peaks,
        ))
    if len(arms) != 1:
        raise InputError(f"bench: the pairs mix architectures {sorted(arms)}; give one baseline and one variant")
    (baseline_arm, variant_arm), = arms
    settings = {
        "baseline_arm": baseline_arm, "variant_arm": variant_arm,
        "rounds": rounds, "warmup": warmup, "calls": calls, "batch_size": batch_size,
        "seq_len": int(batch.shape[1] - 1), "precision": "tf32" if torch.backends.cuda.matmul.allow_tf32 else "fp32",
        "device": str(device), "device_name": _device_name(device),
        "memory_kind": "cuda_max_allocated" if device.type == "cuda" else "cpu_peak_rss",
        "torch": torch.__version__, "threads": torch.get_num_threads(),
    }
    return BenchResult(settings=settings, pairs=tuple(pairs))


def _load_pair(base_path: Path, var_path: Path, device: torch.device):
    """A seed pair's two checkpoints, loaded and checked (finite weights, one vocabulary and context, one seed);
    returns both and their seed (None when neither records one)."""
    from trainer.run.checkpoint import check_finite_weights, load_checkpoint

    base, var = load_checkpoint(base_path, device), load_checkpoint(var_path, device)
    check_finite_weights(base_path, base)
    check_finite_weights(var_path, var)
    for what in ("vocab_size", "seq_len"):
        if getattr(base.config, what) != getattr(var.config, what):
            raise InputError(f"{var_path}: {what} {getattr(var.config, what)} differs from "
                             f"{base_path} ({getattr(base.config, what)})")
    seed_b, seed_v = _run_seed(base.extra), _run_seed(var.extra)
    if seed_b is not None and seed_v is not None and seed_b != seed_v:
        raise InputError(f"{var_path}: seed {seed_v} is not the seed {seed_b} of {base_path} (pair by seed)")
    return base, var, seed_b if seed_b is not None else seed_v


def _check_distinct(checkpoints: Sequence[str | os.PathLike[str]]) -> None:
    """Each checkpoint is one arm of one seed pair: none is given twice, nor benchmarked against itself."""
    seen: set[Path] = set()
    for path in map(Path, checkpoints):
        if path.resolve() in seen:
            raise InputError(f"bench: {path} is given more than once; each checkpoint is one arm of one seed pair")
        seen.add(path.resolve())


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{platform.processor() or platform.machine()} CPU, {torch.get_num_threads()} threads"


def _peak_rss_bytes() -> int:
    """This process's peak resident set size: VmHWM on Linux, else ru_maxrss (KiB on Linux, bytes on macOS)."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        scale = 1 if sys.platform == "darwin" else 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def _peak_rss_main(argv: list[str]) -> None:
    """Child process of `peak_memory_bytes` on a CPU: one model, one forward and one step, print peak RSS."""
    from trainer.run.checkpoint import load_checkpoint
    from trainer.run.recipe import make_optimizer  # noqa: F401  (imported before the reset, like every other module)

    checkpoint, batch_size = Path(argv[argv.index("--peak-rss") + 1]), int(argv[argv.index("--batch") + 1])
    device = torch.device("cpu")
    try:  # Linux: restart the high-water mark here, so that transient peaks while importing do not count
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError:
        pass
    model = load_checkpoint(checkpoint, device).model
    calls = mode_calls(model, synthetic_batch(model.config.vocab_size, batch_size, model.config.seq_len, device),
                       device)
    calls["forward"]()
    calls["step"]()
    print(json.dumps({"peak_rss_bytes": _peak_rss_bytes()}))


if __name__ == "__main__":
    _peak_rss_main(sys.argv)
