"""Planning: the components vs statsmodels' two-way anova_lm, sample sizes vs the noncentral t power, the simulator."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf
from scipy import stats
from statsmodels.stats.anova import anova_lm

from gatedv_stats.analysis.plan import plan
from gatedv_stats.core.errors import InputError
from gatedv_stats.pairing.pair import pilot_pair
from gatedv_stats.stats import metrics
from gatedv_stats.stats import planning as pl
from gatedv_stats.testing import PopulationModel, simulate, synthetic_runs


def noncentral_t_power(effect_size: float, n: int, alpha: float = 0.05) -> float:
    """Two-sided one-sample t test power, straight from the noncentral t distribution."""
    df = n - 1
    critical = stats.t.ppf(1 - alpha / 2, df)
    shift = effect_size * math.sqrt(n)
    return float(stats.nct.sf(critical, df, shift) + stats.nct.cdf(-critical, df, shift))


def test_components_match_a_two_way_anova_from_statsmodels():
    rng = np.random.default_rng(0)
    model = PopulationModel(log_ratio=-0.02, seed_sd=0.01, doc_sd=0.03, residual_sd=0.02)
    study = simulate(model, n_seeds=4, n_docs=15, rng=rng)
    result = pl.variance_components(study.baseline, study.variant, study.n_targets)
    x = (study.variant - study.baseline) / study.n_targets
    frame = pd.DataFrame({"x": x.ravel(), "seed": np.repeat(np.arange(4), 15), "doc": np.tile(np.arange(15), 4)})
    table = anova_lm(smf.ols("x ~ C(seed) + C(doc)", data=frame).fit())
    ms_seed, ms_doc, ms_resid = (table.loc[term, "mean_sq"] for term in ("C(seed)", "C(doc)", "Residual"))
    assert result.residual_var == pytest.approx(ms_resid, rel=1e-9)
    assert result.seed_var == pytest.approx(max(0.0, (ms_seed - ms_resid) / 15), rel=1e-9, abs=1e-15)
    assert result.doc_var == pytest.approx(max(0.0, (ms_doc - ms_resid) / 4), rel=1e-9, abs=1e-15)
    log_ratios = (metrics.token_nll(study.variant, study.n_targets)
                  - metrics.token_nll(study.baseline, study.n_targets))
    assert result.seed_ratio_var == pytest.approx(np.var(log_ratios, ddof=1), rel=1e-12)
    assert result.doc_diff_var == pytest.approx(np.var(x.mean(axis=0), ddof=1), rel=1e-9)
    assert result.nll_diff_mean == pytest.approx(log_ratios.mean(), rel=1e-12)
    assert result.equal_units


def test_components_are_unbiased_over_simulated_pilots():
    model = PopulationModel(log_ratio=-0.02, seed_sd=0.01, doc_sd=0.02, residual_sd=0.03)
    rng = np.random.default_rng(1)
    draws = [pl.variance_components(*_arrays(simulate(model, 6, 40, rng))) for _ in range(150)]
    for name, truth in (("seed_var", 0.01 ** 2), ("doc_var", 0.02 ** 2), ("residual_var", 0.03 ** 2)):
        values = np.array([getattr(draw, name) for draw in draws])
        # clipping at zero adds a small upward bias; four standard errors still have to hold the truth
        assert abs(values.mean() - truth) < 4 * values.std(ddof=1) / math.sqrt(values.size), name


def _arrays(study):
    return study.baseline, study.variant, study.n_targets


@pytest.mark.parametrize("effect_size", [0.3, 0.9, 2.5, 10.0])
def test_required_pairs_is_the_smallest_n_reaching_the_power(effect_size):
    n = pl.required_pairs(effect_size, alpha=0.05, power=0.8)
    assert n >= 2
    assert noncentral_t_power(effect_size, n) >= 0.8
    if n > 2:
        assert noncentral_t_power(effect_size, n - 1) < 0.8


def test_plan_matches_power_arithmetic_on_its_own_variances():
    components = pl.VarianceComponents(n_seeds=3, n_docs=500, nll_diff_mean=-0.02, seed_ratio_var=0.01 ** 2,
                                       doc_diff_var=0.15 ** 2, seed_var=0.009 ** 2, doc_var=0.14 ** 2,
                                       residual_var=0.1 ** 2, equal_units=True)
    plan = pl.plan_study(components, -0.02)
    delta = abs(math.log(0.98))
    assert plan.log_effect == pytest.approx(delta)
    assert plan.seeds_required == pl.required_pairs(delta / 0.01)
    assert plan.seeds_required_many_docs == pl.required_pairs(delta / 0.009)
    assert plan.docs_required == pl.required_pairs(delta / 0.15)
    assert plan.seeds_required_many_docs <= plan.seeds_required
    # at the minimum detectable effect the design has exactly the asked power
    assert noncentral_t_power(math.log1p(plan.seed_level_mde) / 0.01, 3) == pytest.approx(0.8, abs=1e-6)
    assert noncentral_t_power(math.log1p(plan.doc_level_mde) / 0.15, 500) == pytest.approx(0.8, abs=1e-6)
    assert plan.to_dict()["components"]["seed_var"] == pytest.approx(0.009 ** 2)
    text = plan.summary()
    assert f"paired seeds needed on 500 documents: {plan.seeds_required}" in text
    assert "−2.00%" in text


def test_plan_without_seed_variation_says_so():
    components = pl.VarianceComponents(n_seeds=2, n_docs=50, nll_diff_mean=-0.02, seed_ratio_var=1e-6,
                                       doc_diff_var=1e-2, seed_var=0.0, doc_var=1e-2, residual_var=5e-5,
                                       equal_units=False)
    plan = pl.plan_study(components, 0.02)
    assert plan.seeds_required_many_docs is None
    assert "not estimable" in plan.summary() and "weight documents equally" in plan.summary()


@pytest.mark.parametrize("effect", [0.0, -1.0, -2.0, math.nan])
def test_plan_rejects_an_effect_that_is_not_a_relative_change(effect):
    components = pl.VarianceComponents(2, 50, 0.0, 1e-4, 1e-2, 1e-4, 1e-2, 1e-4, True)
    with pytest.raises(InputError, match="^effect: "):
        pl.plan_study(components, effect)


def test_plan_refuses_an_effect_no_feasible_study_detects():
    components = pl.VarianceComponents(2, 50, 0.0, 1e-4, 1e-2, 1e-4, 1e-2, 1e-4, True)
    with pytest.raises(InputError, match="^effect: too small to detect: .* more than 1e\\+12 pairs"):
        pl.plan_study(components, 1e-12)
    with pytest.raises(InputError, match="^power: 0.01 must exceed alpha 0.05"):
        pl.plan_study(components, 0.02, power=0.01)


def test_pilot_pair_picks_the_arms_and_complains_when_it_cannot():
    runs = synthetic_runs({"baseline": [30.0, 30.2], "gatedv": [29.5, 29.9]}, n_docs=10, rng_seed=0)
    paired = pilot_pair(runs)
    assert (paired.baseline_arm, paired.variant_arm, paired.n_pairs) == ("baseline", "gatedv", 2)
    three = runs + synthetic_runs({"q-silu": [30.1, 30.3]}, n_docs=10, rng_seed=0)
    with pytest.raises(InputError, match="variant_arm"):
        pilot_pair(three)
    assert pilot_pair(three, variant_arm="q-silu").variant_arm == "q-silu"
    other = synthetic_runs({"a": [30.0, 30.2], "b": [29.5, 29.9]}, n_docs=10, rng_seed=0)
    with pytest.raises(InputError, match="baseline_arm"):
        pilot_pair(other)
    with pytest.raises(InputError, match=r"^baseline_arm: no pilot runs of arm 'nosuch' \(arms found: baseline, "):
        pilot_pair(three, baseline_arm="nosuch")
    with pytest.raises(InputError, match="^baseline_arm and variant_arm both name 'gatedv'"):
        pilot_pair(runs, baseline_arm="gatedv", variant_arm="gatedv")


def test_simulator_draws_the_stated_model():
    model = PopulationModel(log_ratio=-0.03, seed_sd=0.0, doc_sd=0.0, residual_sd=0.0, shared_seed_sd=0.0)
    study = simulate(model, 3, 20, np.random.default_rng(0))
    per_token = (study.variant - study.baseline) / study.n_targets
    assert np.allclose(per_token, -0.03)
    assert study.eval_set_log_ratio == pytest.approx(-0.03)
    assert model.delta_p == pytest.approx(math.expm1(-0.03))
    assert PopulationModel(0.0, 0.1, 0.0, 0.0).delta_p == pytest.approx(math.expm1(0.005))


def test_plan_across_tokenizers_says_it_is_per_byte(tmp_path):
    """Pilot arms scored with different tokenizers are compared per byte: the plan says so and warns why."""
    from typer.testing import CliRunner

    import cli
    from gatedv_stats.io.lossfiles import write_loss_file

    for run in synthetic_runs({"baseline": [30.0, 30.2, 30.1], "gatedv": [29.5, 29.9, 29.6]}, n_docs=12, rng_seed=3):
        write_loss_file(tmp_path / run.arm / f"{run.seed}.parquet", run.docs,
                        {**run.meta, "tokenizer_sha256": run.arm * 8})
    result = CliRunner().invoke(cli.app, ["plan", str(tmp_path), "--effect", "0.02"])
    assert result.exit_code == 0, result.output
    assert result.stderr == "warning: the arms' tokenizers differ: compared per byte of the same text (bits per byte)\n"
    assert "per byte" in result.stdout and "per-byte log loss" in result.stdout and "token" not in result.stdout


def test_a_pilot_without_seed_variation_or_without_a_variant_says_which():
    from dataclasses import replace

    runs = synthetic_runs({"baseline": [30.0, 30.0], "gatedv": [29.5, 29.5]}, n_docs=10, rng_seed=0)
    first_seed = {run.arm: run.docs for run in runs if run.seed == 0}
    same = [replace(run, units=first_seed[run.arm]) for run in runs]  # both seed pairs give the same losses
    with pytest.raises(InputError, match=r"no variation in the loss difference across seeds \(every seed pair gives "
                                         r"the same difference\)"):
        plan(pilot_pair(same), 0.02)
    with pytest.raises(InputError, match=r"^the pilot holds runs of arm 'baseline' only; give the variant's loss "
                                         r"files too$"):
        pilot_pair([run for run in runs if run.arm == "baseline"])
