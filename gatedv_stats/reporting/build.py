"""From an experiment's analysis to the plain report data the templates render: one builder per section."""

from __future__ import annotations

from dataclasses import replace

from gatedv_stats import __version__
from gatedv_stats.analysis.experiment import ExperimentAnalysis
from gatedv_stats.analysis.ledger import LedgerHistory
from gatedv_stats.pairing.selection import natural_key
from gatedv_stats.reporting.model import ReportData, Section
from gatedv_stats.reporting.sections.ablations import ablation_section
from gatedv_stats.reporting.sections.comparison import comparison_section
from gatedv_stats.reporting.sections.cost import cost_section
from gatedv_stats.reporting.sections.curves import curves_section
from gatedv_stats.reporting.sections.inference_swap import inference_swap_section
from gatedv_stats.reporting.sections.learning_rates import learning_rates_section
from gatedv_stats.reporting.sections.ledger import ledger_section
from gatedv_stats.reporting.sections.lr_selection import lr_selection_section
from gatedv_stats.reporting.sections.provenance import provenance_section
from gatedv_stats.reporting.sections.reviewer import reviewer_section
from gatedv_stats.reporting.sections.setup import setup_section
from gatedv_stats.reporting.sections.tasks import tasks_section
from gatedv_stats.reporting.sections.verdicts import verdicts_section


def build_report(analysis: ExperimentAnalysis, ledger: LedgerHistory | None = None) -> ReportData:
    """Every section's plain data, in report order; with a research `ledger`, its section before the provenance."""
    runs = analysis.inputs.runs or analysis.inputs.metric_runs  # a report of scores alone counts their runs
    arms = sorted({run.arm for run in runs}, key=natural_key)
    subtitle = (f"{len(runs)} evaluated runs of {len(arms)} arms ({', '.join(arms)}); reference arm: "
                f"{analysis.reference or 'none'}; written by gatedv-stats {__version__}.")
    sections = [
        verdicts_section(analysis), setup_section(analysis), lr_selection_section(analysis),
        comparison_section(analysis),
        *([] if analysis.tasks is None else [tasks_section(analysis)]),  # only when the inputs hold item scores
        ablation_section(analysis), learning_rates_section(analysis), inference_swap_section(analysis),
        cost_section(analysis), curves_section(analysis), reviewer_section(analysis),
        *([] if ledger is None else [ledger_section(ledger)]),  # only when asked for (gatedv report --ledger)
        provenance_section(analysis),
    ]
    return ReportData(title="Paired comparison report", subtitle=subtitle, version=__version__,
                      reference=analysis.reference, sections=_with_unique_keys(sections))


def _with_unique_keys(sections: list[Section]) -> tuple[Section, ...]:
    """Sections whose tables and figures have keys (HTML ids, LaTeX labels, figure file names) used once each:
    names that differ only in punctuation ("a b", "a-b") make the same key, and a repeat gets "-2", "-3", ..."""
    used: set[str] = set()

    def unique(key: str) -> str:
        candidate, count = key, 1
        while candidate in used:
            count += 1
            candidate = f"{key}-{count}"
        used.add(candidate)
        return candidate

    return tuple(replace(section, tables=tuple(replace(table, key=unique(table.key)) for table in section.tables),
                         figures=tuple(replace(figure, key=unique(figure.key)) for figure in section.figures))
                 for section in sections)
