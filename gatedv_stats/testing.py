"""Paired data with a known truth, for tests, examples, benchmarks and calibration.

Per-token paired differences y_si = δ + a_s + b_i + u_c(i) + e_si with a seed effect a_s, a document effect
b_i, an optional domain (cluster) effect u_c shared by the documents of domain c, and a seed × document
interaction e_si, all normal. With `length_scaled` the document and interaction SDs scale as
sqrt(mean n / n_i), as they do when a document's per-token loss is an average over its n_i tokens.

`PopulationModel` and `simulate` draw whole loss sums with a population ΔP as the truth (for the two-level
bootstrap, whose target is ΔP) from the same model, with the planning module's names for its components.
`synthetic_runs` builds loss runs (`LossRun`) whose per-seed perplexities are exactly the ones asked for.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gatedv_stats.io.lossfiles import LossRun
from gatedv_stats.stats.crossed import POOLING_LEVEL, CrossedMoments, clustered_moments, crossed_moments

_CHUNK_ELEMENTS = 1 << 21  # simulated values per chunk (16 MiB of float64)
TARGETS_PER_DOC = 256  # of every document of `synthetic_runs`


@dataclass(frozen=True)
class CrossedModel:
    """The SDs (per-token nats) of the crossed model; `delta` is the true D."""

    delta: float
    seed_sd: float
    doc_sd: float
    interaction_sd: float
    cluster_sd: float = 0.0
    length_scaled: bool = False


def simulate_differences(model: CrossedModel, n_seeds: int, n_targets: np.ndarray, rng: np.random.Generator, *,
                         n_studies: int = 1, clusters: np.ndarray | None = None) -> np.ndarray:
    """(n_studies, S, N) per-token differences y drawn from `model`; `clusters`: integer domain per document."""
    n = np.asarray(n_targets, dtype=np.float64)
    scale = np.sqrt(n.mean() / n) if model.length_scaled else np.ones_like(n)
    y = rng.standard_normal((n_studies, n_seeds, n.size))
    y *= model.interaction_sd * scale
    y += rng.normal(model.delta, model.seed_sd, (n_studies, n_seeds, 1))
    y += rng.standard_normal((n_studies, 1, n.size)) * (model.doc_sd * scale)
    if clusters is not None and model.cluster_sd > 0.0:
        labels = np.asarray(clusters)
        y += rng.normal(0.0, model.cluster_sd, (n_studies, 1, int(labels.max()) + 1))[..., labels]
    return y


def domain_labels(n_docs: int, rng: np.random.Generator, mean_size: float = 5.0) -> np.ndarray:
    """Integer domain labels 0..C−1 for `n_docs` documents, domain sizes geometric with mean `mean_size`."""
    sizes = rng.geometric(1.0 / mean_size, n_docs)
    return np.repeat(np.arange(n_docs), sizes)[:n_docs]


def loss_sums(differences: np.ndarray, n_targets: np.ndarray, rng: np.random.Generator, *, base_nll: float = 3.0,
              difficulty_sd: float = 0.3, shared_seed_sd: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """Baseline and variant loss sums (…, S, N) whose per-token difference is `differences`.

    The baseline's per-token loss is base_nll + a document difficulty + a seed offset shared by both arms of
    a pair; both cancel in the paired difference.
    """
    n = np.asarray(n_targets, dtype=np.float64)
    shape = differences.shape
    difficulty = rng.normal(0.0, difficulty_sd, shape[:-2] + (1, shape[-1]))
    shared = rng.normal(0.0, shared_seed_sd, shape[:-1] + (1,))
    baseline = (base_nll + difficulty + shared) * n
    return baseline, baseline + differences * n


def simulated_fits(model: CrossedModel, n_seeds: int, n_targets: np.ndarray, rng: np.random.Generator, *,
                   n_studies: int, clusters: np.ndarray | None = None,
                   pooling_level: float = POOLING_LEVEL) -> CrossedMoments:
    """`crossed_moments` of `n_studies` simulated studies (clustered when `clusters` is given), in chunks."""
    n = np.asarray(n_targets, dtype=np.float64)
    chunk = max(1, _CHUNK_ELEMENTS // (n_seeds * n.size))
    fits = []
    for start in range(0, n_studies, chunk):
        y = simulate_differences(model, n_seeds, n, rng, n_studies=min(chunk, n_studies - start), clusters=clusters)
        if clusters is None:
            fits.append(crossed_moments(y, n / n.sum(), pooling_level))
        else:
            fits.append(clustered_moments(y, n, clusters, pooling_level))
    return CrossedMoments(**{name: np.concatenate([getattr(fit, name) for fit in fits])
                             for name in CrossedMoments.__dataclass_fields__})


@dataclass(frozen=True)
class PopulationModel:
    """Per-token losses with a known effect: x_b = μ + b_i + g_s, x_v = x_b + δ + e_s + h_i + ε_si.

    b_i (document difficulty, SD `difficulty_sd`) and g_s (a seed offset shared by both arms of a pair, SD
    `shared_seed_sd`) cancel in the paired difference; e_s, h_i, ε_si are the components above. All normal.
    """

    log_ratio: float  # δ
    seed_sd: float
    doc_sd: float
    residual_sd: float
    base_nll: float = 3.0  # μ
    difficulty_sd: float = 0.3
    shared_seed_sd: float = 0.01

    @property
    def delta_p(self) -> float:
        """Population ΔP over seeds and documents: E exp(g + δ + e) / E exp(g) − 1 = exp(δ + σ_seed²/2) − 1."""
        return math.expm1(self.log_ratio + self.seed_sd ** 2 / 2)


@dataclass(frozen=True)
class SimulatedStudy:
    baseline: np.ndarray  # (S, N) loss sums
    variant: np.ndarray
    n_targets: np.ndarray  # (N,)
    eval_set_log_ratio: float  # δ + token-weighted mean of h_i: the mean r_s over new seeds on these documents


def simulate(model: PopulationModel, n_seeds: int, n_docs: int, rng: np.random.Generator, *,
             targets_per_doc: int = 256) -> SimulatedStudy:
    """Draw one paired study (S seed pairs × N documents) from `model`."""
    n = np.full(n_docs, targets_per_doc, dtype=np.int64)
    difficulty = rng.normal(0.0, model.difficulty_sd, n_docs)
    doc_effect = rng.normal(0.0, model.doc_sd, n_docs)
    shared = rng.normal(0.0, model.shared_seed_sd, (n_seeds, 1))
    seed_effect = rng.normal(0.0, model.seed_sd, (n_seeds, 1))
    residual = rng.normal(0.0, model.residual_sd, (n_seeds, n_docs))
    per_token_baseline = model.base_nll + difficulty[None, :] + shared
    per_token_variant = per_token_baseline + model.log_ratio + seed_effect + doc_effect[None, :] + residual
    return SimulatedStudy(
        baseline=per_token_baseline * n, variant=per_token_variant * n, n_targets=n,
        eval_set_log_ratio=float(model.log_ratio + np.sum(doc_effect * n) / n.sum()),
    )


def synthetic_runs(ppl_by_seed: dict[str, list[float]], n_docs: int, rng_seed: int = 0, *,
                   seeds: list[int] | None = None, noise: float = 0.05) -> list[LossRun]:
    """One `LossRun` per arm and seed whose token-averaged PPL is exactly the given value (to float rounding).

    Documents share a difficulty across arms and seeds (as real evaluation sets do), with per-run
    multiplicative noise of relative size `noise`; each run is then rescaled so Σℓ / Σn = ln(PPL).
    Seeds are numbered `seeds` (default 0, 1, ...) in the order given; `rng_seed` seeds the draws.
    """
    rng = np.random.default_rng(rng_seed)
    doc_ids = np.array([f"doc{i:06d}" for i in range(n_docs)], dtype=object)
    n_targets = np.full(n_docs, TARGETS_PER_DOC, dtype=np.int64)
    n_bytes = rng.integers(700, 1300, size=n_docs)
    difficulty = rng.lognormal(mean=0.0, sigma=0.3, size=n_docs)
    runs = []
    for arm, ppls in ppl_by_seed.items():
        run_seeds = list(seeds) if seeds is not None else list(range(len(ppls)))
        if len(run_seeds) != len(ppls):
            raise ValueError(f"arm {arm}: {len(ppls)} perplexities for {len(run_seeds)} seeds")
        for run_seed, ppl in zip(run_seeds, ppls):
            shape = difficulty * rng.lognormal(mean=0.0, sigma=noise, size=n_docs) * n_targets
            loss_sum = shape * (np.log(ppl) * n_targets.sum() / shape.sum())
            docs = pd.DataFrame({"doc_id": doc_ids, "n_targets": n_targets, "loss_sum": loss_sum, "n_bytes": n_bytes})
            digest = hashlib.sha256(loss_sum.tobytes()).hexdigest()
            runs.append(LossRun(arm=arm, seed=int(run_seed), docs=docs, meta={"arm": arm, "seed": int(run_seed)},
                                source=f"synthetic[arm={arm},seed={run_seed}]", sha256=digest))
    return runs


def ppls_with_moments(mean: float, sd: float, n_seeds: int) -> list[float]:
    """n_seeds perplexities whose arithmetic mean and sample SD (ddof = 1) are exactly `mean` and `sd`."""
    if n_seeds == 1:
        return [float(mean)]
    spread = np.linspace(-1.0, 1.0, n_seeds)
    spread = spread / np.std(spread, ddof=1)
    return [float(value) for value in mean + sd * spread]
