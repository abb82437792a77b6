"""PNG plots: latency CDFs, throughput and p95 over time (with the server timeline), and
for a rate sweep p95 latency and goodput against the offered rate."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from loadtest.analysis.metrics import request_tpot
from loadtest.analysis.records import RequestRecord
from loadtest.analysis.slo import Metric
from loadtest.analysis.summary import Summary
from loadtest.reports.base import measured_ok, verdict_word

CDF_PNG = "latency_cdf.png"
TIMELINE_PNG = "timeline.png"
SWEEP_PNG = "sweep.png"


def plot_names(summary: Summary) -> list[str]:
    """The plot files a summary gets."""
    return [CDF_PNG, TIMELINE_PNG] + ([SWEEP_PNG] if summary.sweep is not None else [])


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _cdf(ax, values: Sequence[float], label: str) -> None:
    data = sorted(v * 1e3 for v in values)
    if not data:
        return
    n = len(data)
    ax.step(data, [(i + 1) / n for i in range(n)], where="post", label=f"{label} (n={n})")


def _title(summary: Summary, title: str) -> str:
    """A figure's title, marked when the figures are simulated."""
    return f"{title} (simulated)" if summary.simulated else title


def _thresholds(summary: Summary, metric: Metric) -> list[float]:
    return [o.threshold for o in summary.config.slos if o.metric is metric]


def plot_cdfs(summary: Summary, records: Sequence[RequestRecord], path: Path) -> None:
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    panels = (
        (axes[0][0], "TTFT", Metric.TTFT, lambda rs: [r.ttft_s for r in rs if r.ttft_s is not None]),
        (axes[0][1], "ITL (every inter-chunk gap)", Metric.ITL, lambda rs: [g for r in rs for g in r.itl_s]),
        (axes[1][0], "TPOT", Metric.TPOT, _tpots),
        (axes[1][1], "E2E", Metric.E2E, lambda rs: [r.e2e_s for r in rs]),
    )
    stages = summary.stages
    per_stage = [
        (stage.label if len(stages) > 1 else "measured ok", measured_ok(summary, stage, records)) for stage in stages
    ]
    for ax, title, metric, values in panels:
        for label, ok in per_stage:
            _cdf(ax, values(ok), label)
        for threshold in _thresholds(summary, metric):
            ax.axvline(threshold * 1e3, color="red", linestyle="--", linewidth=1)
        ax.set_title(title)
        ax.set_xlabel("ms")
        ax.set_ylabel("fraction of requests" if metric is not Metric.ITL else "fraction of gaps")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        if ax.has_data():
            ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(_title(summary, f"Latency CDFs — {summary.config.target.model} @ {summary.config.target.url}"))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _tpots(records: Sequence[RequestRecord]) -> list[float]:
    return [t for r in records if (t := request_tpot(r)) is not None]


