"""report.html in a real headless Chromium (Debian's chromium, scripts/setup-test-tools):
opened from disk with no network, every chart drawn, no script or console error, no
request for anything but the file itself; and its charts respond to a click."""

from __future__ import annotations

import json

from loadtest.reports import write_reports
from loadtest.reports.html import CDF_POINTS, cdf_points, chart_specs, markdown_html
from tests.unit.loadtest.reports.browser import open_page
from tests.unit.loadtest.reports.every_section import every_section

PROBE = """(() => {
  const charts = [...document.querySelectorAll('div.chart')];
  const first = charts[0], before = first.querySelectorAll('path.line').length;
  first.querySelector('.legend .item').dispatchEvent(new MouseEvent('click', {bubbles: true}));
  return JSON.stringify({
    rendered: document.body.getAttribute('data-charts-rendered'),
    charts: charts.map(c => [c.getAttribute('data-chart'), c.getAttribute('data-rendered'),
                              c.querySelectorAll('path.line').length]),
    before, after: first.querySelectorAll('path.line').length,
    tables: document.querySelectorAll('table').length,
    text: document.body.innerText,
  });
})()"""


def test_the_html_report_opens_offline_and_draws_every_chart(tmp_path):
    summary, records = every_section()
    write_reports(summary, records, tmp_path, ["html"])
    page = tmp_path / "report.html"
    run = open_page(page.as_uri(), PROBE)
    assert run.exceptions == [] and run.console_errors == []
    assert run.requests == [page.as_uri()], "the page fetched something besides itself"
    seen = json.loads(run.value)
    expected = set(chart_specs(summary, records))
    assert {"cdf-ttft", "cdf-e2e", "timeline-throughput", "server", "sweep-latency", "sweep-goodput", "turns",
            "gpu"} <= expected
    assert {c[0] for c in seen["charts"]} == expected and int(seen["rendered"]) == len(expected)
    assert all(rendered == "true" and lines > 0 for _, rendered, lines in seen["charts"])
    assert seen["after"] == seen["before"] - 1  # the legend hides its series
    assert seen["tables"] >= 6  # latency, throughput, SLO and by-turn tables of each stage, the sweep
    for words in ("Agent steps (fan-out)", "Client cancellation", "output tokens per joule", "Rate sweep", "Per model"):
        assert words in seen["text"]


def test_a_script_error_in_the_page_is_caught(tmp_path):
    """The browser check bites: a page whose chart data is missing raises, and is seen."""
    page = tmp_path / "broken.html"
    page.write_text('<html><body><div class="chart" data-chart="x"></div>'
                    '<script type="application/json" id="report-data">{"charts": {}}</script>'
                    f"<script>{(__import__('loadtest.reports.html', fromlist=['ASSETS']).ASSETS / 'report.js').read_text()}"
                    "</script></body></html>")  # fmt: skip
    run = open_page(page.as_uri(), "document.body.getAttribute('data-charts-rendered')")
    assert any("no data for chart x" in e for e in run.exceptions)
    assert run.value is None


def test_cdfs_of_many_samples_are_drawn_through_quantiles():
    small = cdf_points([0.003, 0.001, 0.002])
    assert small == [[1.0, 1 / 3], [2.0, 2 / 3], [3.0, 1.0]]
    big = cdf_points(list(range(100_000)), scale=1.0)
    assert len(big) == CDF_POINTS and big[0] == [0.0, 0.0] and big[-1] == [99_999.0, 1.0]


def test_markdown_tables_become_html_tables():
    text = markdown_html("# T\n\n| a | b |\n| --- | ---: |\n| `x` | **2** |\n\n- one\n- two\n\nplain <tag>")
    assert "<h1>T</h1>" in text and '<td class="num"><b>2</b></td>' in text and "<code>x</code>" in text
    assert "<li>two</li>" in text and "plain &lt;tag&gt;" in text
