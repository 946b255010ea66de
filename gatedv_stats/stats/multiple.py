"""Many arms against one reference: per-arm verdicts and tests with Holm and Benjamini–Hochberg adjusted p-values.

Each evaluation set is its own family. Three families of tests are adjusted separately: the seed-and-document
t test of D (the headline: it generalises over training seeds and documents, docs/method.md §10), the
seed-level paired t test on the per-seed log PPL ratios (new seeds, these documents) and the document-level
sign-flip test on d_i (models held fixed). Holm controls the family-wise error rate, Benjamini–Hochberg the
false discovery rate (`statsmodels.stats.multitest.multipletests`). An arm's verdict uses the Holm-adjusted
seed-and-document p-value (and, with a smallest effect of interest, the Holm-adjusted equivalence p-value), so
"better" over many arms keeps its family-wise meaning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from statsmodels.stats.multitest import multipletests

from gatedv_stats.core import formatting as fmt
from gatedv_stats.core.errors import InputError
from gatedv_stats.core.validation import check_n_resamples, check_open_unit
from gatedv_stats.pairing.losses import PairedLosses
from gatedv_stats.stats import metrics
from gatedv_stats.stats.cluster_diagnostic import paired_group_effects
from gatedv_stats.stats.comparison import cluster_labels, resampled_units, seed_document_or_none
from gatedv_stats.stats.permutation import sign_flip_test
from gatedv_stats.stats.seed_tests import paired_t_interval
from gatedv_stats.stats.verdict import verdict

ADJUSTMENTS = {"holm": "holm", "bh": "fdr_bh"}  # our key → multipletests method
# the p-value fields adjusted, each within an evaluation set, and what their tests are called
FAMILIES = {"seed_document": "seed-and-document t test", "t": "seed-level t test", "permutation": "sign-flip test"}


@dataclass(frozen=True)
class ArmTest:
    """One arm against the reference, with raw and adjusted p-values (None where a test is undefined)."""

    arm: str
    eval_set: str | None
    unit: str  # "token" or "byte"
    n_pairs: int
    n_docs: int
    ppl_mean: float
    reference_ppl_mean: float
    delta_p: float
    improved_pairs: int
    nll_diff_mean: float  # D
    verdict: str  # better / worse / no detectable difference / equivalent, after Holm's adjustment
    nll_diff_seed_document_ci: list | None  # [low, high], unadjusted
    delta_p_seed_document_ci: list | None
    seed_document_p_value: float | None  # two-sided; None with fewer than 2 seed pairs
    seed_document_p_holm: float | None
    seed_document_p_bh: float | None
    tost_p_value: float | None  # with a smallest effect of interest
    t_p_value: float | None  # paired t on r_s, two-sided; None with fewer than 2 seed pairs
    t_p_holm: float | None
    t_p_bh: float | None
    permutation_p_value: float  # sign-flip on d_i, two-sided, models fixed
    permutation_p_holm: float
    permutation_p_bh: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ArmsComparison:
    reference: str
    arms: tuple[ArmTest, ...]
    alpha: float
    sesoi: float | None
    n_resamples: int  # sign vectors per permutation test
    rng_seed: int  # of every permutation test
    notes: tuple[str, ...]  # the warnings among them
    warnings: tuple[str, ...] = ()  # arms whose documents' groups differ far beyond what they explain

    def to_dict(self) -> dict:
        return {"reference": self.reference, "alpha": self.alpha, "sesoi": self.sesoi,
                "permutation_resamples": self.n_resamples, "permutation_seed": self.rng_seed,
                "arms": [arm.to_dict() for arm in self.arms], "notes": list(self.notes),
                "warnings": list(self.warnings)}

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([arm.to_dict() for arm in self.arms])

    def summary(self) -> str:
        lines = [f"every arm against {self.reference} ({len(self.arms)} comparisons; p-values two-sided, adjusted "
                 f"within each evaluation set with Holm (FWER) and Benjamini–Hochberg (FDR); * marks adjusted "
                 f"p ≤ {self.alpha:g}; verdicts use the Holm-adjusted seed-and-document p)"]
        header = ("arm", "pairs", "PPL", "ΔP", "improved", "ΔP interval (seeds, docs)", "verdict", "p", "Holm", "BH",
                  "t p", "Holm", "perm p", "Holm")
        for eval_set in dict.fromkeys(arm.eval_set for arm in self.arms):
            rows = [self._row(arm) for arm in self.arms if arm.eval_set == eval_set]
            lines += ["", f"{fmt.eval_set_name(eval_set)}:", *fmt.text_table(header, rows, "lrrrrllrrrrrrr")]
        lines += ["", "p: seeds and documents sampled; t p: new seeds on these documents; perm p: models fixed"]
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)

    def _row(self, arm: ArmTest) -> tuple[str, ...]:
        ci = arm.delta_p_seed_document_ci
        interval = "—" if ci is None else fmt.format_delta_p_interval((ci[0], ci[1]))
        return (arm.arm, str(arm.n_pairs), fmt.format_ppl(arm.ppl_mean), fmt.format_delta_p(arm.delta_p),
                fmt.format_pairs(arm.improved_pairs, arm.n_pairs), interval, arm.verdict,
                self._p(arm.seed_document_p_value), self._p(arm.seed_document_p_holm, True),
                self._p(arm.seed_document_p_bh, True), self._p(arm.t_p_value), self._p(arm.t_p_holm, True),
                self._p(arm.permutation_p_value), self._p(arm.permutation_p_holm, True))

    def _p(self, value: float | None, mark: bool = False) -> str:
        """A p-value, "*" after an adjusted one at most alpha (a space keeps the digits aligned)."""
        if value is None:
            return "n/a "
        return f"{value:.3g}{'*' if mark and value <= self.alpha else ' '}"


def compare_arms(pairs: Sequence[PairedLosses], *, alpha: float = 0.05, n_resamples: int = 10_000,
                 rng_seed: int = 0, sesoi: float | None = None, cluster: str | None = None) -> ArmsComparison:
    """Each pair's variant against its baseline (the shared reference), adjusted over the arms of each
    evaluation set; `sesoi` and `cluster` as in `compare`."""
    check_open_unit("alpha", alpha)
    check_n_resamples(n_resamples, minimum=1)
    if sesoi is not None:
        check_open_unit("sesoi", sesoi)
    if not pairs:
        raise InputError("no arms to compare")
    references = {pair.baseline_arm for pair in pairs}
    if len(references) != 1:
        raise InputError(f"the pairs must share one reference arm, got {', '.join(sorted(references))}")
    rows = [_raw_test(pair, alpha=alpha, n_resamples=n_resamples, rng_seed=rng_seed, sesoi=sesoi, cluster=cluster)
            for pair in pairs]
    notes = []
    for eval_set in dict.fromkeys(row["eval_set"] for row in rows):
        family = [row for row in rows if row["eval_set"] == eval_set]
        notes += _adjust_family(family, alpha)
    notes += [f"{pair.variant_arm}: {note}" for pair in pairs for note in pair.notes]
    warnings = [f"{pair.variant_arm}: {test.warning()}" for pair in pairs
                for test in paired_group_effects(pair, cluster) if test.flagged]
    return ArmsComparison(reference=pairs[0].baseline_arm,
                          arms=tuple(ArmTest(**row) for row in rows),
                          alpha=alpha, sesoi=sesoi, n_resamples=n_resamples, rng_seed=rng_seed,
                          notes=tuple(dict.fromkeys(notes + warnings)), warnings=tuple(warnings))


def adjust_p_values(p_values: Sequence[float]) -> dict[str, list[float]]:
    """Holm and Benjamini–Hochberg adjusted p-values, in the order given."""
    return {key: [float(value) for value in multipletests(np.asarray(p_values, dtype=np.float64), method=method)[1]]
            for key, method in ADJUSTMENTS.items()}


def _adjust_family(rows: list[dict], alpha: float) -> list[str]:
    """Fill the adjusted p-values and the verdict of the rows of one evaluation set (in place); notes."""
    notes = []
    for family in FAMILIES:
        values = [row[f"{family}_p_value"] for row in rows]
        if any(value is None for value in values):
            missing = [row["arm"] for row in rows if row[f"{family}_p_value"] is None]
            notes.append(f"no {FAMILIES[family]} for {', '.join(missing)} (fewer than 2 seed pairs, or no spread); "
                         "its family is not adjusted")
            adjusted: Mapping[str, Sequence[float | None]] = {key: [None] * len(rows) for key in ADJUSTMENTS}
        else:
            adjusted = adjust_p_values(values)
        for k, row in enumerate(rows):
            row[f"{family}_p_holm"], row[f"{family}_p_bh"] = adjusted["holm"][k], adjusted["bh"][k]
    verdicts = holm_verdicts([row["seed_document_p_value"] for row in rows], [row["tost_p_value"] for row in rows],
                             [row["nll_diff_mean"] for row in rows], alpha)
    for row, decided in zip(rows, verdicts):
        row["verdict"] = decided
    return notes


def holm_verdicts(p_values: Sequence[float | None], tost_p_values: Sequence[float | None],
                  nll_diff_means: Sequence[float], alpha: float) -> list[str]:
    """The verdict of each of several arms compared with one reference: "equivalent" when its Holm-adjusted
    equivalence (TOST) p is below `alpha`, else "better" / "worse" when its Holm-adjusted seed-and-document p is
    at most `alpha`, else "no detectable difference". A family in which some arm lacks a test is not adjusted,
    and no arm of it is decided by that test."""
    count = len(p_values)

    def holm_of(values: Sequence[float | None]) -> Sequence[float | None]:
        present = [value for value in values if value is not None]
        return adjust_p_values(present)["holm"] if count and len(present) == count else [None] * count

    holm, tost_holm = holm_of(p_values), holm_of(tost_p_values)
    verdicts = []
    for p_holm, tost_p, nll_diff_mean in zip(holm, tost_holm, nll_diff_means):
        if tost_p is not None and tost_p < alpha:
            verdicts.append("equivalent")
        elif p_holm is not None and p_holm <= alpha:
            verdicts.append("better" if nll_diff_mean < 0 else "worse")
        else:
            verdicts.append("no detectable difference")
    return verdicts


def _raw_test(pair: PairedLosses, *, alpha: float, n_resamples: int, rng_seed: int, sesoi: float | None,
              cluster: str | None) -> dict:
    nll_baseline = metrics.token_nll(pair.baseline, pair.n_units)
    nll_variant = metrics.token_nll(pair.variant, pair.n_units)
    ppl_baseline, ppl_variant = metrics.perplexity(nll_baseline), metrics.perplexity(nll_variant)
    log_ratios = nll_variant - nll_baseline
    labels = cluster_labels(pair, cluster)
    fit = seed_document_or_none(pair, labels, 1.0 - alpha)
    tested = None if fit is None else verdict(fit, sesoi=sesoi, unit=pair.unit)
    units, units_n = resampled_units(pair, labels)
    return {
        "arm": pair.variant_arm, "eval_set": pair.eval_set, "unit": pair.unit, "n_pairs": pair.n_pairs,
        "n_docs": pair.n_docs, "ppl_mean": float(ppl_variant.mean()), "reference_ppl_mean": float(ppl_baseline.mean()),
        "delta_p": metrics.delta_p(ppl_baseline.mean(), ppl_variant.mean()),
        "improved_pairs": metrics.improved_pairs(ppl_baseline, ppl_variant),
        "nll_diff_mean": metrics.nll_diff_mean(nll_baseline, nll_variant),
        "nll_diff_seed_document_ci": None if fit is None else list(fit.confidence_interval),
        "delta_p_seed_document_ci": None if fit is None else list(fit.delta_p_interval),
        "seed_document_p_value": None if fit is None else fit.p_value,
        "tost_p_value": None if tested is None else tested.tost_p_value,
        "t_p_value": (paired_t_interval(log_ratios).p_value
                      if log_ratios.size >= 2 and np.ptp(log_ratios) > 0 else None),
        "permutation_p_value": sign_flip_test(units, units_n, n_resamples=n_resamples, rng_seed=rng_seed).p_value,
    }
