"""Render report data (`gatedv_stats.reporting.model`) through `reports/templates/` as HTML, Markdown or LaTeX.

HTML is one offline file: the Vega / Vega-Lite / vega-embed bundle from `vl_convert` is inlined once and each
chart's Vega-Lite specification is embedded as JSON. Markdown and LaTeX refer to figures written beside the
report (`<name>_figures/*.svg` / `*.pdf`, rendered by `vl_convert`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jinja2
import markupsafe

from gatedv_stats.analysis.experiment import AnalysisSettings, analyze_experiment
from gatedv_stats.analysis.ledger import read_history
from gatedv_stats.core.atomic import write_bytes_atomic, write_text_atomic
from gatedv_stats.core.errors import ParameterError
from gatedv_stats.core.outputs import check_not_an_input, check_output_file, check_path_given
from gatedv_stats.io.discovery import discover_inputs
from gatedv_stats.io.runfiles import SkippedFile
from gatedv_stats.io.scorefiles import score_schema
from gatedv_stats.reporting import plots
from gatedv_stats.reporting.build import build_report
from gatedv_stats.reporting.model import ReportData, Table
from gatedv_stats.reporting.sections.comparison import left_out_notes

FORMATS = {"html": ".html", "md": ".md", "latex": ".tex"}
_FIGURE_KIND = {"md": "svg", "latex": "pdf"}


class Raw(str):
    """Text a template inserts unescaped (file paths inside \\includegraphics, code blocks)."""


def _markdown_escape(value: object) -> str:
    if isinstance(value, Raw):
        return value
    return re.sub(r"([\\`*_<>|])", r"\\\1", "" if value is None else str(value)).replace("\n", " ")


# Longer keys first: "ΔP" and "P̄" (P + combining macron) are whole symbols.
_LATEX_SYMBOLS = {
    "ΔP": r"$\Delta_P$", "P\u0304": r"$\overline{P}$", "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%",
    "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}", "\u2212": "$-$", "±": r"$\pm$", "×": r"$\times$", "Δ": r"$\Delta$",
    "≥": r"$\geq$", "≤": r"$\leq$", "<": r"\textless{}", ">": r"\textgreater{}", "→": r"$\rightarrow$",
    "≈": r"$\approx$", "·": r"$\cdot$", "`": r"\textasciigrave{}", "--": "-{}-",
}
# Greek letters (σ-gate, λ-sweep), which pdflatex's text fonts lack, as math; a capital without a LaTeX command of
# its own is its Latin twin (Α → A).
_GREEK = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu", "nu",
          "xi", "omicron", "pi", "rho", "varsigma", "sigma", "tau", "upsilon", "phi", "chi", "psi", "omega")
_LATIN_CAPITALS = {"alpha": "A", "beta": "B", "epsilon": "E", "zeta": "Z", "eta": "H", "iota": "I", "kappa": "K",
                   "mu": "M", "nu": "N", "omicron": "O", "rho": "P", "tau": "T", "chi": "X"}
# After the report's own symbols, which keep their form and their order ("ΔP" before "Δ"): α..ω and Α..Ω (U+03B1..,
# U+0391..; U+03A2 is unassigned).
for _offset, _name in enumerate(_GREEK):
    _LATEX_SYMBOLS.setdefault(chr(0x3B1 + _offset), "$o$" if _name == "omicron" else f"$\\{_name}$")
    if _name != "varsigma":
        _LATEX_SYMBOLS.setdefault(chr(0x391 + _offset), _LATIN_CAPITALS.get(_name, f"$\\{_name.capitalize()}$"))
# Scanned left to right; at each place the first symbol in the table's order that starts there is replaced.
_LATEX_PATTERN = re.compile("|".join(map(re.escape, _LATEX_SYMBOLS)))


def latex_escape(value: object) -> str:
    """Text safe inside a LaTeX document, with the report's symbols as math ("−2.03%" → "$-$2.03\\%")."""
    if isinstance(value, Raw):
        return value
    return _LATEX_PATTERN.sub(lambda match: _LATEX_SYMBOLS[match.group()], "" if value is None else str(value))