def plot_timeline(summary: Summary, path: Path) -> None:
    plt = _pyplot()
    server = summary.server.timeline
    rows = 3 if server else 2
    fig, axes = plt.subplots(rows, 1, figsize=(11, 3.0 * rows), sharex=True)
    thr, lat = axes[0], axes[1]
    for stage in summary.stages:
        bins = stage.timeline
        if not bins:
            continue
        width = bins[1].t - bins[0].t if len(bins) > 1 else 1.0
        t = [stage.offset_s + b.t + width / 2 for b in bins]
        label = f" ({stage.label})" if len(summary.stages) > 1 else ""
        thr.plot(t, [b.output_tokens_per_s for b in bins], label=f"output tok/s{label}", marker=".")
        # markers: completions come in bursts, so many bins are empty (NaN) and lines break
        lat.plot(t, [b.ttft_p95 * 1e3 if b.ttft_p95 is not None else float("nan") for b in bins],
                 label=f"TTFT p95{label}", marker=".")
        lat.plot(t, [b.e2e_p95 * 1e3 if b.e2e_p95 is not None else float("nan") for b in bins],
                 label=f"E2E p95{label}", linestyle="--", marker="x")
        for ax in (thr, lat):
            ax.axvspan(stage.offset_s + stage.window.start_s, stage.offset_s + stage.window.end_s,
                       color="green", alpha=0.06)
    thr.set_ylabel("tokens/s")
    thr.set_title(_title(summary, "Throughput (streamed output tokens per second; shaded: measured window)"))
    lat.set_ylabel("ms")
    lat.set_title("p95 latency of requests completing in each bin")
    for ax in (thr, lat):
        ax.grid(alpha=0.3)
        if ax.has_data():
            ax.legend(fontsize=7, loc="upper left")
    if server:
        ax = axes[2]
        t = [s.t for s in server]
        for field, label in (("queue_depth", "queue depth"), ("waiting", "waiting"), ("running", "running"),
                             ("in_flight", "gateway in flight"), ("replicas_ready", "ready replicas")):
            values = [getattr(s, field) for s in server]
            if any(v is not None for v in values):
                ax.plot(t, [float("nan") if v is None else v for v in values], label=label)
        kv = [s.kv_cache_usage for s in server]
        if any(v is not None for v in kv):
            twin = ax.twinx()
            twin.plot(t, [float("nan") if v is None else v * 100 for v in kv], color="gray", linestyle=":",
                      label="KV cache %")
            twin.set_ylabel("KV cache %")
            twin.set_ylim(0, 100)
            twin.legend(fontsize=7, loc="upper right")
        ax.set_title("Server (scraped from /metrics)")
        ax.set_ylabel("requests / replicas")
        ax.grid(alpha=0.3)
        if ax.has_data():
            ax.legend(fontsize=7, loc="upper left")
    axes[-1].set_xlabel("seconds since the run started")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_sweep(summary: Summary, path: Path) -> None:
    assert summary.sweep is not None
    plt = _pyplot()
    points = summary.sweep.points
    rates = [p.offered_rate for p in points]
    fig, (lat, good) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, getter, metric in (
        ("TTFT p95", lambda p: p.ttft_p95, Metric.TTFT),
        ("TPOT p95", lambda p: p.tpot_p95, Metric.TPOT),
        ("E2E p95", lambda p: p.e2e_p95, Metric.E2E),
    ):
        values = [getter(p) for p in points]
        if any(v is not None for v in values):
            lat.plot(rates, [float("nan") if v is None else v * 1e3 for v in values], marker="o", label=name)
        for threshold in _thresholds(summary, metric):
            lat.axhline(threshold * 1e3, linestyle="--", linewidth=1, color="red")
    lat.set_xlabel("offered rate (req/s)")
    lat.set_ylabel("ms")
    lat.set_yscale("log")
    lat.set_title(_title(summary, "p95 latency vs offered rate (dashed: SLO)"))
    lat.grid(alpha=0.3)
    lat.legend(fontsize=8)
    good.plot(rates, rates, color="gray", linestyle=":", label="offered")
    good.plot(rates, [p.achieved_rate or 0 for p in points], marker="s", label="achieved")
    good.plot(rates, [p.goodput_rps or 0 for p in points], marker="o", label="goodput")
    best = summary.sweep.max_rate_meeting_slo
    if best is not None:
        good.axvline(best, color="green", linestyle="--", label=f"best {best:g} req/s")
    for p in points:
        good.annotate(verdict_word(p.passed, p.valid), (p.offered_rate, p.goodput_rps or 0), fontsize=7,
                      xytext=(3, 3), textcoords="offset points", color="green" if p.passed else "red")
    good.set_xlabel("offered rate (req/s)")
    good.set_ylabel("req/s")
    good.set_title("Goodput vs offered rate")
    good.grid(alpha=0.3)
    good.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


class PlotsReport:
    """PNG plots (matplotlib, Agg backend)."""

    kind = "plots"

    def write(self, summary: Summary, records: Sequence[RequestRecord], out_dir: Path) -> list[Path]:
        paths = [out_dir / CDF_PNG, out_dir / TIMELINE_PNG]
        plot_cdfs(summary, records, paths[0])
        plot_timeline(summary, paths[1])
        if summary.sweep is not None:
            paths.append(out_dir / SWEEP_PNG)
            plot_sweep(summary, paths[-1])
        return paths
