"""The autoscaling run's outputs: ``autoscale.json``, the markdown report, the console
tables and the plot, all read off a :class:`simulator.autoscale_run.AutoscaleReport`."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

from simulator.autoscale_run import SCHEMA, SERIES_POINTS, AutoscaleReport

def compression_note(report: AutoscaleReport) -> str | None:
    """A plain sentence when the replayed curve runs faster than real time."""
    scale = report.time_scale
    if math.isclose(scale, 1.0, rel_tol=1e-6):
        return None
    duration = report.scenario["duration_s"]
    return (f"COMPRESSED: {_clock(duration * scale)} of traffic replayed in {_clock(duration)} ({scale:.3g}x): "
            f"rates are real, the curve's clock runs {scale:.3g}x fast; replica start "
            f"({report.replica_start_s:g} s) and the policy's delays are not compressed, so they weigh "
            f"{scale:.3g}x more against the curve than in real time.")


def run_rows(report: AutoscaleReport) -> list[dict]:
    """One row per run: the figures of the runs table."""
    rows = []
    for r in report.runs:
        lags = [u.detect_lag_s for u in r.scale_ups if u.detect_lag_s is not None]
        rows.append({
            "run": r.name, "replicas": (f"{int(r.series.replicas.min())}-{r.peak_replicas}, mean {r.mean_replicas:.2f}"
                                        if r.autoscaled else str(r.peak_replicas)),
            "gpu_hours": r.gpu_hours, "slo_attainment": r.slo_attainment, "ttft_p95_s": r.ttft_p95_s,
            "passed": r.passed, "invalid": r.invalid, "over_target_s": r.over_target_s,
            "scale_ups": len(r.scale_ups) if r.autoscaled else None,
            "detect_lag_median_s": float(np.median(lags)) if lags else None,
            "start_lag_s": report.replica_start_s if r.autoscaled and r.scale_ups else None,
        })
    return rows


def report_json(report: AutoscaleReport) -> dict:
    """The content of ``autoscale.json``."""
    step = max(1, len(report.offered_rps) // SERIES_POINTS)
    t = report.autoscaled.series.t_s[::step]
    return {
        "schema": SCHEMA, "simulated": True, "scenario": report.scenario, "time_scale": report.time_scale,
        "compression": compression_note(report), "replica_start_s": report.replica_start_s,
        "target_queue_per_replica": report.target_per_replica,
        "smallest_passing_static": report.smallest_passing_static, "static_searched": report.searched,
        "runs": [row | {"measured": r.measured, "failed": r.failed, "wall_s": r.wall_s}
                 for row, r in zip(run_rows(report), report.runs)],
        "scale_ups": [asdict(u) | {"start_lag_s": u.start_lag_s, "detect_lag_s": u.detect_lag_s,
                                   "over_target_s": u.over_target_s} for u in report.autoscaled.scale_ups],
        "series": {"t_s": t.tolist(), "offered_rps": report.offered_rps[::step].round(4).tolist(),
                   **{r.name: {"replicas": r.series.replicas[::step].tolist(),
                               "in_flight": r.series.in_flight[::step].tolist()} for r in report.runs}},
    }


def write_autoscale(report: AutoscaleReport, out_dir: Path) -> list[Path]:
    """``autoscale.json``, ``autoscale.md`` and ``autoscale.png`` in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "autoscale.json", out_dir / "autoscale.md", out_dir / "autoscale.png"]
    paths[0].write_text(json.dumps(report_json(report), indent=2), encoding="utf-8")
    paths[1].write_text(report_markdown(report), encoding="utf-8")
    plot_autoscale(report, paths[2])
    return paths


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _at(report: AutoscaleReport, seconds: float | None) -> str:
    """A run time, with the replayed curve's clock when compressed."""
    if seconds is None:
        return "-"
    if math.isclose(report.time_scale, 1.0, rel_tol=1e-6):
        return _clock(seconds)
    return f"{_clock(seconds)} ({_clock(seconds * report.time_scale)[:-3]})"


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


TABLE_COLUMNS = ("run", "replicas", "GPU-hours", "SLO attainment", "TTFT p95", "SLO", "queue over target",
                 "scale-ups", "detect lag (median)", "start lag")
SCALE_UP_COLUMNS = ("decided", "+replicas", "serving", "queue over target since", "back under target",
                    "detect lag", "start lag", "over target for")


def table_rows(report: AutoscaleReport) -> list[tuple[str, ...]]:
    rows = []
    for row in run_rows(report):
        verdict = {True: "pass", False: "FAIL", None: "-"}[row["passed"]] + (" (invalid)" if row["invalid"] else "")
        rows.append((row["run"], row["replicas"], f"{row['gpu_hours']:.2f}", _num(row["slo_attainment"], ".1%"),
                     _num(None if row["ttft_p95_s"] is None else row["ttft_p95_s"] * 1e3, ",.0f") + " ms", verdict,
                     _num(row["over_target_s"], ",.0f") + " s", _num(row["scale_ups"], "d"),
                     _num(row["detect_lag_median_s"], ".0f") + (" s" if row["detect_lag_median_s"] is not None
                                                                  else ""),
                     _num(row["start_lag_s"], ".0f") + (" s" if row["start_lag_s"] is not None else "")))
    return rows


