"""The rows of many loss-file arms against one reference (`gatedv arms`): each arm's perplexity figures, with the
p-values of three tests, each adjusted within its evaluation set — the verdict's seed-and-document test, the
seed-level paired t test on the per-seed log PPL ratios (new seeds, these documents) and the document-level
sign-flip test on d_i (models held fixed)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from gatedv_stats.analysis.comparison import NO_DIFFERENCE, ArmsComparison
from gatedv_stats.analysis.figures.perplexity import paired_group_effects, resampled_units
from gatedv_stats.core import formatting as fmt
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.stats import metrics
from gatedv_stats.stats.permutation import sign_flip_test
from gatedv_stats.stats.seed_document import SeedDocumentResult
from gatedv_stats.stats.seed_level import paired_t_interval
from gatedv_stats.stats.verdict import Verdict

# the tests whose p-values are adjusted, each within an evaluation set, and what they are called
TESTS = {"seed_document": "seed-and-document t test", "t": "seed-level t test", "permutation": "sign-flip test"}
WITHIN_FAMILY = True  # each evaluation set is its own family


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

    def leading(self) -> dict:
        """The columns every metric's table starts with."""
        nan, p = float("nan"), self.seed_document_p_value
        low, high = self.nll_diff_seed_document_ci or (nan, nan)
        return {"estimate": self.nll_diff_mean, "low": low, "high": high, "p_value": nan if p is None else p,
                "verdict": self.verdict}

    def columns(self) -> dict:
        return {key: value for key, value in asdict(self).items() if key != "verdict"}

    @staticmethod
    def family_dict(arms: ArmsComparison) -> dict:
        """The `--json` object of a many-arms comparison of these rows."""
        return {"reference": arms.reference, "alpha": arms.alpha, "sesoi": arms.sesoi,
                "permutation_resamples": arms.n_resamples, "permutation_seed": arms.rng_seed,
                "arms": [asdict(arm) for arm in arms.arms], "notes": list(arms.notes), "warnings": list(arms.warnings)}

    @staticmethod
    def family_summary(arms: ArmsComparison) -> str:
        """The text table of a many-arms comparison of these rows."""
        lines = [f"every arm against {arms.reference} ({len(arms.arms)} comparisons; p-values two-sided, adjusted "
                 f"within each evaluation set with Holm (FWER) and Benjamini–Hochberg (FDR); * marks adjusted "
                 f"p ≤ {arms.alpha:g}; verdicts use the Holm-adjusted seed-and-document p)"]
        header = ("arm", "pairs", "PPL", "ΔP", "improved", "ΔP interval (seeds, docs)", "verdict", "p", "Holm", "BH",
                  "t p", "Holm", "perm p", "Holm")
        for eval_set in dict.fromkeys(arm.eval_set for arm in arms.arms):
            rows = [_cells(arm, arms.alpha) for arm in arms.arms if arm.eval_set == eval_set]
            lines += ["", f"{fmt.eval_set_name(eval_set)}:", *fmt.text_table(header, rows, "lrrrrllrrrrrrr")]
        lines += ["", "p: seeds and documents sampled; t p: new seeds on these documents; perm p: models fixed"]
        return "\n".join(lines + [f"note: {note}" for note in arms.notes])


def cluster_of(pair: Paired, cluster: str | None) -> str | None:
    """Every loss-file comparison is clustered by the column (each must have it)."""
    return cluster


def arm_tests(pair: Paired, fit: SeedDocumentResult | None, *, labels: np.ndarray | None, n_permutations: int,
              rng_seed: int) -> dict[str, float | None]:
    """The raw two-sided p-value of each test."""
    log_ratios = metrics.token_nll(pair.variant, pair.n_units) - metrics.token_nll(pair.baseline, pair.n_units)
    units, units_n = resampled_units(pair, labels)
    return {"seed_document": None if fit is None else fit.p_value,
            "t": paired_t_interval(log_ratios).p_value if log_ratios.size >= 2 and np.ptp(log_ratios) > 0 else None,
            "permutation": sign_flip_test(units, units_n, n_permutations=n_permutations, rng_seed=rng_seed).p_value}


