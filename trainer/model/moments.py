"""Moment-matching coefficients (docs/method.md §6): per-layer mean and population SD of the values V and of SiLU(V)
of the baseline-initialised model on 128 training windows of the run's seed. Written as JSON (`gatedv moments
--out`, RUN_DIR/moments.json of a run that uses them) sealed with the SHA-256 of its content (`MOMENTS_SEAL`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from gatedv_stats.core.atomic import write_text_atomic
from gatedv_stats.core.errors import InputError
from gatedv_stats.core.integrity import sealed
from gatedv_stats.core.outputs import check_output_file
from gatedv_stats.core.validation import check_seed
from trainer.data.prepared import PreparedData
from trainer.model.transformer import ModelConfig, build_model, model_config
from trainer.run.device import select_device

N_WINDOWS = 128
COLUMNS = ("mu_v", "sigma_v", "mu_phi", "sigma_phi")
MOMENTS_SEAL = "sha256"  # core.integrity's seal, as a floor or bench file has


@dataclass(frozen=True)
class Moments:
    """Per-layer (mu_v, sigma_v, mu_phi, sigma_phi) of one seed, from `n_windows` windows at initialisation."""

    size: str
    seed: int
    n_windows: int
    data_manifest_sha256: str
    coefficients: np.ndarray  # (L, 4) float64

    def tensor(self) -> torch.Tensor:
        return torch.as_tensor(self.coefficients, dtype=torch.float32)

    def to_dict(self) -> dict:
        return {
            "size": self.size,
            "seed": self.seed,
            "n_windows": self.n_windows,
            "data_manifest_sha256": self.data_manifest_sha256,
            "columns": list(COLUMNS),
            "coefficients": self.coefficients.tolist(),
        }

    def summary(self) -> str:
        lines = [f"moments of the {self.size} baseline at initialisation, seed {self.seed}, {self.n_windows} windows",
                 "layer " + " ".join(f"{name:>10}" for name in COLUMNS)]
        lines += [f"{layer:>5} " + " ".join(f"{value:>10.6f}" for value in row)
                  for layer, row in enumerate(self.coefficients)]
        return "\n".join(lines)

    def write(self, path: str | Path) -> None:
        """Write the coefficients as JSON, atomically, sealed with the SHA-256 of their content."""
        write_text_atomic(path, json.dumps(sealed(self.to_dict(), MOMENTS_SEAL), indent=2) + "\n")


def check_moment_options(n_windows: int, seed: int) -> None:
    """The window count and seed of `compute_moments`, checked before any data is opened."""
    if n_windows < 1:
        raise InputError(f"--windows: must be at least 1, got {n_windows}")
    check_seed(seed, "seed")


@torch.no_grad()
def compute_moments(
    data: PreparedData,
    size: str,
    seed: int,
    *,
    device: torch.device | str = "cpu",
    n_windows: int = N_WINDOWS,
    batch_size: int = 16,
    config: ModelConfig | None = None,
) -> Moments:
    """Moment-matching coefficients (docs/method.md §6) for `seed`: the windows are the first `n_windows` of the
    seed's sampler (update 0), the model is the baseline of `size` (of `config`, for a size of one's own) with the
    seed's paired initialisation."""
    check_moment_options(n_windows, seed)
    sampler = data.sampler(seed)
    if n_windows > sampler.n_windows:
        raise InputError(f"--windows: must be at most {sampler.n_windows:,}, the training windows in {data.path}, "
                         f"got {n_windows:,}")
    model = build_model(model_config(size if config is None else config, "baseline"), seed, device)
    windows = sampler.batch(0, n_windows).to(device)
    # Per layer: element count, Σv, Σv², Σφ, Σφ² in float64.
    totals = torch.zeros(model.config.n_layers, 5, dtype=torch.float64, device=device)
    for chunk in windows.split(batch_size):
        with model.capture_values() as values:
            model.hidden_states(chunk[:, :-1])
        for layer, v in enumerate(values):
            assert v is not None  # the forward pass ran every layer
            phi = F.silu(v).double()
            v = v.double()
            totals[layer] += torch.stack([torch.tensor(v.numel(), dtype=torch.float64, device=device),
                                          v.sum(), v.square().sum(), phi.sum(), phi.square().sum()])
    count = totals[:, 0]
    mu_v, mu_phi = totals[:, 1] / count, totals[:, 3] / count
    sigma_v = (totals[:, 2] / count - mu_v.square()).clamp_min(0).sqrt()
    sigma_phi = (totals[:, 4] / count - mu_phi.square()).clamp_min(0).sqrt()
    coefficients = torch.stack([mu_v, sigma_v, mu_phi, sigma_phi], dim=1).cpu().numpy()
    return Moments(size=size, seed=int(seed), n_windows=n_windows, data_manifest_sha256=data.manifest_sha256,
                   coefficients=coefficients)


def measure_moments(data_dir: str | Path, size: str, seed: int, *, n_windows: int = N_WINDOWS, device: str = "auto",
                    out: str | Path | None = None) -> Moments:
    """`gatedv moments`: the coefficients of `seed` on the prepared data directory `data_dir`, also written as JSON
    to `out` when given (where, checked before any work)."""
    if out is not None:
        check_output_file(out, "--out")
    check_moment_options(n_windows, seed)
    moments = compute_moments(PreparedData.open(data_dir), size, seed, device=select_device(device),
                              n_windows=n_windows)
    if out is not None:
        moments.write(out)
    return moments
