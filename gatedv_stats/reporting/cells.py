"""Table cells shared by several report sections."""

from __future__ import annotations

from gatedv_stats.core.formatting import format_delta_p, format_pairs, format_ppl
from gatedv_stats.stats.metrics import ArmSummary, PairedDelta

NO_REFERENCE = "No reference arm: no loss file has arm 'baseline'; choose one with --reference."
MISSING = "—"


def ppl_text(summary: ArmSummary) -> str:
    """P̄ ± SD over seeds (P̄ alone with one seed, whose SD is NaN)."""
    return format_ppl(summary.ppl_mean, summary.ppl_sd)


def delta_cells(delta: PairedDelta) -> list[str]:
    """ΔP and improved pairs."""
    return [format_delta_p(delta.delta_p), format_pairs(delta.improved, delta.n_pairs)]