def arm_rows(pairs: Sequence[Paired], fits: Sequence[SeedDocumentResult | None], clusters: Sequence[str | None],
             tests: Sequence[dict], adjusted: Sequence[dict], verdicts: Sequence[Verdict | None],
             raw: Sequence[Verdict | None], *, cluster: str | None,
             alpha: float) -> tuple[list[ArmTest], list[str], list[str], list]:
    """Each arm's row (`verdicts` Holm-adjusted, `raw` each comparison's own); the notes of the pairings, and the
    warnings of documents whose groups differ far beyond what they explain."""
    rows = list(map(_row, pairs, fits, tests, adjusted, verdicts, raw))
    notes = [f"{pair.variant_arm}: {note}" for pair in pairs for note in pair.notes]
    warnings = [f"{pair.variant_arm}: {test.warning()}" for pair in pairs
                for test in paired_group_effects(pair, cluster) if test.flagged]
    return rows, notes, warnings, []


def _row(pair: Paired, fit: SeedDocumentResult | None, test: dict, adjustment: dict, decided: Verdict | None,
         raw: Verdict | None) -> ArmTest:
    baseline = metrics.arm_summary(pair.baseline_arm, pair.seeds, pair.baseline, pair.n_units)
    variant = metrics.arm_summary(pair.variant_arm, pair.seeds, pair.variant, pair.n_units)
    adjusted = {f"{name}_p_{how}": value for name, ps in adjustment.items() for how, value in zip(("holm", "bh"), ps)}
    return ArmTest(
        arm=pair.variant_arm, eval_set=pair.eval_set, unit=pair.unit, n_pairs=pair.n_pairs, n_docs=pair.n_docs,
        ppl_mean=variant.ppl_mean, reference_ppl_mean=baseline.ppl_mean,
        delta_p=metrics.delta_p(baseline.ppl_mean, variant.ppl_mean),
        improved_pairs=metrics.improved_pairs(baseline.ppl, variant.ppl),
        nll_diff_mean=metrics.nll_diff_mean(baseline.nll, variant.nll),
        verdict=NO_DIFFERENCE if decided is None else decided.verdict,
        nll_diff_seed_document_ci=None if fit is None else list(fit.confidence_interval),
        delta_p_seed_document_ci=None if fit is None or fit.delta_p_interval is None else list(fit.delta_p_interval),
        seed_document_p_value=test["seed_document"], tost_p_value=None if raw is None else raw.tost_p_value,
        t_p_value=test["t"], permutation_p_value=test["permutation"], **adjusted)


def _cells(arm: ArmTest, alpha: float) -> tuple[str, ...]:
    ci = arm.delta_p_seed_document_ci
    interval = "—" if ci is None else fmt.format_delta_p_interval((ci[0], ci[1]))
    tests = ((arm.seed_document_p_value, arm.seed_document_p_holm, arm.seed_document_p_bh),
             (arm.t_p_value, arm.t_p_holm), (arm.permutation_p_value, arm.permutation_p_holm))  # raw, then adjusted
    return (arm.arm, str(arm.n_pairs), fmt.format_ppl(arm.ppl_mean), fmt.format_delta_p(arm.delta_p),
            fmt.format_pairs(arm.improved_pairs, arm.n_pairs), interval, arm.verdict,
            *(p_text(value, alpha, adjusted > 0) for test in tests for adjusted, value in enumerate(test)))


def p_text(value: float | None, alpha: float, mark: bool = False) -> str:
    """A p-value, "*" after an adjusted one at most alpha (a space keeps the digits aligned)."""
    if value is None:
        return "n/a "
    return f"{value:.3g}{'*' if mark and value <= alpha else ' '}"
