"""Paired data with a known truth, for tests, examples, benchmarks and calibration.

Per-token paired differences y_si = δ + a_s + b_i + u_c(i) + e_si with a seed effect a_s, a document effect
b_i, an optional domain (cluster) effect u_c shared by the documents of domain c, and a seed × document
interaction e_si, all normal. With `length_scaled` the document and interaction SDs scale as
sqrt(mean n / n_i), as they do when a document's per-token loss is an average over its n_i tokens.

The module also draws whole loss sums with a population ΔP as the truth (`simulate`, for the two-level
bootstrap), loss runs of given perplexities (`synthetic_runs`, `example_study`: the API's examples), and 0/1 item
scores of two arms with a known difference of accuracies (`simulate_item_scores`), and calibrates the verdicts on
them (`item_calibration`, `cluster_calibration`).
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import special

from gatedv_stats.core.defaults import DEFAULTS
from gatedv_stats.io.lossfiles import write_loss_file
from gatedv_stats.io.runfiles import Run
from gatedv_stats.stats.cluster_diagnostic import group_effect_test
from gatedv_stats.stats.crossed import CrossedMoments, clustered_moments, crossed_moments
from gatedv_stats.stats.seed_document import seed_document_interval
from gatedv_stats.stats.verdict import verdict

_CHUNK_ELEMENTS = 1 << 21  # simulated values per chunk (16 MiB of float64)
TARGETS_PER_DOC = 256  # of every document of `simulate` and `synthetic_runs`


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
                   pooling_level: float = DEFAULTS.pooling_level) -> CrossedMoments:
    """`crossed_moments` of `n_studies` simulated studies (clustered when `clusters` is given), in chunks."""
    n = np.asarray(n_targets, dtype=np.float64)

    def fit(size: int) -> CrossedMoments:
        y = simulate_differences(model, n_seeds, n, rng, n_studies=size, clusters=clusters)
        return (crossed_moments(y, n / n.sum(), pooling_level) if clusters is None
                else clustered_moments(y, n, clusters, pooling_level))

    return _in_chunks(n_studies, max(1, _CHUNK_ELEMENTS // (n_seeds * n.size)), fit)


def _in_chunks(n_studies: int, chunk: int, fit: Callable[[int], CrossedMoments]) -> CrossedMoments:
    """One fit of `n_studies` studies: `fit(size)` of successive chunks of at most `chunk` studies, joined in order."""
    fits = [fit(min(chunk, n_studies - start)) for start in range(0, n_studies, chunk)]
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


def simulate(model: PopulationModel, n_seeds: int, n_docs: int, rng: np.random.Generator) -> SimulatedStudy:
    """Draw one paired study (S seed pairs × N documents of `TARGETS_PER_DOC` targets) from `model`."""
    n = np.full(n_docs, TARGETS_PER_DOC, dtype=np.int64)
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
                   seeds: list[int] | None = None, noise: float = 0.05) -> list[Run]:
    """One loss-file `Run` per arm and seed whose token-averaged PPL is exactly the given value (to float rounding).

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
            runs.append(Run(arm=arm, seed=int(run_seed), units=docs, meta={"arm": arm, "seed": int(run_seed)},
                                source=f"synthetic[arm={arm},seed={run_seed}]", sha256=digest))
    return runs


def example_study(directory: str | os.PathLike[str]) -> Path:
    """A small paired study written as loss files into `directory` (returned): a baseline and a GatedV arm, three
    paired seeds, 60 documents of the held-out set in 6 domains, GatedV about 2% better on every seed. The data of
    the Python API's examples."""
    directory = Path(directory)
    runs = synthetic_runs({"baseline": [30.0, 30.5, 29.8], "gatedv": [29.35, 29.8, 29.2]}, n_docs=60, rng_seed=7)
    for run in runs:
        docs = run.docs.assign(domain=[f"site{i % 6}.org" for i in range(len(run.docs))])
        write_loss_file(directory / f"{run.arm}-seed{run.seed}.parquet", docs, {**run.meta, "eval_set": "heldout"})
    return directory


def ppls_with_moments(mean: float, sd: float, n_seeds: int) -> list[float]:
    """n_seeds perplexities whose arithmetic mean and sample SD (ddof = 1) are exactly `mean` and `sd`."""
    if n_seeds == 1:
        return [float(mean)]
    spread = np.linspace(-1.0, 1.0, n_seeds)
    return (mean + sd * (spread / np.std(spread, ddof=1))).tolist()


