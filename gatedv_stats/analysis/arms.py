"""Many arms (or tasks) against one reference, for every metric: each comparison's verdict from Holm-adjusted
p-values across its family, so that "better" over many comparisons keeps its family-wise meaning, and every test's
p-values adjusted by Holm (family-wise error) and Benjamini–Hochberg (false discovery rate).

One routine serves every scale; the scale's rows (`analysis.figures.perplexity_arms`, `score_arms`) say which tests
a comparison has beside the verdict's seed-and-document test and what each row shows. The family: each evaluation
set of loss files, every (arm, task) comparison of a downstream suite, every arm of a score table. A comparison
without a test (one seed pair, no spread) has no verdict from it and is left out of its family's adjustment.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gatedv_stats.analysis.compare import decide, seed_document_fit, with_floor
from gatedv_stats.analysis.comparison import ArmsComparison, Comparison
from gatedv_stats.analysis.figures import perplexity_arms, score_arms
from gatedv_stats.analysis.noise_floor import NoiseFloor
from gatedv_stats.core.defaults import DEFAULTS
from gatedv_stats.core.errors import InputError
from gatedv_stats.core.validation import check_n_resamples, check_open_unit
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.stats.multiple import adjust_p_values, holm
from gatedv_stats.stats.seed_document import SeedDocumentResult
from gatedv_stats.stats.verdict import Verdict

# The rows of each scale's figures (`Scale.figures`) in a many-arms comparison.
ARMS: dict[str, Any] = {"perplexity": perplexity_arms, "scores": score_arms}


def compare_arms(pairs: Sequence[Paired], *, alpha: float = DEFAULTS.alpha, sesoi: float | None = None,
                 cluster: str | None = None, n_permutations: int = DEFAULTS.n_permutations,
                 rng_seed: int = DEFAULTS.rng_seed, floor: NoiseFloor | None = None,
                 allow_mismatch: Sequence[str] = ()) -> ArmsComparison:
    """Each pair's variant against its baseline (the shared reference), verdicts adjusted with Holm over each
    family. `sesoi` and `cluster` as in `compare`; `n_permutations` sign vectors per sign-flip test of a loss-file
    comparison; `floor` and `allow_mismatch` as in `compare`, for every comparison."""
    check_open_unit("alpha", alpha)
    check_n_resamples(n_permutations, minimum=1, parameter="n_permutations")
    if not pairs:
        raise InputError("no arms to compare")
    if len({(pair.baseline_arm, pair.scale.metric) for pair in pairs}) != 1:
        raise InputError("the comparisons must share one reference arm and one metric")
    scale = pairs[0].scale
    if sesoi is not None:
        scale.check_sesoi(sesoi)
    pairs = [with_floor(pair, floor, allow_mismatch) for pair in pairs]
    kind = ARMS[scale.figures]
    clusters = [kind.cluster_of(pair, cluster) for pair in pairs]
    fits = [seed_document_fit(pair, pair.labels(column), 1.0 - alpha, floor=floor)
            for pair, column in zip(pairs, clusters)]
    tests = [kind.arm_tests(pair, fit, labels=pair.labels(column), n_permutations=n_permutations, rng_seed=rng_seed)
             for pair, fit, column in zip(pairs, fits, clusters)]
    adjusted: list[dict] = [{} for _ in pairs]
    verdicts: list[Verdict | None] = [None] * len(pairs)
    notes = []
    # the comparisons adjusted together: those of each evaluation set where the scale adjusts within them, else all
    families = [pair.eval_set if kind.WITHIN_FAMILY else None for pair in pairs]
    for value in dict.fromkeys(families):
        family = [k for k, of in enumerate(families) if of == value]
        for test, name in kind.TESTS.items():
            found = adjust_if_all([tests[k][test] for k in family])
            if found is None:
                missing = [comparison_label(pairs[k]) for k in family if tests[k][test] is None]
                notes.append(f"no {name} for {', '.join(missing)} (fewer than 2 seed pairs, or no spread); its family "
                             "is not adjusted")
            for j, k in enumerate(family):
                adjusted[k][test] = (None, None) if found is None else (found["holm"][j], found["bh"][j])
        for k, decided in zip(family, holm_verdicts([pairs[k] for k in family], [fits[k] for k in family], sesoi)):
            verdicts[k] = decided
    raw = [None if fit is None else decide(fit, pair, sesoi) for pair, fit in zip(pairs, fits)]
    rows, more, warnings, macro = kind.arm_rows(pairs, fits, clusters, tests, adjusted, verdicts, raw,
                                                cluster=cluster, alpha=alpha)
    return ArmsComparison(reference=pairs[0].baseline_arm, scale=scale, arms=tuple(rows), alpha=alpha, sesoi=sesoi,
                          n_resamples=n_permutations, rng_seed=rng_seed,
                          notes=tuple(dict.fromkeys(notes + more + warnings)), warnings=tuple(warnings),
                          macro=tuple(macro))


def comparison_label(pair: Paired | Comparison) -> str:
    """The variant of a comparison, with its task where it has one."""
    return pair.variant_arm if pair.task is None else f"{pair.variant_arm} on {pair.task}"


def holm_verdicts(pairs: Sequence[Paired], fits: Sequence[SeedDocumentResult | None],
                  sesoi: float | None = None) -> list[Verdict | None]:
    """The verdict of each of several comparisons with one reference, from its Holm-adjusted seed-and-document p
    (and, with a smallest effect of interest, its Holm-adjusted equivalence p) over those that have a test; None
    where a comparison has none."""
    raw = [None if fit is None else decide(fit, pair, sesoi) for pair, fit in zip(pairs, fits)]
    p_holm = holm([None if decided is None else decided.p_value for decided in raw])
    tost_holm = holm([None if decided is None else decided.tost_p_value for decided in raw])
    return [None if fit is None else decide(fit, pair, sesoi, p_value=p, tost_p_value=tost)
            for pair, fit, p, tost in zip(pairs, fits, p_holm, tost_holm)]


def adjust_if_all(p_values: Sequence[float | None]) -> dict[str, list[float]] | None:
    """The Holm and BH adjusted p-values (`stats.multiple.adjust_p_values`), or None when a comparison lacks the
    test."""
    present = [value for value in p_values if value is not None]
    return adjust_p_values(present) if len(present) == len(p_values) else None