def scale_up_rows(report: AutoscaleReport) -> list[tuple[str, ...]]:
    return [(_at(report, u.decided_s), f"+{u.added}", _at(report, u.serving_s), _at(report, u.over_target_since_s),
             _at(report, u.back_under_target_s), _num(u.detect_lag_s, ".0f") + " s", f"{u.start_lag_s:.0f} s",
             _num(u.over_target_s, ",.0f") + " s") for u in report.autoscaled.scale_ups]


def report_markdown(report: AutoscaleReport) -> str:
    s = report.scenario
    lines = [f"# Autoscaling run (SIMULATED): {s['model']} on {s['hardware']}", "",
             f"Load: {s['profile']}, workload {s['workload']}, {_clock(s['duration_s'])} simulated, "
             f"SLO {', '.join(s['slo'])}, seed {s['seed']}. Policy: queue depth, target "
             f"{report.target_per_replica:g} per replica, upscale delay {s['policy']['upscale_delay_s']:g} s, "
             f"downscale delay {s['policy']['downscale_delay_s']:g} s; replica start {report.replica_start_s:g} s.",
             ""]
    if note := compression_note(report):
        lines += [f"**{note}**", ""]
    lines += _md_table(TABLE_COLUMNS, table_rows(report))
    smallest = report.smallest_passing_static
    if invalid := [f"- {r.name}: invalid measurement: {r.invalid}" for r in report.runs if r.invalid]:
        lines += ["", *invalid]
    lines += ["", "Smallest static count meeting the SLO: "
              + (str(smallest) if smallest is not None else "none of those run")
              + (" (searched)" if report.searched else " (of those run)") + ".", ""]
    if report.autoscaled.scale_ups:
        lines += ["## Scale-ups of the autoscaled run", "",
                  "Times are run times" + (" (the replayed curve's clock in brackets)" if report.time_scale != 1
                                           else "") + "; lags are in run seconds.", ""]
        lines += _md_table(SCALE_UP_COLUMNS, scale_up_rows(report))
    lines += ["", "![offered rate, replicas and queue](autoscale.png)", ""]
    return "\n".join(lines)


def print_autoscale(report: AutoscaleReport, console) -> None:
    """The autoscale run's tables and notes on a rich console."""
    from rich.table import Table

    s = report.scenario
    table = Table(title=f"autoscaling run (SIMULATED): {s['model']} on {s['hardware']}", title_justify="left")
    for col in TABLE_COLUMNS:
        table.add_column(col, justify="left" if col in ("run", "replicas") else "right")
    for row in table_rows(report):
        table.add_row(*row)
    console.print(table)
    if report.autoscaled.scale_ups:
        ups = Table(title="scale-ups (run time" + (", replayed clock in brackets)" if report.time_scale != 1 else ")"),
                    title_justify="left")
        for col in SCALE_UP_COLUMNS:
            ups.add_column(col, justify="right")
        for row in scale_up_rows(report):
            ups.add_row(*row)
        console.print(ups)
    for run in report.runs:
        if run.invalid:
            console.print(f"{run.name}: invalid measurement: {run.invalid}")
    if note := compression_note(report):
        console.print(f"[bold yellow]{note}[/]")
    smallest = report.smallest_passing_static
    console.print(f"smallest static count meeting the SLO: {smallest if smallest is not None else 'none of those run'}"
                  + (" (searched)" if report.searched else ""))


def _md_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns),
            *("| " + " | ".join(row) + " |" for row in rows)]


def plot_autoscale(report: AutoscaleReport, path: Path) -> None:
    """Offered rate, serving replicas and requests in flight over the day."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    auto = report.autoscaled
    hours = auto.series.t_s * report.time_scale / 3600.0
    fig, (rate_ax, rep_ax, queue_ax) = plt.subplots(3, 1, sharex=True, figsize=(10, 8))
    rate_ax.plot(hours, report.offered_rps, color="black")
    rate_ax.set_ylabel("offered req/s")
    for r in report.runs:
        style = {"drawstyle": "steps-post", "linewidth": 2 if r.autoscaled else 1}
        rep_ax.plot(hours, r.series.replicas, label=r.name, **style)
        queue_ax.plot(hours, r.series.in_flight, label=r.name, linewidth=0.8)
    queue_ax.plot(hours, report.target_per_replica * auto.series.replicas, color="grey", linestyle="--",
                  label="target x serving replicas (autoscaled)")
    rep_ax.set_ylabel("serving replicas")
    queue_ax.set_ylabel("requests in flight")
    queue_ax.set_xlabel("hour of the replayed curve" + (f" ({report.time_scale:.3g}x compressed)"
                                                         if report.time_scale != 1 else ""))
    rep_ax.legend(loc="upper left", fontsize="small")
    queue_ax.legend(loc="upper left", fontsize="small")
    s = report.scenario
    fig.suptitle(f"SIMULATED autoscaling run: {s['model']} on {s['hardware']}, {s['profile']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
