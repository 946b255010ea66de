"""The paired comparison of two arms (docs/method.md §5): ΔP, improved pairs, D with its document-bootstrap interval,
wins."""

from __future__ import annotations

from dataclasses import dataclass

from gatedv_stats import formatting as fmt
from gatedv_stats.stats import metrics
from gatedv_stats.stats.metrics import ArmSummary, WinRate
from gatedv_stats.pairing import PairedLosses
from gatedv_stats.stats.intervals import ConfidenceInterval
from gatedv_stats.stats.resampling import BootstrapResult, document_bootstrap


@dataclass(frozen=True)
class Comparison:
    """Everything `gatedv bootstrap` reports about one baseline/variant pair of arms."""

    baseline: ArmSummary
    variant: ArmSummary
    delta_p: float  # fraction, P̄_variant / P̄_baseline − 1
    improved_pairs: int
    n_pairs: int
    nll_diff_mean: float  # D
    bootstrap: BootstrapResult  # interval for D over documents
    win: WinRate
    pairing_notes: tuple[str, ...]  # seeds dropped, provenance differences accepted
    sources: dict

    @property
    def nll_diff_ci(self) -> ConfidenceInterval:
        """The document-bootstrap interval for D (models held fixed)."""
        return self.bootstrap.confidence_interval

    @property
    def notes(self) -> tuple[str, ...]:
        notes = list(dict.fromkeys(self.baseline.notes + self.variant.notes)) + list(self.pairing_notes)
        if self.win.n_docs < 2:
            notes.append("one document: the document bootstrap cannot vary, so its interval has zero width")
        return tuple(notes)

    def to_dict(self) -> dict:
        """The `gatedv bootstrap --json` object; `delta_p` and `win_rate` are fractions."""
        low, high = self.nll_diff_ci
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
            "bootstrap_seed": self.bootstrap.seed,
            "wins": self.win.wins,
            "n_docs": self.win.n_docs,
            "win_rate": self.win.win_rate,
            "win_rate_ci": list(self.win.confidence_interval(self.bootstrap.confidence_level)),
            "notes": list(self.notes),
        }

    def summary(self) -> str:
        """A readable table: per-seed PPL of both arms, P̄ ± SD, ΔP, improved pairs, D and its interval, wins."""
        base, var = self.baseline, self.variant
        width = max(18, len(base.arm), len(var.arm)) + 2
        level_text = f"{self.bootstrap.confidence_level * 100:g}%"
        lines = [f"{var.arm} vs {base.arm}: {self.n_pairs} paired seeds, {fmt.format_count(self.win.n_docs)} documents",
                 "", f"{'seed':<12}{base.arm:>{width}}{var.arm:>{width}}"]
        for seed, base_ppl, var_ppl in zip(base.seeds, base.ppl, var.ppl):
            lines.append(f"{seed:<12}{fmt.format_ppl(base_ppl):>{width}}{fmt.format_ppl(var_ppl):>{width}}")
        lines += [
            f"{'mean ± SD':<12}{fmt.format_ppl(base.ppl_mean, base.ppl_sd):>{width}}"
            f"{fmt.format_ppl(var.ppl_mean, var.ppl_sd):>{width}}",
            "",
            f"ΔP                 {fmt.format_delta_p(self.delta_p)}",
            f"improved pairs     {fmt.format_pairs(self.improved_pairs, self.n_pairs)}",
            f"mean NLL diff D    {fmt.format_nll_diff(self.nll_diff_mean)}",
            f"{f'{self.bootstrap.confidence_level * 100:g}% interval':<19}"
            f"{fmt.format_interval(*self.bootstrap.confidence_interval)} (document bootstrap, "
            f"{self.bootstrap.method}, B = {fmt.format_count(self.bootstrap.n_resamples)}, seed {self.bootstrap.seed})",
            f"wins               {fmt.format_count(self.win.wins)} of {fmt.format_count(self.win.n_docs)} "
            f"({fmt.format_percent(self.win.win_rate)}; {level_text} Wilson interval "
            f"{fmt.format_percent_interval(self.win.confidence_interval(self.bootstrap.confidence_level))})",
        ]
        lines += [f"note: {note}" for note in self.notes]
        lines += ["", "inputs:"]
        for side in ("baseline", "variant"):
            for seed, source, sha in zip(base.seeds, self.sources[side], self.sources[f"{side}_sha256"]):
                lines.append(f"  {side} seed {seed}: {source} (sha256 {sha[:12]})")
        return "\n".join(lines)


def compare(paired: PairedLosses, *, n_resamples: int = 2000, confidence_level: float = 0.95, seed: int = 0,
            method: str = "percentile", progress: bool | None = False) -> Comparison:
    """Assemble the paired comparison of `paired.variant` against `paired.baseline`."""
    n_bytes = paired.doc_columns["n_bytes"].to_numpy() if "n_bytes" in paired.doc_columns else None
    baseline = metrics.arm_summary(paired.baseline_arm, paired.seeds, paired.baseline, paired.n_targets, n_bytes)
    variant = metrics.arm_summary(paired.variant_arm, paired.seeds, paired.variant, paired.n_targets, n_bytes)
    differences = metrics.document_differences(paired.baseline, paired.variant)
    return Comparison(
        baseline=baseline,
        variant=variant,
        delta_p=metrics.delta_p(baseline.ppl_mean, variant.ppl_mean),
        improved_pairs=metrics.improved_pairs(baseline.ppl, variant.ppl),
        n_pairs=paired.n_pairs,
        nll_diff_mean=metrics.nll_diff_mean(baseline.nll, variant.nll),
        bootstrap=document_bootstrap(differences, paired.n_targets, n_resamples=n_resamples,
                                     confidence_level=confidence_level, seed=seed, method=method, progress=progress),
        win=metrics.document_wins(paired.baseline, paired.variant, paired.n_targets),
        pairing_notes=paired.notes,
        sources=paired.sources,
    )
