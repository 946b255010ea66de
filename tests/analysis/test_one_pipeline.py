"""One pipeline for every metric: a loss-file study and an item-score study go through the same checks of pairing,
verdict, many-arms adjustment and plan, each checked against an independent computation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from gatedv_stats.analysis.arms import compare_arms
from gatedv_stats.analysis.compare import compare
from gatedv_stats.analysis.plan import plan
from gatedv_stats.core.errors import ParameterError
from gatedv_stats.pairing.pair import pair_runs, pair_with_reference
from gatedv_stats.stats.planning import Design
from gatedv_stats.stats.scale import MetricScale
from gatedv_stats.testing import synthetic_runs
from item_runs import item_run, pair_items, paired_runs

KINDS = ("losses", "items")


def loss_runs(shift: float, n_seeds: int = 4, arms: tuple[str, ...] = ("gatedv",), seeds: list[int] | None = None):
    """Baseline and variant arms whose per-seed perplexities differ by the relative `shift` (negative: better)."""
    base = [30.0, 30.6, 29.7, 30.3, 30.1][:n_seeds]
    ppls = {"baseline": base, **{arm: [p * (1 + shift) * (1 + 0.002 * k) for k, p in enumerate(base)] for arm in arms}}
    return synthetic_runs(ppls, n_docs=40, rng_seed=5, seeds=seeds)


def item_scores(shift: float, n_seeds: int = 4, arms: tuple[str, ...] = ("gatedv",), seeds: list[int] | None = None):
    """0/1 item scores of a baseline and variant arms whose accuracy is `shift` higher."""
    rng = np.random.default_rng(3)
    p = rng.uniform(0.3, 0.6, 300)
    seeds = list(range(n_seeds)) if seeds is None else seeds
    runs = [item_run("baseline", seed, (rng.random(p.size) < p).astype(float)) for seed in seeds]
    for arm in arms:
        runs += [item_run(arm, seed, (rng.random(p.size) < p + shift + 0.01 * (seed % 2)).astype(float))
                 for seed in seeds]
    return runs


def paired(kind: str, better: float, **kwargs):
    """One pair whose variant is better by `better` (a relative ΔP of −better, or `better` points of accuracy)."""
    if kind == "losses":
        runs = loss_runs(-better, **kwargs)
        return pair_runs([run for run in runs if run.arm == "baseline"], [run for run in runs if run.arm != "baseline"])
    return pair_items(item_scores(better, **kwargs), baseline_arm="baseline", variant_arm="gatedv", metric="acc")


@pytest.mark.parametrize("kind", KINDS)
def test_a_clearly_better_variant_is_better_and_the_swapped_arms_worse(kind):
    pair = paired(kind, 0.15)
    swapped = type(pair)(**{**pair.__dict__, "baseline_arm": pair.variant_arm, "variant_arm": pair.baseline_arm,
                            "baseline": pair.variant, "variant": pair.baseline})
    assert compare(pair).verdict.verdict == "better"
    assert compare(swapped).verdict.verdict == "worse"


@pytest.mark.parametrize("kind", KINDS)
def test_the_verdicts_p_value_is_the_crossed_fits_t_test(kind):
    pair = paired(kind, 0.02)
    fit = compare(pair).seed_document
    assert compare(pair).verdict.p_value == pytest.approx(2 * stats.t.sf(abs(fit.estimate) / fit.se, fit.df))
    weights = pair.n_units / pair.n_units.sum()
    per_seed = ((pair.variant - pair.baseline) / pair.n_units) @ weights  # D_s by brute force
    assert fit.estimate == pytest.approx(per_seed.mean())


@pytest.mark.parametrize("kind", KINDS)
def test_equivalence_within_a_wide_margin_and_the_margin_on_the_pairs_scale(kind):
    pair = paired(kind, 0.0, n_seeds=5)
    assert compare(pair, sesoi=0.5).verdict.verdict == "equivalent"
    bounds = compare(pair, sesoi=0.5).verdict.equivalence_bounds
    assert bounds == (pytest.approx(np.log(0.5)), pytest.approx(np.log(1.5))) if kind == "losses" else (-0.5, 0.5)


@pytest.mark.parametrize("kind", KINDS)
def test_many_arms_verdicts_come_from_holm_adjusted_p_values(kind):
    arms = ("a1", "a2", "a3")
    if kind == "losses":
        pairs = pair_with_reference(loss_runs(-0.01, arms=arms), "baseline")
    else:
        pairs = pair_with_reference(item_scores(0.25, arms=arms), "baseline", MetricScale(metric="acc"))
    result = compare_arms(pairs, n_permutations=100)
    raw = [compare(pair).verdict.p_value for pair in pairs]
    holm = multipletests(raw, method="holm")[1]
    verdicts = result.to_frame()["verdict"].tolist()
    for verdict, p, pair in zip(verdicts, holm, pairs):
        difference = float(np.sum(pair.variant - pair.baseline))  # the sign of D, by brute force
        assert verdict == ("no detectable difference" if p > 0.05 else pair.scale.direction(difference))
    assert {"better"} <= set(verdicts)  # the check above met a decided verdict, not only undecided ones


@pytest.mark.parametrize("kind", KINDS)
def test_a_plan_needs_the_seeds_whose_design_reaches_the_power(kind):
    pair = paired(kind, 0.01, n_seeds=4)
    effect = 0.05
    result = plan(pair, effect)
    fit = compare(pair).seed_document
    weights = pair.n_units / pair.n_units.sum()
    design = Design(fit.seed_var, fit.doc_var or 0.0, fit.interaction_var or 0.0, float(np.sum(weights ** 2)),
                    pair.n_docs)
    size = np.log1p(effect) if kind == "losses" else effect
    needed = result.seed_document.seeds_required if kind == "losses" else result.seeds_required
    assert needed is not None
    assert design.power(size, needed, 0.05) >= 0.8
    assert needed == 2 or design.power(size, needed - 1, 0.05) < 0.8


@pytest.mark.parametrize("kind", KINDS)
def test_seeds_of_one_arm_only_are_refused_naming_the_parameter_and_dropped_when_allowed(kind):
    runs = loss_runs(-0.01, n_seeds=3) if kind == "losses" else item_scores(0.02, n_seeds=3)
    runs = [run for run in runs if not (run.arm == "gatedv" and run.seed == 2)]
    baseline = [run for run in runs if run.arm == "baseline"]
    variant = [run for run in runs if run.arm == "gatedv"]

    def pair(**kwargs):
        if kind == "losses":
            return pair_runs(baseline, variant, **kwargs)
        return pair_items(runs, baseline_arm="baseline", variant_arm="gatedv", metric="acc", **kwargs)

    with pytest.raises(ParameterError, match="seeds present in one arm only: baseline 2 .allow_unpaired drops them"):
        pair()
    dropped = pair(allow_unpaired=True)
    assert dropped.n_pairs == 2 and any("dropped unpaired seeds 2" in note for note in dropped.notes)


def test_item_pairs_share_the_paired_type_of_loss_files():
    losses, items = paired("losses", 0.01), paired("items", 0.01)
    assert type(losses) is type(items)
    assert losses.scale.log_ratio and not items.scale.log_ratio and items.scale.higher_is_better
    assert items.unit == "item" and np.all(items.n_units == 1) and losses.unit == "token"


def test_the_item_pairing_keeps_runs_of_the_task_configuration_apart():
    runs = paired_runs(np.zeros((2, 5)), np.ones((2, 5)))
    runs[3] = item_run("gatedv", 1, np.ones(5), n_shot=5)
    with pytest.raises(ParameterError, match="n_shot differs: .*allow_mismatch n_shot compares them anyway"):
        pair_items(runs, baseline_arm="baseline", variant_arm="gatedv", metric="acc")
