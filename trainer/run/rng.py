"""The process-wide random generators of a training run: seeded from the run's seed, and their state as a
checkpoint keeps it for an exact resume."""

from __future__ import annotations

from typing import cast

import numpy as np
import torch

from trainer.model.transformer import tensor_seed


def seed_global_rngs(seed: int) -> None:
    """The process-wide torch (CPU and CUDA) and numpy generators seeded from the run's seed. The recipe draws
    from named streams only (`trainer.model.transformer.draw_normal`, the sampler), so this changes no number; it
    makes the generator states a checkpoint keeps for resuming, and so its bytes, the same on every rerun of the
    run."""
    torch.manual_seed(tensor_seed(seed, "global generators", ()))
    np.random.seed(np.random.SeedSequence(seed).generate_state(4))


def rng_state() -> dict:
    kind, keys, pos, has_gauss, cached = cast(tuple[str, np.ndarray, int, int, float], np.random.get_state())
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "numpy": [kind, keys.tolist(), pos, has_gauss, cached]}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"].cpu())
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([cuda_state.cpu() for cuda_state in state["cuda"]])
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
