"""The HTML report opened in headless Chromium with the network off: every chart renders, no JavaScript error."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from experiments import small_experiment, write_curves

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
