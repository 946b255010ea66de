"""The paper's figures of a paired loss-file comparison (docs/method.md §5, §10), around the verdict that
`analysis.compare` reaches on the perplexity scale: ΔP, improved pairs, D with its document-bootstrap interval
(models held fixed), wins."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gatedv_stats.core import formatting as fmt
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.stats import metrics
from gatedv_stats.stats.cluster_diagnostic import GroupEffectTest, group_effects, grouping_columns
from gatedv_stats.stats.crossed import cluster_sums
from gatedv_stats.stats.intervals import ConfidenceInterval
from gatedv_stats.stats.metrics import ArmSummary, WinRate
from gatedv_stats.stats.resampling import BootstrapResult, document_bootstrap
from gatedv_stats.stats.seed_document import SeedDocumentResult
from gatedv_stats.stats.verdict import Verdict

MODELS_FIXED = "models fixed: documents resampled"
SEEDS_AND_DOCUMENTS = "seeds and documents sampled"


@dataclass(frozen=True)
class Comparison:
    """Everything `gatedv bootstrap` reports about one baseline/variant pair of arms."""

    baseline: ArmSummary
    variant: ArmSummary
    delta_p: float  # fraction, P̄_variant / P̄_baseline − 1
    improved_pairs: int
    n_pairs: int
    nll_diff_mean: float  # D
    seed_document: SeedDocumentResult | None  # the interval that generalises over seeds; None with one seed pair
    verdict: Verdict | None  # from `seed_document`; None with one seed pair
    bootstrap: BootstrapResult  # the paper's interval for D: documents (or clusters) resampled, models fixed
    win: WinRate
    cluster: str | None  # the document column whose values group documents into sampled clusters
    unit: str  # "token", or "byte" when every figure is per UTF-8 byte of the target text (across tokenizers)
    pairing_notes: tuple[str, ...]  # seeds dropped, provenance differences accepted
    sources: dict
    group_effects: tuple[GroupEffectTest, ...] = ()  # does a column other than `cluster` group the documents?

    @property
    def nll_diff_ci(self) -> ConfidenceInterval:
        """The document-bootstrap interval for D (models held fixed)."""
        return self.bootstrap.confidence_interval

    @property
    def verdict_text(self) -> str:
        """One of "better", "worse", "no detectable difference", "equivalent"."""
        return self.verdict.verdict if self.verdict is not None else "no detectable difference"

    @property
    def verdict_explanation(self) -> str:
        if self.verdict is not None:
            return self.verdict.explanation
        if self.n_pairs < 2:
            return ("One seed pair: nothing can be said about new training seeds, so no difference is detectable (a "
                    "noise floor of the setup, from gatedv noise-floor, gives one seed pair a verdict); the "
                    "document-level figures below hold this pair's trained models fixed.")
        if self.nll_diff_mean == 0.0:
            return ("The arms are identical: every document has the same loss in both arms under every seed pair "
                    "(D = 0 exactly), so there is no difference to detect.")
        return (f"The loss difference is the same for every document under every seed pair (D = "
                f"{fmt.format_nll_diff(self.nll_diff_mean)}), so there is no spread to test it against and no "
                "difference is detectable.")

    @property
    def warnings(self) -> tuple[str, ...]:
        """What limits or changes the comparison: seeds dropped, mismatches accepted, undefined spreads, documents
        whose groups differ far beyond what they explain (`cluster_diagnostic`)."""
        warnings = list(dict.fromkeys(self.baseline.notes + self.variant.notes)) + list(self.pairing_notes)
        if self.win.n_docs < 2:
            warnings.append("one document: the document bootstrap cannot vary, so its interval has zero width")
        elif self.seed_document is not None and self.seed_document.n_clusters == 1:
            warnings.append(f"one {self.cluster} cluster: the cluster bootstrap cannot vary, so its interval has zero "
                            "width")
        return tuple(warnings) + tuple(test.warning() for test in self.group_effects if test.flagged)

    @property
    def notes(self) -> tuple[str, ...]:
        """The warnings, then what the seed-and-document fit says about its own components."""
        return self.warnings + (() if self.seed_document is None else self.seed_document.notes)

    def standard_errors(self) -> dict:
        """A standard error for every point estimate (None where undefined)."""
        seed_document = self.seed_document
        p = self.win.win_rate
        return {
            "nll_diff_mean": None if seed_document is None else seed_document.se,
            "delta_p": None if seed_document is None else (1.0 + self.delta_p) * seed_document.log_ratio_se,
            "nll_diff_mean_models_fixed": self.bootstrap.standard_error,
            "win_rate": math.sqrt(p * (1.0 - p) / self.win.n_docs),
            "baseline_ppl_mean": _mean_se(self.baseline),
            "variant_ppl_mean": _mean_se(self.variant),
        }

    def to_dict(self) -> dict:
        """The `gatedv bootstrap --json` object; `delta_p` and `win_rate` are fractions. `nll_diff_ci` is the
        paper's models-fixed interval; the headline is `verdict` with `nll_diff_seed_document_ci`."""
        low, high = self.nll_diff_ci
        seed_document, bits = self.seed_document, 1.0 / math.log(2.0)
        return {
            "baseline": self.baseline.to_dict(),
            "variant": self.variant.to_dict(),
            "delta_p": self.delta_p,
            "improved_pairs": self.improved_pairs,
            "n_pairs": self.n_pairs,
            "nll_diff_mean": self.nll_diff_mean,
            "nll_diff_ci": [low, high],
            "ci_level": self.bootstrap.confidence_level,
            "ci_method": self.bootstrap.method,
            "bootstrap_samples": self.bootstrap.n_resamples,
            "bootstrap_seed": self.bootstrap.rng_seed,
            **self.win.to_dict(),  # wins, n_docs, win_rate
            "verdict": self.verdict_text,
            "verdict_explanation": self.verdict_explanation,
            "verdict_detail": None if self.verdict is None else self.verdict.to_dict(),
            "nll_diff_seed_document_ci": None if seed_document is None else list(seed_document.confidence_interval),
            "nll_diff_seed_document_df": None if seed_document is None else seed_document.df,
            "delta_p_seed_document_ci": None if seed_document is None else list(seed_document.delta_p_interval),
            "noise_floor": None if seed_document is None or seed_document.floor_use is None else
            seed_document.floor_use.to_dict(),
            "variance_components": None if seed_document is None else {
                "seed": seed_document.seed_var, "document": seed_document.doc_var,
                "interaction": seed_document.interaction_var, "truncated": list(seed_document.truncated),
                "document_pooled": seed_document.doc_pooled, "document_pretest_p": seed_document.doc_pretest_p},
            "standard_errors": self.standard_errors(),
            "nll_diff_ci_kind": MODELS_FIXED,
            "nll_diff_seed_document_ci_kind": SEEDS_AND_DOCUMENTS,
            "confidence_level": self.bootstrap.confidence_level,
            "cluster": self.cluster,
            "n_clusters": None if seed_document is None else seed_document.n_clusters,
            "win_rate_ci": list(self.win.confidence_interval(self.bootstrap.confidence_level)),
            "unit": self.unit,
            # per byte, D is in nats per byte: the same differences and intervals in bits per byte
            **({"bits_per_byte_diff": self.nll_diff_mean * bits,
                "bits_per_byte_diff_ci": None if seed_document is None else
                [end * bits for end in seed_document.confidence_interval],
                "bits_per_byte_diff_ci_models_fixed": [end * bits for end in self.nll_diff_ci]}
               if self.unit == "byte" else {}),
            "notes": list(self.notes),
        }

    def summary(self) -> str:
        """The verdict, then a readable table: per-seed PPL of both arms, P̄ ± SD, ΔP, improved pairs, D with both
        intervals, wins."""
        base, var, fit = self.baseline, self.variant, self.seed_document
        width = max(18, len(base.arm), len(var.arm)) + 2
        level = fmt.format_level(self.bootstrap.confidence_level)
        units = fmt.format_count(self.win.n_docs) + " documents"
        if fit is not None and fit.n_clusters is not None:
            units += f" in {fmt.format_count(fit.n_clusters)} {self.cluster} clusters"
        delta_p_interval = "" if fit is None else (
            f"   {level} interval {fmt.format_delta_p_interval(fit.delta_p_interval)} ({SEEDS_AND_DOCUMENTS}; "
            "through the log ratio, approximate)")
        seed_document_lines = [] if fit is None else [
            f"{f'{level} interval':<18} {fmt.format_interval(*fit.confidence_interval)} ({SEEDS_AND_DOCUMENTS}; "
            f"SE {fit.se:.3g}, t with {fit.df:.1f} df)",
            f"{'':<19}variance components (nats² per {self.unit}): {', '.join(fit.components())}"]
        lines = [f"{var.arm} vs {base.arm}: {self.n_pairs} paired seeds, {units}", *self._unit_lines(), "",
                 f"verdict: {self.verdict_text}" + ("" if self.unit == "token" else f" (per {self.unit})"),
                 f"  {self.verdict_explanation}", "",
                 f"{'seed':<12}{base.arm:>{width}}{var.arm:>{width}}"]
        for seed, base_ppl, var_ppl in zip(base.seeds, base.ppl, var.ppl):
            lines.append(f"{seed:<12}{fmt.format_ppl(base_ppl):>{width}}{fmt.format_ppl(var_ppl):>{width}}")
        lines += [
            f"{'mean ± SD':<12}{fmt.format_ppl(base.ppl_mean, base.ppl_sd):>{width}}"
            f"{fmt.format_ppl(var.ppl_mean, var.ppl_sd):>{width}}",
            "",
            f"ΔP                 {fmt.format_delta_p(self.delta_p)}" + delta_p_interval,
            f"improved pairs     {fmt.format_pairs(self.improved_pairs, self.n_pairs)}",
            f"mean NLL diff D    {fmt.format_nll_diff(self.nll_diff_mean)}",
            *seed_document_lines,
            f"{f'{level} interval':<18} {fmt.format_interval(*self.nll_diff_ci)} ({MODELS_FIXED}; "
            f"{self.bootstrap.method}, B = {fmt.format_count(self.bootstrap.n_resamples)}, "
            f"seed {self.bootstrap.rng_seed}"
            + (f", {self.cluster} clusters resampled" if self.cluster else "") + ")",
            f"wins               {fmt.format_count(self.win.wins)} of {fmt.format_count(self.win.n_docs)} "
            f"({fmt.format_percent(self.win.win_rate)}; {level} Wilson interval "
            f"{fmt.format_percent_interval(self.win.confidence_interval(self.bootstrap.confidence_level))}, "
            "models fixed)",
        ]
        lines += [f"note: {note}" for note in self.notes]
        lines += ["", "inputs:"]
        for side in ("baseline", "variant"):
            for seed, source, sha in zip(base.seeds, self.sources[side], self.sources[f"{side}_sha256"]):
                lines.append(f"  {side} seed {seed}: {source} (sha256 {sha[:12]})")
        return "\n".join(lines)

    def _unit_lines(self) -> list[str]:
        if self.unit == "token":
            return []
        if self.unit != "byte":
            base_bpb, var_bpb = self.baseline.bits_per_byte, self.variant.bits_per_byte
            bytes_line = [] if base_bpb is None or var_bpb is None else [
                f"bits per byte of the same text: {base_bpb.mean():.4f} vs {var_bpb.mean():.4f}, difference "
                f"{var_bpb.mean() - base_bpb.mean():+.5f} (mean over seeds)"]
            return [f"the files count {self.unit}s as targets: NLL and D are nats per {self.unit}, PPL and ΔP are "
                    f"per {self.unit}", *bytes_line]
        return ["compared per UTF-8 byte of the same text: NLL and D are nats per byte (÷ ln 2 for bits), PPL and ΔP "
                "are per byte",
                f"bits per byte: {self.baseline.nll.mean() / math.log(2.0):.4f} vs "
                f"{self.variant.nll.mean() / math.log(2.0):.4f}, difference "
                f"{self.nll_diff_mean / math.log(2.0):+.5f} bits per byte"]


