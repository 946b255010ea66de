"""Many arms against one reference: per-arm tests with Holm and Benjamini–Hochberg adjusted p-values.

Two families are adjusted separately: the seed-level paired t test on the per-seed log PPL ratios (does the
difference carry over to new seeds?) and the document-level sign-flip test on d_i (models held fixed).
Holm controls the family-wise error rate, Benjamini–Hochberg the false discovery rate
(`statsmodels.stats.multitest.multipletests`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from statsmodels.stats.multitest import multipletests

from gatedv_stats import formatting as fmt
from gatedv_stats.stats import metrics
from gatedv_stats.errors import InputError
from gatedv_stats.pairing import PairedLosses
from gatedv_stats.stats.permutation import sign_flip_test
from gatedv_stats.stats.seed_uncertainty import paired_t_interval
from gatedv_stats.stats.validation import check_open_unit

ADJUSTMENTS = {"holm": "holm", "bh": "fdr_bh"}  # our key → multipletests method


@dataclass(frozen=True)
class ArmTest:
    """One arm against the reference, with raw and adjusted p-values (None where a test is undefined)."""

    arm: str
    n_pairs: int
    n_docs: int
    ppl_mean: float
    reference_ppl_mean: float
    delta_p: float
    improved_pairs: int
    nll_diff_mean: float  # D
    t_p_value: float | None  # paired t on r_s, two-sided; None with fewer than 2 seed pairs
    t_p_holm: float | None
    t_p_bh: float | None
    permutation_p_value: float  # sign-flip on d_i, two-sided
    permutation_p_holm: float
    permutation_p_bh: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ArmsComparison:
    reference: str
    arms: tuple[ArmTest, ...]
    alpha: float
    n_resamples: int  # sign vectors per permutation test
    permutation_seed: int
    notes: tuple[str, ...]

    def to_dict(self) -> dict:
        return {"reference": self.reference, "alpha": self.alpha, "permutation_resamples": self.n_resamples,
                "permutation_seed": self.permutation_seed, "arms": [arm.to_dict() for arm in self.arms],
                "notes": list(self.notes)}

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([arm.to_dict() for arm in self.arms])

    def summary(self) -> str:
        lines = [f"every arm against {self.reference} ({len(self.arms)} comparisons; p-values two-sided, "
                 f"adjusted with Holm (FWER) and Benjamini–Hochberg (FDR); * marks adjusted p ≤ {self.alpha:g})",
                 f"{'arm':<16}{'pairs':>6}{'PPL':>10}{'ΔP':>9}{'improved':>10}{'D':>11}"
                 f"{'t p':>9}{'Holm':>9}{'BH':>9}{'perm p':>9}{'Holm':>9}{'BH':>9}"]
        for arm in self.arms:
            lines.append(
                f"{arm.arm:<16}{arm.n_pairs:>6}{fmt.format_ppl(arm.ppl_mean):>10}{fmt.format_delta_p(arm.delta_p):>9}"
                f"{fmt.format_pairs(arm.improved_pairs, arm.n_pairs):>10}{fmt.format_nll_diff(arm.nll_diff_mean):>11}"
                f"{self._p(arm.t_p_value)}{self._p(arm.t_p_holm, True)}{self._p(arm.t_p_bh, True)}"
                f"{self._p(arm.permutation_p_value)}{self._p(arm.permutation_p_holm, True)}"
                f"{self._p(arm.permutation_p_bh, True)}")
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)

    def _p(self, value: float | None, mark: bool = False) -> str:
        if value is None:
            return f"{'n/a':>9}"
        star = "*" if mark and value <= self.alpha else " "
        return f"{value:>8.3g}{star}"


def compare_arms(pairs: Sequence[PairedLosses], *, alpha: float = 0.05, n_resamples: int = 10_000,
                 seed: int = 0) -> ArmsComparison:
    """Each pair's variant against its baseline (the shared reference), p-values adjusted over the arms."""
    check_open_unit("alpha", alpha)
    if not pairs:
        raise InputError("no arms to compare")
    references = {pair.baseline_arm for pair in pairs}
    if len(references) != 1:
        raise InputError(f"the pairs must share one reference arm, got {', '.join(sorted(references))}")
    rows = [_raw_test(pair, n_resamples=n_resamples, seed=seed) for pair in pairs]
    notes = []
    t_values = [row["t_p_value"] for row in rows]
    if any(value is None for value in t_values):
        few = [row["arm"] for row in rows if row["t_p_value"] is None]
        notes.append(f"no seed-level t test for {', '.join(few)} (fewer than 2 seed pairs, or no spread); "
                     "its family is not adjusted")
        t_adjusted = {key: [None] * len(rows) for key in ADJUSTMENTS}
    else:
        t_adjusted = adjust_p_values(t_values)
    permutation_adjusted = adjust_p_values([row["permutation_p_value"] for row in rows])
    arms = tuple(
        ArmTest(**row, t_p_holm=t_adjusted["holm"][k], t_p_bh=t_adjusted["bh"][k],
                permutation_p_holm=permutation_adjusted["holm"][k], permutation_p_bh=permutation_adjusted["bh"][k])
        for k, row in enumerate(rows))
    for pair in pairs:
        notes += [f"{pair.variant_arm}: {note}" for note in pair.notes]
    return ArmsComparison(reference=pairs[0].baseline_arm, arms=arms, alpha=alpha, n_resamples=n_resamples,
                          permutation_seed=seed, notes=tuple(notes))


def adjust_p_values(p_values: Sequence[float]) -> dict[str, list[float]]:
    """Holm and Benjamini–Hochberg adjusted p-values, in the order given."""
    return {key: [float(value) for value in multipletests(np.asarray(p_values, dtype=np.float64), method=method)[1]]
            for key, method in ADJUSTMENTS.items()}


def _raw_test(pair: PairedLosses, *, n_resamples: int, seed: int) -> dict:
    nll_baseline = metrics.token_nll(pair.baseline, pair.n_targets)
    nll_variant = metrics.token_nll(pair.variant, pair.n_targets)
    ppl_baseline, ppl_variant = metrics.perplexity(nll_baseline), metrics.perplexity(nll_variant)
    log_ratios = nll_variant - nll_baseline
    t_p_value = (paired_t_interval(log_ratios).p_value
                 if log_ratios.size >= 2 and np.ptp(log_ratios) > 0 else None)
    permutation = sign_flip_test(metrics.document_differences(pair.baseline, pair.variant), pair.n_targets,
                                 n_resamples=n_resamples, seed=seed)
    return {
        "arm": pair.variant_arm, "n_pairs": pair.n_pairs, "n_docs": pair.n_docs,
        "ppl_mean": float(ppl_variant.mean()), "reference_ppl_mean": float(ppl_baseline.mean()),
        "delta_p": metrics.delta_p(ppl_baseline.mean(), ppl_variant.mean()),
        "improved_pairs": metrics.improved_pairs(ppl_baseline, ppl_variant),
        "nll_diff_mean": metrics.nll_diff_mean(nll_baseline, nll_variant),
        "t_p_value": t_p_value, "permutation_p_value": permutation.p_value,
    }
