"""From an experiment's analysis to the plain report data the templates render: one builder per section."""

from __future__ import annotations

from collections.abc import Callable

from gatedv_stats import __version__
from gatedv_stats.analysis.experiment import ExperimentAnalysis
from gatedv_stats.report.model import ReportData, Section
from gatedv_stats.report.sections.ablations import ablation_section
from gatedv_stats.report.sections.comparison import comparison_section
from gatedv_stats.report.sections.cost import cost_section
from gatedv_stats.report.sections.curves import curves_section
from gatedv_stats.report.sections.inference_swap import inference_swap_section
from gatedv_stats.report.sections.learning_rates import learning_rates_section
from gatedv_stats.report.sections.lr_selection import lr_selection_section
from gatedv_stats.report.sections.provenance import provenance_section
from gatedv_stats.report.sections.reviewer import reviewer_section
from gatedv_stats.report.sections.setup import setup_section
from gatedv_stats.report.sections.verdicts import verdicts_section
from gatedv_stats.runs import natural_key

SECTION_BUILDERS: tuple[Callable[[ExperimentAnalysis], Section], ...] = (
    verdicts_section,
    setup_section,
    lr_selection_section,
    comparison_section,
    ablation_section,
    learning_rates_section,
    inference_swap_section,
    cost_section,
    curves_section,
    reviewer_section,
    provenance_section,
)


def build_report(analysis: ExperimentAnalysis) -> ReportData:
    """Every section's plain data, in report order."""
    arms = sorted({run.arm for run in analysis.inputs.runs}, key=natural_key)
    subtitle = (f"{len(analysis.inputs.runs)} evaluated runs of {len(arms)} arms ({', '.join(arms)}); reference arm: "
                f"{analysis.reference or 'none'}; written by gatedv-stats {__version__}.")
    return ReportData(title="Paired comparison report", subtitle=subtitle, version=__version__,
                      reference=analysis.reference, sections=tuple(builder(analysis) for builder in SECTION_BUILDERS))
