"""``report.html``: the whole report in one file that opens anywhere, offline.

The text and tables are ``report.md``'s (the same renderer, turned into HTML here), and
every plot of the PNG report is an interactive chart: latency CDFs, throughput and p95
latency over time, the server's timeline, the rate sweep, and (when the run has them)
TTFT and E2E by turn and GPU power. The charts' data, script and style are inlined
(``html_assets/``), so the file needs no network and no other file.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from loadtest.analysis.metrics import request_tpot
from loadtest.analysis.records import RequestRecord
from loadtest.analysis.slo import Metric
from loadtest.analysis.summary import Summary
from loadtest.reports.base import measured_ok
from loadtest.reports.markdown import render_markdown
from loadtest.reports.sections import turn_label

ASSETS = Path(__file__).resolve().parent / "html_assets"
HTML_FILE = "report.html"
CDF_POINTS = 2000  # a CDF of more samples is drawn through this many quantiles


def cdf_points(values: Sequence[float] | np.ndarray, scale: float = 1e3) -> list[list[float]]:
    """``[[value, fraction <= value], ...]`` of some samples (at most :data:`CDF_POINTS`)."""
    data = np.sort(np.asarray(values, dtype=float)) * scale
    n = len(data)
    if n == 0:
        return []
    if n <= CDF_POINTS:
        return [[float(v), (i + 1) / n] for i, v in enumerate(data)]
    q = np.linspace(0.0, 1.0, CDF_POINTS)
    return [[float(v), float(f)] for v, f in zip(np.quantile(data, q), q)]


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1e3


def _thresholds(summary: Summary, metric: Metric) -> list[dict]:
    return [{"x": o.threshold * 1e3, "label": f"SLO {o.describe()}"} for o in summary.config.slos if o.metric is metric]


def chart_specs(summary: Summary, records: Sequence[RequestRecord]) -> dict[str, dict]:
    """Every chart of the report, by id (the data the page's script draws)."""
    charts: dict[str, dict] = {}
    stages = summary.stages
    per_stage = [(s.label if len(stages) > 1 else "measured ok", measured_ok(summary, s, records)) for s in stages]
    panels = (
        ("ttft", "TTFT", Metric.TTFT, lambda rs: [r.ttft_s for r in rs if r.ttft_s is not None], "requests"),
        ("itl", "ITL (every inter-chunk gap)", Metric.ITL, lambda rs: [g for r in rs for g in r.itl_s], "gaps"),
        ("tpot", "TPOT", Metric.TPOT, lambda rs: [t for r in rs if (t := request_tpot(r)) is not None], "requests"),
        ("e2e", "E2E", Metric.E2E, lambda rs: [r.e2e_s for r in rs], "requests"),
    )
    for key, title, metric, values, unit in panels:
        series = [{"name": f"{label} (n={len(v)})", "points": cdf_points(v), "step": True}
                  for label, ok in per_stage if (v := values(ok))]  # fmt: skip
        charts[f"cdf-{key}"] = {"title": f"{title} CDF", "x": {"label": "ms", "log": False},
                                "y": {"label": f"fraction of {unit}", "log": False, "range": [0, 1.02]},
                                "series": series, "vlines": _thresholds(summary, metric)}  # fmt: skip
    throughput, latency, bands = [], [], []
    for stage in stages:
        bins = stage.timeline
        if not bins:
            continue
        width = bins[1].t - bins[0].t if len(bins) > 1 else 1.0
        t = [stage.offset_s + b.t + width / 2 for b in bins]
        suffix = f" ({stage.label})" if len(stages) > 1 else ""
        throughput.append({"name": f"output tok/s{suffix}", "points": [[x, b.output_tokens_per_s] for x, b in zip(t, bins)],
                           "markers": True})  # fmt: skip
        latency.append({"name": f"TTFT p95{suffix}", "points": [[x, _ms(b.ttft_p95)] for x, b in zip(t, bins)],
                        "markers": True})  # fmt: skip
        latency.append({"name": f"E2E p95{suffix}", "points": [[x, _ms(b.e2e_p95)] for x, b in zip(t, bins)],
                        "markers": True, "dash": True})  # fmt: skip
        bands.append({"from": stage.offset_s + stage.window.start_s, "to": stage.offset_s + stage.window.end_s,
                      "label": "measured"})  # fmt: skip
    x_run = {"label": "seconds since the run started", "log": False}
    charts["timeline-throughput"] = {"title": "Throughput (streamed output tokens per second; shaded: measured window)",
                                     "x": x_run, "y": {"label": "tokens/s", "log": False}, "series": throughput,
                                     "bands": bands}  # fmt: skip
    charts["timeline-latency"] = {"title": "p95 latency of requests completing in each bin", "x": x_run,
                                  "y": {"label": "ms", "log": False}, "series": latency, "bands": bands}
    server = summary.server.timeline
    if server:
        fields = (("queue_depth", "queue depth"), ("waiting", "waiting"), ("running", "running"),
                  ("in_flight", "gateway in flight"), ("replicas_ready", "ready replicas"))  # fmt: skip
        series = [{"name": label, "points": [[s.t, getattr(s, f)] for s in server]}
                  for f, label in fields if any(getattr(s, f) is not None for s in server)]  # fmt: skip
        if any(s.kv_cache_usage is not None for s in server):
            series.append({"name": "KV cache %", "dash": True, "points": [
                [s.t, None if s.kv_cache_usage is None else s.kv_cache_usage * 100] for s in server]})
        charts["server"] = {"title": "Server (scraped from /metrics)", "x": x_run,
                            "y": {"label": "requests / replicas / %", "log": False}, "series": series}
    if summary.sweep is not None:
        points = summary.sweep.points
        rates = [p.offered_rate for p in points]
        lat = [{"name": name, "markers": True, "points": [[r, _ms(getattr(p, f))] for r, p in zip(rates, points)]}
               for name, f in (("TTFT p95", "ttft_p95"), ("TPOT p95", "tpot_p95"), ("E2E p95", "e2e_p95"))]
        hlines = [{"y": o.threshold * 1e3, "label": f"SLO {o.describe()}"} for o in summary.config.slos
                  if o.metric in (Metric.TTFT, Metric.TPOT, Metric.E2E)]  # fmt: skip
        charts["sweep-latency"] = {"title": "p95 latency vs offered rate (dashed: SLO)",
                                   "x": {"label": "offered rate (req/s)", "log": False},
                                   "y": {"label": "ms", "log": True}, "series": lat, "hlines": hlines}
        best = summary.sweep.max_rate_meeting_slo
        charts["sweep-goodput"] = {
            "title": "Goodput vs offered rate", "x": {"label": "offered rate (req/s)", "log": False},
            "y": {"label": "req/s", "log": False},
            "series": [{"name": "offered", "dash": True, "points": [[r, r] for r in rates]},
                       {"name": "achieved", "markers": True, "points": [[r, p.achieved_rate] for r, p in zip(rates, points)]},
                       {"name": "goodput", "markers": True, "points": [[r, p.goodput_rps] for r, p in zip(rates, points)]}],
            "vlines": [] if best is None else [{"x": best, "label": f"best {best:g} req/s"}],
        }  # fmt: skip
    turns = [(s, s.sessions) for s in stages if s.sessions is not None]
    if turns:
        series = []
        for stage, report in turns:
            suffix = f" ({stage.label})" if len(stages) > 1 else ""
            for name, get in (("TTFT p50", lambda t: t.ttft.p50), ("TTFT p95", lambda t: t.ttft.p95),
                              ("E2E p50", lambda t: t.e2e.p50)):  # fmt: skip
                series.append({"name": name + suffix, "markers": True, "dash": name.startswith("E2E"),
                               "points": [[t.turn + 1, _ms(get(t))] for t in report.by_turn]})
        labels = ", ".join(turn_label(t.turn, t.pooled) for t in turns[0][1].by_turn)
        charts["turns"] = {"title": f"Latency by turn (turns {labels})", "x": {"label": "turn", "log": False},
                           "y": {"label": "ms", "log": False}, "series": series}
    if summary.gpu is not None and summary.gpu.timeline:
        g = summary.gpu.timeline
        series = [{"name": "power (W, all GPUs)", "points": [[s.t, s.power_w] for s in g]}]
        if any(s.utilization is not None for s in g):
            series.append({"name": "utilisation %", "dash": True,
                           "points": [[s.t, None if s.utilization is None else s.utilization * 100] for s in g]})
        charts["gpu"] = {"title": "GPUs (telemetry)", "x": x_run, "y": {"label": "W / %", "log": False},
                         "series": series, "bands": bands}
    return charts


_INLINE = (
    (re.compile(r"`([^`]+)`"), r"<code>\1</code>"),
    (re.compile(r"\*\*([^*]+)\*\*"), r"<b>\1</b>"),
)


def _inline(text: str) -> str:
    out = html.escape(text, quote=False)
    for pattern, repl in _INLINE:
        out = pattern.sub(repl, out)
    return out


def markdown_html(text: str) -> str:
    """The HTML of the Markdown ``report.md`` uses: headings, paragraphs, bullet lists,
    pipe tables, ``code`` and **bold**."""
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
        elif line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            out.append(f"<h{level}>{_inline(line[level:].strip())}</h{level}>")
            i += 1
        elif line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append([c.strip() for c in lines[i].strip().strip("|").split("|")])
                i += 1
            numeric = [c.endswith(":") for c in rows[1]] if len(rows) > 1 else []
            cell = ('<td class="num">', "<td>")
            head = "".join(f"<th>{_inline(c)}</th>" for c in rows[0])
            body = "".join("<tr>" + "".join(cell[not (k < len(numeric) and numeric[k])] + _inline(c) + "</td>"
                                            for k, c in enumerate(r)) + "</tr>" for r in rows[2:])
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif line.startswith("- "):
            items = []
            while i < len(lines) and lines[i].startswith("- "):
                items.append(f"<li>{_inline(lines[i][2:])}</li>")
                i += 1
            out.append(f"<ul>{''.join(items)}</ul>")
        else:
            para = []
            while i < len(lines) and lines[i].strip() and not lines[i].startswith(("#", "|", "- ")):
                para.append(lines[i])
                i += 1
            out.append(f"<p>{_inline(' '.join(para))}</p>")
    return "\n".join(out)


def _finite(value):
    """``value`` with NaN and infinities as ``None`` (JSON has neither)."""
    if isinstance(value, float):
        return value if np.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def render_html(summary: Summary, records: Sequence[RequestRecord]) -> str:
    """The whole self-contained page."""
    charts = chart_specs(summary, records)
    body = markdown_html(render_markdown(summary, ()))
    divs = "\n".join(f'<div class="chart" data-chart="{key}"></div>' for key in charts)
    data = json.dumps(_finite({"charts": charts}), separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    title = html.escape(f"loadtest report{': ' + summary.config.label if summary.config.label else ''}")
    script = (ASSETS / "report.js").read_text(encoding="utf-8")
    style = (ASSETS / "report.css").read_text(encoding="utf-8")
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title>\n"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<style>{style}</style></head>\n"
            f"<body>\n{body}\n<h2>Plots</h2>\n<p class=\"hint\">Hover for values; click a legend entry to hide or "
            f"show it; drag across a chart to zoom, double-click to reset.</p>\n<div class=\"charts\">\n{divs}\n</div>\n"
            f"<script type=\"application/json\" id=\"report-data\">{data}</script>\n<script>{script}</script>\n"
            "</body></html>\n")  # fmt: skip


class HtmlReport:
    """``report.html``: one self-contained file with interactive plots (opens offline)."""

    kind = "html"

    def write(self, summary: Summary, records: Sequence[RequestRecord], out_dir: Path) -> list[Path]:
        path = out_dir / HTML_FILE
        path.write_text(render_html(summary, records), encoding="utf-8")
        return [path]
