"""PNG plots of a sweep report (matplotlib's Agg canvas; no pyplot global state).

- ``cost_vs_latency.png``: cost per million output tokens against p95 E2E at the
  target, passing runs filled, the Pareto front joined;
- ``scaling.png``: capacity at SLO against accelerators, one line per shape over its
  replica counts; scaling efficiency (speed-up / ideal) against accelerators, replica
  scaling per shape and tensor-parallel scaling per accelerator;
- ``p95_vs_rate.png``: p95 E2E against offered rate, one line per candidate measured
  at several rates (omitted when none was).

A simulated report's titles (drawn, and the PNGs' ``Title`` metadata) start with ``SIMULATED``.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from sweep.analysis.rows import RunRow, ScalingKind
from sweep.report.document import SweepReport

SIMULATED_MARK = "SIMULATED"  # the same prefix as `sweep plan`'s tables of a simulated sweep


def plot_title(report: SweepReport, subject: str) -> str:
    """``name: subject``, marked when every figure of ``report`` comes from the simulator."""
    title = f"{report.spec.name}: {subject}"
    return f"{SIMULATED_MARK}: {title}" if report.simulated else title


def _save(figure: Figure, path: Path, title: str) -> Path:
    """Write ``figure`` as a PNG whose ``Title`` metadata is ``title`` (the title drawn on it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(figure)
    figure.tight_layout()
    figure.savefig(path, dpi=110, metadata={"Title": title})
    return path


def _cost_latency(row: RunRow) -> tuple[float, float] | None:
    """(p95 E2E at the target, cost per million output tokens), when both exist."""
    if row.e2e_p95_s is None or row.cost_per_million_output_tokens is None:
        return None
    return row.e2e_p95_s, row.cost_per_million_output_tokens


def cost_vs_latency(report: SweepReport, path: Path) -> Path:
    """Cost per million tokens vs p95 E2E, Pareto front marked."""
    figure = Figure(figsize=(7, 4.5))
    ax = figure.add_subplot()
    xy = {r.candidate_id: pt for r in report.runs if (pt := _cost_latency(r)) is not None}
    for row in report.runs:
        if row.candidate_id in xy:
            colour = "tab:green" if row.passes else "tab:red"
            x, y = xy[row.candidate_id]
            ax.scatter(x, y, marker="o", facecolors=colour if row.passes else "none", edgecolors=colour)
            ax.annotate(row.candidate_id, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    front = sorted(xy[c] for c in report.pareto if c in xy)
    if front:
        ax.plot([x for x, _ in front], [y for _, y in front], "--", color="tab:blue", label="Pareto front")
        ax.legend(loc="best")
    if report.spec.slo.e2e_p95 is not None:
        ax.axvline(report.spec.slo.e2e_p95, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("p95 end-to-end latency at the target rate (s)")
    ax.set_ylabel(f"{report.prices.currency} per million output tokens")
    title = plot_title(report, "cost vs latency (filled = meets the SLO)")
    ax.set_title(title)
    return _save(figure, path, title)


def scaling(report: SweepReport, path: Path) -> Path:
    """Capacity at SLO and scaling efficiency against accelerators."""
    figure = Figure(figsize=(10, 4))
    cap_ax, eff_ax = figure.add_subplot(1, 2, 1), figure.add_subplot(1, 2, 2)
    by_shape: dict[str, list[RunRow]] = defaultdict(list)
    for row in report.runs:
        if row.capacity_rps is not None:
            by_shape[row.candidate.shape.id].append(row)
    for shape_id, rows in sorted(by_shape.items()):
        rows.sort(key=lambda r: r.accelerators)
        cap_ax.plot([r.accelerators for r in rows], [r.capacity_rps for r in rows], "o-", label=shape_id)
    lines: dict[tuple[ScalingKind, str], list[tuple[int, float]]] = defaultdict(list)
    for s in report.scaling:
        base = report.run(s.base_id)
        if base is None:
            continue
        label = (f"{base.candidate.shape.id} replicas" if s.kind is ScalingKind.REPLICAS
                 else f"TP vs tp{base.candidate.tp} ({base.candidate.engine.label})")
        line = lines[(s.kind, label)]
        if not line:
            line.append((s.base_accelerators, 1.0))
        line.append((s.accelerators, s.efficiency))
    for (kind, label), pts in sorted(lines.items()):
        pts.sort()
        style = "o-" if kind is ScalingKind.REPLICAS else "s--"
        eff_ax.plot([x for x, _ in pts], [y for _, y in pts], style, label=label)
    eff_ax.axhline(1.0, color="grey", linestyle=":", linewidth=1)
    cap_ax.set_xlabel("accelerators")
    cap_ax.set_ylabel("capacity at SLO (req/s, highest rate meeting it)")
    eff_ax.set_xlabel("accelerators")
    eff_ax.set_ylabel("scaling efficiency (speed-up / ideal)")
    for ax in (cap_ax, eff_ax):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    title = plot_title(report, "capacity and scaling")
    figure.suptitle(title)
    return _save(figure, path, title)


def p95_vs_rate(report: SweepReport, path: Path) -> Path | None:
    """p95 E2E vs offered rate per measured candidate (a single rate is one marker)."""
    rows = [r for r in report.runs if r.points]
    if not rows:
        return None
    figure = Figure(figsize=(7, 4.5))
    ax = figure.add_subplot()
    for row in rows:
        pts = [(p.point.offered_rps, p.point.e2e_p95_s) for p in row.points if p.point.e2e_p95_s is not None]
        if pts:
            ax.plot([x for x, _ in pts], [y for _, y in pts], "o-", label=row.candidate_id)
    if report.spec.slo.e2e_p95 is not None:
        ax.axhline(report.spec.slo.e2e_p95, color="grey", linestyle=":", linewidth=1, label="SLO")
    ax.axvline(report.spec.target_rps, color="black", linestyle=":", linewidth=1)
    ax.set_xlabel("offered rate (req/s)")
    ax.set_ylabel("p95 end-to-end latency (s)")
    title = plot_title(report, "p95 vs offered rate")
    ax.set_title(title)
    ax.legend(fontsize=7)
    return _save(figure, path, title)


def write_plots(report: SweepReport, folder: Path) -> tuple[Path, ...]:
    """Write every applicable plot into ``folder``; returns the files written."""
    written = [
        cost_vs_latency(report, folder / "cost_vs_latency.png"),
        scaling(report, folder / "scaling.png"),
        p95_vs_rate(report, folder / "p95_vs_rate.png"),
    ]
    return tuple(p for p in written if p is not None)
