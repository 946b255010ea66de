"""The HTML report opened in headless Chromium with the network off: every chart renders, no JavaScript error, and
at 1,300 px every table and figure fits the text column."""

from __future__ import annotations

import html
import json
import re
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from experiments import small_experiment, write_curves
from gatedv_stats.reporting.render import html_cell

OFFLINE_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
    "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
    "--virtual-time-budget=20000",  # let every vegaEmbed promise settle before the DOM is read
]


def chromium(program: str, page: Path, profile: Path, *extra: str) -> str:
    """Run headless Chromium (Debian's `chromium` at `program`) on a local page, offline; returns stdout."""
    done = subprocess.run([program, *OFFLINE_FLAGS, f"--user-data-dir={profile}", *extra, page.as_uri()],
                          capture_output=True, text=True, timeout=180, check=True)
    return done.stdout


def render_status(dom: str) -> dict:
    match = re.search(r'<p id="gatedv-render-status"([^>]*)>([^<]*)</p>', dom)
    assert match, "the page has its render-status line"
    attributes = dict(re.findall(r'data-([a-z]+)="([^"]*)"', match.group(1)))
    return {**attributes, "text": match.group(2)}


def chart_keys(html: str) -> list[str]:
    return re.findall(r'<div class="chart" id="([^"]+)" data-vega-spec=', html)


# Once the page reports every chart rendered, writes each table's and figure's width beside its container's into
# <pre id="gatedv-layout"> (the text column is the body's content box).
LAYOUT_PROBE = """<script>
(function measure() {
  var status = document.getElementById("gatedv-render-status");
  if (status.dataset.rendered !== status.dataset.charts && !status.dataset.errors) { setTimeout(measure, 50); return; }
  var style = getComputedStyle(document.body);
  var layout = {column: document.body.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight),
                tables: [], figures: []};
  document.querySelectorAll("table").forEach(function (table) {
    layout.tables.push({id: table.id, width: table.scrollWidth, container: table.parentElement.clientWidth,
                        scrolls: table.parentElement.scrollWidth > table.parentElement.clientWidth});
  });
  document.querySelectorAll("[data-vega-spec]").forEach(function (chart) {
    var svg = chart.querySelector("svg");
    layout.figures.push({id: chart.id, width: svg ? svg.getBoundingClientRect().width : 0});
  });
  var out = document.createElement("pre");
  out.id = "gatedv-layout";
  out.textContent = JSON.stringify(layout);
  document.body.appendChild(out);
})();
</script>"""


def layout_at(program: str, page: Path, profile: Path, width: int) -> dict:
    """The widths LAYOUT_PROBE measures in a copy of `page` shown `width` px wide."""
    head, _, tail = page.read_text(encoding="utf-8").rpartition("</body>")
    probed = page.with_name(f"{page.stem}-layout.html")
    probed.write_text(head + LAYOUT_PROBE + "</body>" + tail, encoding="utf-8")
    dom = chromium(program, probed, profile, f"--window-size={width},2000", "--dump-dom")
    match = re.search(r'<pre id="gatedv-layout">([^<]*)</pre>', dom)
    assert match, f"the layout probe ran: {render_status(dom)}"
    return json.loads(html.unescape(match.group(1)))