def _mean_se(summary: ArmSummary) -> float | None:
    """SE of P̄ over seeds: SD / sqrt(S); None with one seed."""
    return None if summary.n_seeds < 2 else float(summary.ppl_sd / math.sqrt(summary.n_seeds))


def perplexity_comparison(paired: Paired, fit: SeedDocumentResult | None, decided: Verdict | None, *,
                          labels: np.ndarray | None, cluster: str | None, n_resamples: int, confidence_level: float,
                          rng_seed: int, method: str, progress: bool | None) -> Comparison:
    """The paper's figures of a paired loss-file comparison around its verdict: per-arm perplexities, ΔP, improved
    pairs, D with its document bootstrap (models fixed) and document wins."""
    n_bytes = paired.doc_columns["n_bytes"].to_numpy() if "n_bytes" in paired.doc_columns else None
    baseline = metrics.arm_summary(paired.baseline_arm, paired.seeds, paired.baseline, paired.n_units, n_bytes)
    variant = metrics.arm_summary(paired.variant_arm, paired.seeds, paired.variant, paired.n_units, n_bytes)
    units, units_n = resampled_units(paired, labels)
    return Comparison(
        baseline=baseline,
        variant=variant,
        delta_p=metrics.delta_p(baseline.ppl_mean, variant.ppl_mean),
        improved_pairs=metrics.improved_pairs(baseline.ppl, variant.ppl),
        n_pairs=paired.n_pairs,
        nll_diff_mean=metrics.nll_diff_mean(baseline.nll, variant.nll),
        seed_document=fit,
        verdict=decided,
        bootstrap=document_bootstrap(units, units_n, n_resamples=n_resamples, confidence_level=confidence_level,
                                     rng_seed=rng_seed, method=method, progress=progress),
        win=metrics.document_wins(paired.baseline, paired.variant, paired.n_units),
        cluster=cluster,
        unit=paired.unit,
        pairing_notes=paired.notes,
        sources=paired.sources,
        group_effects=paired_group_effects(paired, cluster),
    )


def resampled_units(paired: Paired, labels: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """What the document bootstrap and the sign-flip test resample: per-document differences d_i and unit
    counts (`paired.n_units`), or their sums over clusters."""
    differences = metrics.document_differences(paired.baseline, paired.variant)
    if labels is None:
        return differences, paired.n_units
    sums = cluster_sums(differences, paired.n_units, labels)
    return sums.values, sums.n_units


def paired_group_effects(paired: Paired, cluster: str | None = None) -> tuple[GroupEffectTest, ...]:
    """The group-effect tests (`stats.cluster_diagnostic`) of every grouping column of a pair's documents but the
    one it is clustered by."""
    columns = grouping_columns(paired.doc_columns, exclude=cluster)
    if not columns:
        return ()
    labels = {column: paired.doc_columns[column].astype(str).to_numpy() for column in columns}
    return group_effects((paired.variant - paired.baseline) / paired.n_units, labels, paired.n_units)
