"""Training-curve comparisons (paper Figures 2 and 3) over a validated curve table (see `curvefiles`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from gatedv_stats.core.errors import InputError
from gatedv_stats.stats.metrics import sample_sd

FINAL_FRACTION = 0.25


@dataclass(frozen=True)
class CurveComparison:
    """ΔP(t) = mean_s exp(NLL_var,s(t)) / mean_s exp(NLL_base,s(t)) − 1 at each step recorded by every paired run."""

    baseline_arm: str
    variant_arm: str
    baseline_lr: float
    variant_lr: float
    seeds: np.ndarray  # (S,) paired seeds
    steps: np.ndarray  # (T,)
    baseline_ppl_mean: np.ndarray  # (T,)
    variant_ppl_mean: np.ndarray  # (T,)
    delta_p: np.ndarray  # (T,) fractions
    per_pair: pd.DataFrame  # seed, step, baseline_ppl, variant_ppl, delta_p (exp(NLL_var,s) / exp(NLL_base,s) − 1)

    def frame(self) -> pd.DataFrame:
        """One row per step: step, baseline_ppl_mean, variant_ppl_mean, delta_p."""
        return pd.DataFrame({"step": self.steps, "baseline_ppl_mean": self.baseline_ppl_mean,
                             "variant_ppl_mean": self.variant_ppl_mean, "delta_p": self.delta_p})

    def to_dict(self) -> dict:
        return {"baseline_arm": self.baseline_arm, "variant_arm": self.variant_arm, "baseline_lr": self.baseline_lr,
                "variant_lr": self.variant_lr, "seeds": self.seeds.tolist(), "steps": self.steps.tolist(),
                "delta_p": self.delta_p.tolist(), "per_pair": self.per_pair.to_dict(orient="records")}


def curve_delta_p(curves: pd.DataFrame, baseline_arm: str, variant_arm: str, *, baseline_lr: float | None = None,
                  variant_lr: float | None = None, allow_unpaired: bool = False) -> CurveComparison:
    """Paired ΔP(t) of two arms; an arm trained at several rates needs its `*_lr` given."""
    baseline_nll, baseline_lr = _arm_matrix(curves, baseline_arm, baseline_lr)
    variant_nll, variant_lr = _arm_matrix(curves, variant_arm, variant_lr)
    unpaired = sorted(set(baseline_nll.index) ^ set(variant_nll.index))
    if unpaired and not allow_unpaired:
        raise InputError(f"curves: seeds present in one arm only: {', '.join(map(str, unpaired))}")
    seeds = sorted(set(baseline_nll.index) & set(variant_nll.index))
    both = pd.concat([baseline_nll.loc[seeds], variant_nll.loc[seeds]])
    steps = both.columns[both.notna().all(axis=0).to_numpy()]
    if len(seeds) == 0 or len(steps) == 0:
        raise InputError(f"curves: no step recorded by every paired run of {baseline_arm} and {variant_arm}")
    baseline_ppl = np.exp(baseline_nll.loc[seeds, steps].to_numpy(dtype=np.float64))  # (S, T)
    variant_ppl = np.exp(variant_nll.loc[seeds, steps].to_numpy(dtype=np.float64))
    per_pair = pd.DataFrame({
        "seed": np.repeat(seeds, len(steps)),
        "step": np.tile(np.asarray(steps, dtype=np.int64), len(seeds)),
        "baseline_ppl": baseline_ppl.ravel(),
        "variant_ppl": variant_ppl.ravel(),
        "delta_p": (variant_ppl / baseline_ppl - 1.0).ravel(),
    })
    return CurveComparison(
        baseline_arm=baseline_arm, variant_arm=variant_arm, baseline_lr=baseline_lr, variant_lr=variant_lr,
        seeds=np.asarray(seeds, dtype=np.int64), steps=np.asarray(steps, dtype=np.int64),
        baseline_ppl_mean=baseline_ppl.mean(axis=0), variant_ppl_mean=variant_ppl.mean(axis=0),
        delta_p=variant_ppl.mean(axis=0) / baseline_ppl.mean(axis=0) - 1.0, per_pair=per_pair,
    )


def final_quarter_ppl(curves: pd.DataFrame, arms: list[str] | None = None) -> pd.DataFrame:
    """Absolute PPL over the final quarter of training (Figure 3): arm, lr, step, ppl_mean, ppl_sd, n_seeds.

    The final quarter is every step ≥ 0.75 × the last recorded step of the selected arms.
    """
    selected = curves if arms is None else curves[curves["arm"].isin(arms)]
    if selected.empty:
        raise InputError(f"curves: no rows for arms {', '.join(arms or [])}")
    start = (1.0 - FINAL_FRACTION) * selected["step"].max()
    late = selected[selected["step"] >= start].assign(ppl=lambda frame: np.exp(frame["dev_nll"]))
    rows = [{"arm": arm, "lr": lr, "step": step, "ppl_mean": float(group["ppl"].mean()),
             "ppl_sd": sample_sd(group["ppl"].to_numpy()), "n_seeds": int(group["seed"].nunique())}
            for (arm, lr, step), group in late.groupby(["arm", "lr", "step"], sort=True)]
    return pd.DataFrame(rows, columns=["arm", "lr", "step", "ppl_mean", "ppl_sd", "n_seeds"])


def _arm_matrix(curves: pd.DataFrame, arm: str, lr: float | None) -> tuple[pd.DataFrame, float]:
    """Dev NLL of one arm at one rate as a seeds × steps table."""
    rows = curves[curves["arm"] == arm]
    if rows.empty:
        raise InputError(f"curves: no runs of arm {arm!r} (arms: {', '.join(sorted(curves['arm'].unique()))})")
    rates = sorted(rows["lr"].unique())
    if lr is None:
        if len(rates) > 1:
            raise InputError(f"curves: arm {arm} was trained at several learning rates ({', '.join(map(str, rates))}); "
                             "choose one")
        lr = rates[0]
    rows = rows[np.isclose(rows["lr"], lr, rtol=1e-9, atol=0.0)]
    if rows.empty:
        raise InputError(f"curves: arm {arm} has no runs at lr {lr} (rates: {', '.join(map(str, rates))})")
    return rows.pivot(index="seed", columns="step", values="dev_nll"), float(lr)
