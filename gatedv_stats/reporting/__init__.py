"""Reports: sections that format analysis results as plain tables and figures, rendered through Jinja templates."""

from gatedv_stats.reporting.render import latex_escape, render_report, write_report

__all__ = ["latex_escape", "render_report", "write_report"]
