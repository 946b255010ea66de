"""Jinja templates for the gatedv reports (HTML, Markdown, LaTeX)."""