@pytest.fixture(scope="module")
def html_report(tmp_path_factory) -> Path:
    root = small_experiment(tmp_path_factory.mktemp("html"))
    write_curves(root / "runs" / "curve.csv", {"baseline": 59.0, "gatedv": 57.9}, [0, 1, 2, 3, 4], 0.0048)
    out = root / "report.html"
    result = CliRunner().invoke(app, ["report", str(root), "--format", "html", "--samples", "100", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.slow
def test_html_is_one_offline_file_with_the_bundle_once(html_report):
    html = html_report.read_text(encoding="utf-8")
    assert html.count("window.vegaEmbed=") == 1
    markup = re.sub(r"(<script[^>]*>).*?</script>", r"\1</script>", html, flags=re.S)  # tags, not JS strings
    assert markup.count("<script") == 3 + 8  # error hook, bundle, embed loop + one JSON spec per chart
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", markup), "nothing is loaded from elsewhere"
    assert len(chart_keys(html)) == 8  # 2 held-out, 2 development, ΔP curve, final quarter, 2 forest plots
    assert "59.118 ± 0.530" in html and "−2.03%" in html


@pytest.mark.slow
def test_every_chart_renders_offline_without_javascript_errors(html_report, tmp_path, chromium_program):
    html = html_report.read_text(encoding="utf-8")
    dom = chromium(chromium_program, html_report, tmp_path / "profile", "--dump-dom")
    status = render_status(dom)
    keys = chart_keys(html)
    assert status["errors"] == "", status
    assert status["charts"] == status["rendered"] == str(len(keys)), status
    for key in keys:
        start = dom.index(f'id="{key}"')
        assert "<svg" in dom[start:dom.index("<figcaption", start)], f"chart {key} has no SVG"
    screenshot = tmp_path / "report.png"
    chromium(chromium_program, html_report, tmp_path / "profile", "--window-size=1280,4000",
             f"--screenshot={screenshot}")
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and screenshot.stat().st_size > 50_000


@pytest.mark.slow
def test_a_broken_chart_is_reported_by_the_page(html_report, tmp_path, chromium_program):
    """The check above can fail: a spec vega-embed rejects shows up as an error and no rendered charts."""
    html = html_report.read_text(encoding="utf-8")
    key = chart_keys(html)[0]
    broken = re.sub(rf'(<script type="application/json" id="{key}-spec">)[^<]*', r'\1{"mark": 42}', html, count=1)
    page = tmp_path / "broken.html"
    page.write_text(broken, encoding="utf-8")
    status = render_status(chromium(chromium_program, page, tmp_path / "profile", "--dump-dom"))
    assert status["rendered"] == "0" and status["errors"] != "", status


@pytest.mark.slow
def test_at_1300_px_every_table_fits_the_column_and_every_figure_fills_it(html_report, tmp_path, chromium_program):
    """No table scrolls sideways (the interval columns are in sight); each figure is as wide as the text column."""
    layout = layout_at(chromium_program, html_report, tmp_path / "profile", 1300)
    column = layout["column"]
    assert column >= 1000, layout  # the page's 76rem column, not a narrow fallback
    wide = [table for table in layout["tables"] if table["width"] > table["container"] or table["scrolls"]]
    assert not wide, f"tables wider than the {column:.0f} px column: {wide}"
    assert {"table-comparison-heldout", "table-comparison-dev", "table-reviewer-heldout", "table-reviewer-dev"} <= {
        table["id"] for table in layout["tables"]}
    assert len(layout["figures"]) == len(chart_keys(html_report.read_text(encoding="utf-8")))
    for figure in layout["figures"]:  # a faceted chart's panels fill all but a pixel per panel
        assert 500 <= figure["width"] and column - 8 <= figure["width"] <= column, (column, figure)


@pytest.mark.parametrize(("text", "parts"), [
    ("[−0.045299, −0.017216]", ["[−0.045299, −0.017216]"]),
    ("56.180 ± 0.462", ["56.180 ± 0.462"]),
    ("3/3, p = 0.125", ["3/3,", "p = 0.125"]),
    ("0.25 (min 0.25)", ["0.25", "(min 0.25)"]),
    ("1.5090 → 1.4972", ["1.5090 →", "1.4972"]),
    ("no detectable difference", ["no", "detectable", "difference"]),
    ("8 (0, 1, 2)", ["8", "(0,", "1,", "2)"]),
    ("a<b & c", ["a<b", "&", "c"]),
])
def test_a_table_cell_wraps_only_between_its_parts(text, parts):
    markup = str(html_cell(text))
    found = re.findall(r'<span class="part">([^<]*)</span>', markup) or [markup]
    assert [html.unescape(part) for part in found] == parts
    assert html.unescape(re.sub(r"<[^>]+>", "", markup)) == text  # the text itself unchanged