# With 20 domains × 50 documents and 5 seeds: a domain effect the documents do not explain (the clustered SE of
# D is about 2.4× the unclustered one), under which the unclustered verdict names a winner in about 45% of
# studies with no true difference (docs/statistics.md, "Documents that should be clusters").
CLUSTERED_STUDY = CrossedModel(0.0, seed_sd=0.0005, doc_sd=0.05, interaction_sd=0.02, cluster_sd=0.02)


def equal_domains(n_domains: int, docs_per_domain: int) -> np.ndarray:
    """Integer domain labels: `n_domains` domains of `docs_per_domain` documents each."""
    return np.repeat(np.arange(n_domains), docs_per_domain)


def domain_lengths(labels: np.ndarray, rng: np.random.Generator, *, low: int = 32, high: int = 1024) -> np.ndarray:
    """Target counts whose typical size differs between domains (one domain of short documents, another of
    long ones), as in real corpora: each domain's lengths spread around a log-uniform centre of its own."""
    labels = np.asarray(labels)
    centres = np.exp(rng.uniform(np.log(low), np.log(high), int(labels.max()) + 1))
    lengths = centres[labels] * np.exp(rng.normal(0.0, 0.3, labels.size))
    return np.clip(np.rint(lengths), low, high - 1).astype(np.int64)


@dataclass(frozen=True)
class ClusterCalibration:
    """Rates over simulated studies of the group-effect note and of the verdict naming a winner."""

    n_studies: int
    note_rate: float  # the group-effect note fires (documents as the sampled units)
    significant_rate: float  # its F test alone is significant
    winner_rate: float  # the verdict says better or worse, documents as the sampled units
    clustered_winner_rate: float  # the same with the domains as clusters (--cluster domain)


def cluster_calibration(model: CrossedModel, n_seeds: int, n_targets: np.ndarray, labels: np.ndarray,
                        rng: np.random.Generator, *, n_studies: int) -> ClusterCalibration:
    """Simulate `n_studies` studies of `model` on documents with `n_targets` in domains `labels`; run the
    diagnostic and the verdict (from `seed_document_interval`, without and with the domains as clusters)."""
    n = np.asarray(n_targets, dtype=np.float64)
    labels = np.asarray(labels)
    counts = np.zeros(4)  # note fired, F test significant, winner named without and with the domains as clusters
    for _ in range(n_studies):
        y = simulate_differences(model, n_seeds, n, rng, clusters=labels)[0]
        baseline, variant = loss_sums(y, n, rng)
        test = group_effect_test((variant - baseline) / n, labels, n)
        counts += [test.flagged, test.p_value < test.level,
                   *(verdict(seed_document_interval(baseline, variant, n, clusters=clusters)).verdict
                     in ("better", "worse") for clusters in (None, labels))]
    return ClusterCalibration(n_studies, *map(float, counts / n_studies))


@dataclass(frozen=True)
class ItemScoreModel:
    """0/1 item outcomes on the logit scale: logit P(item i right | arm, seed s) = θ_i + u_c(i) + a_arm,s + e_arm,s,i,
    plus δ + h_i + v_c(i) for the variant.

    θ_i (item difficulty, SD `difficulty_sd`, mean 0) and u_c (a subtask's difficulty, `subtask_sd`) are shared by
    both arms; a_arm,s (a seed's effect, `seed_sd`) and e_arm,s,i (the seed × item interaction, `interaction_sd`)
    are drawn per arm; h_i and v_c (`item_effect_sd`, `subtask_effect_sd`) are how the variant's advantage varies
    over items and subtasks. With δ = 0 every term is symmetric about 0, so the arms' population accuracies are
    both exactly 1/2 and the true difference is 0.
    """

    delta: float = 0.0
    difficulty_sd: float = 1.5
    seed_sd: float = 0.04  # about one point of accuracy at 50%
    interaction_sd: float = 0.3
    item_effect_sd: float = 0.0
    subtask_sd: float = 0.0
    subtask_effect_sd: float = 0.0

    def true_difference(self, rng: np.random.Generator, n_draws: int = 1_000_000) -> float:
        """The population difference of accuracies, variant − baseline (exactly 0 when δ = 0; else by Monte Carlo)."""
        if self.delta == 0.0:
            return 0.0
        shared = rng.normal(0.0, math.hypot(self.difficulty_sd, self.subtask_sd), n_draws)
        arm_sd = math.hypot(self.seed_sd, self.interaction_sd)
        variant_sd = math.sqrt(arm_sd ** 2 + self.item_effect_sd ** 2 + self.subtask_effect_sd ** 2)
        baseline = special.expit(shared + rng.normal(0.0, arm_sd, n_draws))
        variant = special.expit(shared + self.delta + rng.normal(0.0, variant_sd, n_draws))
        return float(variant.mean() - baseline.mean())