# Each format's Jinja options: HTML autoescaped, Markdown and LaTeX through their escapes (LaTeX with \BLOCK{…} and
# \VAR{…} delimiters: Jinja's own clash with TeX's braces).
_JINJA_OPTIONS: dict[str, dict[str, Any]] = {
    "html": {"autoescape": True},
    "md": {"finalize": _markdown_escape},
    "latex": {"finalize": latex_escape, "block_start_string": r"\BLOCK{", "block_end_string": "}",
              "variable_start_string": r"\VAR{", "variable_end_string": "}", "comment_start_string": r"\#{",
              "comment_end_string": "}", "trim_blocks": True, "lstrip_blocks": True},
}


# A space after one of these binds it to what follows ("p = 0.03", "59.1 ± 0.5"); one before them, to what precedes
# ("1.52 → 1.51" wraps after the arrow).
_BINDS_NEXT = "±=≤≥<>× "
_BINDS_PREVIOUS = _BINDS_NEXT + "→"


def html_cell(text: str) -> markupsafe.Markup:
    """A table cell's text for the HTML report, which wraps it only between its parts (each in a span that does not
    wrap): at a space outside brackets, inside parentheses only after a comma, and not beside an operator.
    "[−0.05, 0.01]", "56.180 ± 0.462" and "(min 0.25)" stay whole; "3/3, p = 0.125" may wrap after the comma and "no
    detectable difference" between its words. A cell of one part is its text alone."""
    parts, start, brackets, parentheses = [], 0, 0, 0
    for at, char in enumerate(text):
        brackets += (char == "[") - (char == "]")
        parentheses += (char == "(") - (char == ")")
        if char != " " or not 0 < at < len(text) - 1 or brackets > 0 or (parentheses > 0 and text[at - 1] != ","):
            continue
        if text[at - 1] not in _BINDS_NEXT and text[at + 1] not in _BINDS_PREVIOUS:
            parts.append(text[start:at])
            start = at + 1
    parts.append(text[start:])
    if len(parts) == 1:
        return markupsafe.escape(text)
    return markupsafe.Markup(" ").join(markupsafe.Markup('<span class="part">{}</span>').format(part) for part in parts)


@functools.cache
def _environment(fmt: str) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("reports", "templates"), undefined=jinja2.StrictUndefined,
                             **_JINJA_OPTIONS[fmt])
    env.filters.update(raw=Raw, code=Raw, cell=html_cell)  # unescaped text in Markdown and LaTeX; HTML cells
    return env


def tables_html(tables: Sequence[Table]) -> str:
    """Report tables as the HTML report shows them, without the page around them (a result in a notebook)."""
    template = _environment("html").get_template("table.html.j2")
    return "".join(template.render(table=table, cell_parts=False) for table in tables).strip()


@functools.lru_cache(maxsize=1)
def vega_bundle() -> str:
    """vega, vega-lite and vega-embed as one classic script (defines window.vegaEmbed), from vl_convert.

    Building it takes seconds, so it is cached on disk per vl-convert version.
    """
    import vl_convert

    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    cache_dir = Path(os.environ.get("GATEDV_CACHE_DIR") or Path(base) / "gatedv-stats")
    # vl_convert's stub omits __version__ and marks javascript_bundle's optional snippet as required.
    cached = cache_dir / f"vega-bundle-vl-convert-{vl_convert.__version__}.js"  # type: ignore[attr-defined]
    with contextlib.suppress(OSError, UnicodeDecodeError):
        return cached.read_text(encoding="utf-8")
    bundle = vl_convert.javascript_bundle()  # type: ignore[call-arg]
    bundle = bundle.replace("</script", "<\\/script")  # cannot end the <script> early
    with contextlib.suppress(OSError):  # a read-only home only costs the rebuild next time
        write_text_atomic(cached, bundle)
    return bundle


