"""The paper's figures of a paired loss-file comparison (docs/method-statistics.md §5, §10), around the verdict that
`analysis.compare` reaches on the perplexity scale: ΔP, improved pairs, D with its document-bootstrap interval
(models held fixed), wins, bits per byte, and the group effects the documents' columns show."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gatedv_stats.analysis.comparison import Comparison
from gatedv_stats.core import formatting as fmt
from gatedv_stats.pairing.paired import Paired
from gatedv_stats.stats import metrics
from gatedv_stats.stats.cluster_diagnostic import GroupEffectTest, group_effects, grouping_columns
from gatedv_stats.stats.crossed import cluster_sums
from gatedv_stats.stats.intervals import ConfidenceInterval
from gatedv_stats.stats.metrics import ArmSummary, WinRate
from gatedv_stats.stats.resampling import BootstrapResult, document_bootstrap
from gatedv_stats.stats.seed_document import SeedDocumentResult

MODELS_FIXED = "models fixed: documents resampled"
SEEDS_AND_DOCUMENTS = "seeds and documents sampled"


@dataclass(frozen=True)
class PerplexityFigures:
    """The perplexity figures of one baseline/variant pair of arms."""

    baseline: ArmSummary
    variant: ArmSummary
    delta_p: float  # fraction, P̄_variant / P̄_baseline − 1
    improved_pairs: int
    bootstrap: BootstrapResult  # the paper's interval for D: documents (or clusters) resampled, models fixed
    win: WinRate
    group_effects: tuple[GroupEffectTest, ...] = ()  # does a column other than the cluster group the documents?

    @classmethod
    def of(cls, paired: Paired, *, labels: np.ndarray | None, cluster: str | None, n_resamples: int,
           confidence_level: float, rng_seed: int, method: str, progress: bool | None) -> PerplexityFigures:
        """Per-arm perplexities, ΔP, improved pairs, D's document bootstrap (models fixed) and document wins."""
        n_bytes = paired.doc_columns["n_bytes"].to_numpy() if "n_bytes" in paired.doc_columns else None
        baseline = metrics.arm_summary(paired.baseline_arm, paired.seeds, paired.baseline, paired.n_units, n_bytes)
        variant = metrics.arm_summary(paired.variant_arm, paired.seeds, paired.variant, paired.n_units, n_bytes)
        units, units_n = resampled_units(paired, labels)
        return cls(baseline=baseline, variant=variant, delta_p=metrics.delta_p(baseline.ppl_mean, variant.ppl_mean),
                   improved_pairs=metrics.improved_pairs(baseline.ppl, variant.ppl),
                   bootstrap=document_bootstrap(units, units_n, n_resamples=n_resamples,
                                                confidence_level=confidence_level, rng_seed=rng_seed, method=method,
                                                progress=progress),
                   win=metrics.document_wins(paired.baseline, paired.variant, paired.n_units),
                   group_effects=paired_group_effects(paired, cluster))

    @staticmethod
    def estimate(paired: Paired) -> float:
        """D: the mean over seeds of the token-averaged NLL difference."""
        return metrics.nll_diff_mean(metrics.token_nll(paired.baseline, paired.n_units),
                                     metrics.token_nll(paired.variant, paired.n_units))

    @property
    def nll_diff_ci(self) -> ConfidenceInterval:
        """The document-bootstrap interval for D (models held fixed)."""
        return self.bootstrap.confidence_interval

    def headline_estimate(self, comparison: Comparison) -> str:
        fit = comparison.seed_document
        interval = "" if fit is None or fit.delta_p_interval is None else (
            " " + fmt.format_delta_p_interval(fit.delta_p_interval))
        return f"ΔP {fmt.format_delta_p(self.delta_p)}{interval}"

    def warnings(self, comparison: Comparison) -> tuple[str, ...]:
        """Seeds dropped, mismatches accepted, undefined spreads, documents whose groups differ far beyond what they
        explain (`cluster_diagnostic`)."""
        warnings = list(dict.fromkeys(self.baseline.notes + self.variant.notes)) + list(comparison.pairing_notes)
        if self.win.n_docs < 2:
            warnings.append("one document: the document bootstrap cannot vary, so its interval has zero width")
        elif comparison.seed_document is not None and comparison.seed_document.n_clusters == 1:
            warnings.append(f"one {comparison.cluster} cluster: the cluster bootstrap cannot vary, so its interval has "
                            "zero width")
        return tuple(warnings) + tuple(test.warning() for test in self.group_effects if test.flagged)

    def to_dict(self, comparison: Comparison) -> dict:
        """The `gatedv bootstrap --json` object; `delta_p` and `win_rate` are fractions. `nll_diff_ci` is the
        paper's models-fixed interval; the headline is `verdict` with `nll_diff_seed_document_ci`."""
        fit, bits, d, win = comparison.seed_document, 1.0 / math.log(2.0), comparison.estimate, self.win.win_rate
        return {
            "baseline": self.baseline.to_dict(), "variant": self.variant.to_dict(), "delta_p": self.delta_p,
            "improved_pairs": self.improved_pairs, "n_pairs": comparison.n_pairs, "nll_diff_mean": d,
            "nll_diff_ci": list(self.nll_diff_ci), "ci_level": self.bootstrap.confidence_level,
            "ci_method": self.bootstrap.method, "bootstrap_samples": self.bootstrap.n_resamples,
            "bootstrap_seed": self.bootstrap.rng_seed,
            **self.win.to_dict(),  # wins, n_docs, win_rate
            **comparison.verdict_keys(),
            "nll_diff_seed_document_ci": None if fit is None else list(fit.confidence_interval),
            "nll_diff_seed_document_df": None if fit is None else fit.df,
            "delta_p_seed_document_ci": None if fit is None or fit.delta_p_interval is None else
            list(fit.delta_p_interval),
            "noise_floor": None if fit is None or fit.floor_use is None else fit.floor_use.to_dict(),
            "variance_components": variance_components(fit, "document"),
            "standard_errors": {  # one for every point estimate (None where undefined)
                "nll_diff_mean": None if fit is None else fit.se,
                "delta_p": None if fit is None or fit.log_ratio_se is None else (1.0 + self.delta_p) * fit.log_ratio_se,
                "nll_diff_mean_models_fixed": self.bootstrap.standard_error,
                "win_rate": math.sqrt(win * (1.0 - win) / self.win.n_docs),
                **{f"{side}_ppl_mean": None if arm.n_seeds < 2 else float(arm.ppl_sd / math.sqrt(arm.n_seeds))
                   for side, arm in (("baseline", self.baseline), ("variant", self.variant))}},  # SD / sqrt(S)
            "nll_diff_ci_kind": MODELS_FIXED, "nll_diff_seed_document_ci_kind": SEEDS_AND_DOCUMENTS,
            "confidence_level": self.bootstrap.confidence_level, "cluster": comparison.cluster,
            "n_clusters": None if fit is None else fit.n_clusters,
            "win_rate_ci": list(self.win.confidence_interval(self.bootstrap.confidence_level)),
            "unit": comparison.unit,
            # per byte, D is in nats per byte: the same differences and intervals in bits per byte
            **({"bits_per_byte_diff": d * bits,
                "bits_per_byte_diff_ci": None if fit is None else [end * bits for end in fit.confidence_interval],
                "bits_per_byte_diff_ci_models_fixed": [end * bits for end in self.nll_diff_ci]}
               if comparison.unit == "byte" else {}),
            "notes": list(comparison.notes),
        }

    def columns(self, comparison: Comparison) -> dict:
        """The columns of a table of comparisons after the leading ones: arms, ΔP and D with their intervals, PPL,
        pairs, documents, wins."""
        fit, leading = comparison.seed_document, comparison.leading()
        delta_p_interval = (float("nan"),) * 2 if fit is None or fit.delta_p_interval is None else fit.delta_p_interval
        return {
            "baseline_arm": comparison.baseline_arm, "variant_arm": comparison.variant_arm,
            "eval_set": comparison.eval_set, "delta_p": self.delta_p,
            "delta_p_low": delta_p_interval[0], "delta_p_high": delta_p_interval[1],
            "nll_diff_mean": comparison.estimate, "nll_diff_low": leading["low"], "nll_diff_high": leading["high"],
            "nll_diff_models_fixed_low": self.nll_diff_ci.low, "nll_diff_models_fixed_high": self.nll_diff_ci.high,
            "baseline_ppl_mean": self.baseline.ppl_mean, "variant_ppl_mean": self.variant.ppl_mean,
            "improved_pairs": self.improved_pairs, "n_pairs": comparison.n_pairs, "n_docs": self.win.n_docs,
            "win_rate": self.win.win_rate, "unit": comparison.unit}

    def summary(self, comparison: Comparison) -> str:
        """The verdict, then a readable table: per-seed PPL of both arms, P̄ ± SD, ΔP, improved pairs, D with both
        intervals, wins."""
        base, var, fit, unit = self.baseline, self.variant, comparison.seed_document, comparison.unit
        width = max(18, len(base.arm), len(var.arm)) + 2
        level = fmt.format_level(self.bootstrap.confidence_level)
        units = fmt.format_count(self.win.n_docs) + " documents"
        if fit is not None and fit.n_clusters is not None:
            units += f" in {fmt.format_count(fit.n_clusters)} {comparison.cluster} clusters"
        delta_p_interval = "" if fit is None or fit.delta_p_interval is None else (
            f"   {level} interval {fmt.format_delta_p_interval(fit.delta_p_interval)} ({SEEDS_AND_DOCUMENTS}; "
            "through the log ratio, approximate)")
        fit_lines = [] if fit is None else [
            f"{f'{level} interval':<18} {fmt.format_interval(*fit.confidence_interval)} ({SEEDS_AND_DOCUMENTS}; "
            f"SE {fit.se:.3g}, t with {fit.df:.1f} df)",
            f"{'':<19}variance components (nats² per {unit}): {', '.join(fit.components())}"]
        lines = [f"{var.arm} vs {base.arm}: {comparison.n_pairs} paired seeds, {units}", *self._unit_lines(comparison),
                 "", f"verdict: {comparison.verdict_text}" + ("" if unit == "token" else f" (per {unit})"),
                 f"  {comparison.verdict_explanation}", "", f"{'seed':<12}{base.arm:>{width}}{var.arm:>{width}}"]
        for seed, base_ppl, var_ppl in zip(base.seeds, base.ppl, var.ppl):
            lines.append(f"{seed:<12}{fmt.format_ppl(base_ppl):>{width}}{fmt.format_ppl(var_ppl):>{width}}")
        lines += [f"{'mean ± SD':<12}{fmt.format_ppl(base.ppl_mean, base.ppl_sd):>{width}}"
                  f"{fmt.format_ppl(var.ppl_mean, var.ppl_sd):>{width}}", "",
                  f"ΔP                 {fmt.format_delta_p(self.delta_p)}" + delta_p_interval,
                  f"improved pairs     {fmt.format_pairs(self.improved_pairs, comparison.n_pairs)}",
                  f"mean NLL diff D    {fmt.format_nll_diff(comparison.estimate)}", *fit_lines,
                  f"{f'{level} interval':<18} {fmt.format_interval(*self.nll_diff_ci)} ({MODELS_FIXED}; "
                  f"{self.bootstrap.method}, B = {fmt.format_count(self.bootstrap.n_resamples)}, "
                  f"seed {self.bootstrap.rng_seed}"
                  + (f", {comparison.cluster} clusters resampled" if comparison.cluster else "") + ")",
                  f"wins               {fmt.format_count(self.win.wins)} of {fmt.format_count(self.win.n_docs)} "
                  f"({fmt.format_percent(self.win.win_rate)}; {level} Wilson interval "
                  f"{fmt.format_percent_interval(self.win.confidence_interval(self.bootstrap.confidence_level))}, "
                  "models fixed)"]
        lines += [f"note: {note}" for note in comparison.notes] + ["", "inputs:"]
        sources = comparison.sources  # each file read, by side and seed, with its SHA-256
        lines += [f"  {side} seed {seed}: {source} (sha256 {sha[:12]})" for side in ("baseline", "variant")
                  for seed, source, sha in zip(base.seeds, sources[side], sources[f"{side}_sha256"])]
        return "\n".join(lines)

    def _unit_lines(self, comparison: Comparison) -> list[str]:
        unit = comparison.unit
        if unit == "token":
            return []
        if unit != "byte":
            base_bpb, var_bpb = self.baseline.bits_per_byte, self.variant.bits_per_byte
            bytes_line = [] if base_bpb is None or var_bpb is None else [
                f"bits per byte of the same text: {base_bpb.mean():.4f} vs {var_bpb.mean():.4f}, difference "
                f"{var_bpb.mean() - base_bpb.mean():+.5f} (mean over seeds)"]
            return [f"the files count {unit}s as targets: NLL and D are nats per {unit}, PPL and ΔP are "
                    f"per {unit}", *bytes_line]
        return ["compared per UTF-8 byte of the same text: NLL and D are nats per byte (÷ ln 2 for bits), PPL and ΔP "
                "are per byte",
                f"bits per byte: {self.baseline.nll.mean() / math.log(2.0):.4f} vs "
                f"{self.variant.nll.mean() / math.log(2.0):.4f}, difference "
                f"{comparison.estimate / math.log(2.0):+.5f} bits per byte"]


def variance_components(fit: SeedDocumentResult | None, noun: str) -> dict | None:
    """The fit's variance components as the JSON holds them, the units' named by `noun`."""
    if fit is None:
        return None
    return {"seed": fit.seed_var, noun: fit.doc_var, "interaction": fit.interaction_var,
            "truncated": list(fit.truncated), f"{noun}_pooled": fit.doc_pooled, f"{noun}_pretest_p": fit.doc_pretest_p}


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