def simulate_item_scores(model: ItemScoreModel, n_seeds: int, n_items: int, rng: np.random.Generator, *,
                         n_studies: int = 1, subtasks: np.ndarray | None = None,
                         seed_effects: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Baseline and variant 0/1 scores (n_studies, S, N) of studies drawn from `model`, new items and seeds each;
    `subtasks`: integer subtask per item; `seed_effects` (2, n_studies, S): the arms' a_arm,s, given when several
    tasks are scored by the same models (default: drawn with SD `seed_sd`)."""
    if seed_effects is None:
        seed_effects = rng.normal(0.0, model.seed_sd, (2, n_studies, n_seeds))
    shape = (n_studies, 1, n_items)
    shared = rng.normal(0.0, model.difficulty_sd, shape)
    effect = model.delta + rng.normal(0.0, model.item_effect_sd, shape)
    if subtasks is not None:
        labels = np.asarray(subtasks)
        n_subtasks = int(labels.max()) + 1
        shared += rng.normal(0.0, model.subtask_sd, (n_studies, 1, n_subtasks))[..., labels]
        effect += rng.normal(0.0, model.subtask_effect_sd, (n_studies, 1, n_subtasks))[..., labels]

    def scores(logit: np.ndarray, arm: int) -> np.ndarray:
        logit = logit + seed_effects[arm][..., None]
        logit = logit + rng.normal(0.0, model.interaction_sd, (n_studies, n_seeds, n_items))
        return (rng.random(logit.shape) < special.expit(logit)).astype(np.float64)

    return scores(shared, 0), scores(shared + effect, 1)


def simulated_item_fits(model: ItemScoreModel, n_seeds: int, n_items: int, rng: np.random.Generator, *,
                        n_studies: int, subtasks: np.ndarray | None = None) -> CrossedMoments:
    """The verdict's crossed fit (items weighted equally; clustered by subtask when given) of `n_studies` simulated
    studies, in chunks."""
    def fit(size: int) -> CrossedMoments:
        baseline, variant = simulate_item_scores(model, n_seeds, n_items, rng, n_studies=size, subtasks=subtasks)
        y = variant - baseline
        return (crossed_moments(y, np.full(n_items, 1.0 / n_items)) if subtasks is None
                else clustered_moments(y, np.ones(n_items), subtasks))

    return _in_chunks(n_studies, max(1, _CHUNK_ELEMENTS // (2 * n_seeds * n_items)), fit)


@dataclass(frozen=True)
class ItemCalibration:
    """How the item-score verdict's interval fares on studies with a known difference."""

    truth: float  # the population difference of accuracies
    coverage: float  # share of intervals holding the truth, over the studies with an interval
    better_rate: float  # share of studies whose verdict is "better" (the variant's accuracy higher)
    worse_rate: float
    mean_df: float
    no_interval_rate: float  # studies whose differences do not vary (Var̂(D) = 0): no interval, no verdict


def item_calibration(model: ItemScoreModel, n_seeds: int, n_items: int, rng: np.random.Generator, *,
                     n_studies: int, subtasks: np.ndarray | None = None,
                     confidence_level: float = DEFAULTS.confidence_level) -> ItemCalibration:
    """Coverage and verdict rates of the seeds × items interval on `n_studies` studies drawn from `model`."""
    truth = model.true_difference(rng)
    fit = simulated_item_fits(model, n_seeds, n_items, rng, n_studies=n_studies, subtasks=subtasks)
    valid = fit.var_d > 0.0
    d, var_d, df = fit.estimate[valid], fit.var_d[valid], fit.df[valid]
    half = special.stdtrit(df, 0.5 + confidence_level / 2) * np.sqrt(var_d)
    low, high = d - half, d + half
    return ItemCalibration(truth=truth, coverage=float(np.mean((low <= truth) & (truth <= high))),
                           better_rate=float(np.sum(low > 0.0) / n_studies),
                           worse_rate=float(np.sum(high < 0.0) / n_studies), mean_df=float(np.mean(df)),
                           no_interval_rate=float(1.0 - np.mean(valid)))