def _script_json(spec: dict) -> str:
    """JSON that is safe inside a <script type="application/json"> element."""
    text = json.dumps(spec, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_report(report: ReportData, out: Path, fmt: str) -> Path:
    """Write `report` to `out` in `fmt` ("html", "md", "latex"), figures included; returns the path written."""
    if fmt not in FORMATS:
        raise ParameterError("fmt", f"{{fmt}} {fmt}: expected one of {', '.join(FORMATS)}", leading=False)
    template = _environment(fmt).get_template(f"report{FORMATS[fmt]}.j2")
    if fmt == "html":
        write_text_atomic(out, template.render(
            report=report, vega_bundle=vega_bundle() if report.figures else "", cell_parts=True,
            figure_json={figure.key: _script_json(plots.page_spec(figure.spec)) for figure in report.figures}))
        return out
    import vl_convert

    folder = out.with_name(out.stem + "_figures")
    kind = _FIGURE_KIND[fmt]
    # figure key -> its file beside the report, relative to it
    figure_files = {figure.key: f"{folder.name}/{figure.key}.{kind}" for figure in report.figures}
    for figure in report.figures:
        drawn = getattr(vl_convert, f"vegalite_to_{kind}")(figure.spec)  # SVG text, PDF bytes
        write_bytes_atomic(out.parent / figure_files[figure.key], drawn.encode("utf-8") if kind == "svg" else drawn)
    write_text_atomic(out, template.render(report=report, figure_files=figure_files))
    # an earlier report's figures that this one no longer shows
    for path in set(folder.glob(f"*.{kind}")) - {out.parent / name for name in figure_files.values()}:
        path.unlink(missing_ok=True)
    return out


def default_output(inputs: list[Path], fmt: str) -> Path:
    """report.<ext> inside the single input directory, else in the current directory."""
    folder = Path(inputs[0]) if len(inputs) == 1 and Path(inputs[0]).is_dir() else Path()
    return folder / f"report{FORMATS.get(fmt, '')}"


def write_report(inputs: list[Path], out: str | os.PathLike[str] | None, fmt: str | None,
                 settings: AnalysisSettings = AnalysisSettings(), *, skipped: list[SkippedFile] | None = None,
                 left_out: list[str] | None = None, workers: int | None = None,
                 ledger: str | os.PathLike[str] | None = None) -> Path:
    """Discover runs under `inputs`, analyze them once and write the report (`out` None: see `default_output`;
    a directory: report.<ext> inside it). `fmt` None: the format `out`'s name ends in (.html, .md, .tex), else
    html; a format other than the one `out` is named for is refused. `skipped`: see `discover_inputs`; `left_out`
    (a list) receives a line for each comparison with the reference the report leaves out, and why; `workers`:
    see `analyze_experiment` (default: a large experiment's comparisons on one process per CPU); `ledger`: a research
    ledger whose history the report shows (its chain checked)."""
    if fmt is not None and fmt not in FORMATS:
        raise ParameterError("fmt", f"{{fmt}} {fmt}: expected one of {', '.join(FORMATS)}", leading=False)
    if out is not None:
        check_path_given(out, "--out")
        out = Path(out)
    named = None if out is None else next((name for name, suffix in FORMATS.items()
                                           if suffix == out.suffix.lower() and not out.is_dir()), None)
    if fmt is not None and out is not None and named not in (None, fmt):
        raise ParameterError("out", f"{out} ends in {out.suffix}, the {named} format's name, but {{fmt}} is {fmt}; "
                             f"name it *{FORMATS[fmt]} or give {{fmt}} {named}", ("fmt",))
    fmt = fmt or named or "html"
    out = default_output(inputs, fmt) if out is None else out
    if out.is_dir():
        out = out / f"report{FORMATS[fmt]}"
    check_output_file(out, "--out")
    # a named metric may be a score table's, which only its name tells apart from any other table
    scores = score_schema(settings.metric, settings.higher_is_better) if settings.metric else None
    found = discover_inputs(inputs, skipped=skipped, scores=scores)
    read = [Path(file.path) for file in found.files] + [Path(file.path) for file in found.skipped]
    read += [] if ledger is None else [Path(ledger)]
    check_not_an_input(out, read + [path.with_name(path.name + ".json") for path in read], "--out")  # + sidecars
    history = None if ledger is None else read_history(ledger)
    analysis = analyze_experiment(found, settings, workers=workers)
    if left_out is not None:
        left_out += left_out_notes(analysis)
    return render_report(build_report(analysis, history), out, fmt)
