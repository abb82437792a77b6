"""``capacity_curve.png``: the capacity model of ``sweep plan`` (matplotlib's Agg canvas).

Left: GPUs against traffic, one thin step line per shape and the cheapest shape's curve
in bold. Right: each shape's scaling and marginal efficiency against replicas, with the
threshold below which an added replica stops paying.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from sweep.capacity.curve import CurvePoint, ReplicaStep


def capacity_curve_png(curve: Sequence[CurvePoint], steps: dict[str, tuple[ReplicaStep, ...]],
                       min_efficiency: float, title: str, path: Path) -> Path:
    """Write the plot to ``path`` (its folder is created)."""
    figure = Figure(figsize=(11, 4.5))
    gpus, eff = figure.add_subplot(1, 2, 1), figure.add_subplot(1, 2, 2)
    for shape_id, rows in steps.items():
        if not rows:
            continue
        xs = [0.0, *(r.add_next_above_rps for r in rows)]
        ys = [rows[0].accelerators, *(r.accelerators for r in rows)]
        gpus.step(xs, ys, where="pre", linewidth=1, alpha=0.6, label=shape_id)
        eff.plot([r.replicas for r in rows], [r.scaling_efficiency for r in rows], "o-", label=f"{shape_id} scaling")
        marginal = [(r.replicas, r.marginal_efficiency) for r in rows if r.marginal_efficiency is not None]
        eff.plot([n for n, _ in marginal], [m for _, m in marginal], "x--", label=f"{shape_id} marginal")
    if curve:
        xs = [curve[0].from_rps, *(p.to_rps for p in curve)]
        ys = [curve[0].accelerators, *(p.accelerators for p in curve)]
        gpus.step(xs, ys, where="pre", color="black", linewidth=2.5, label="cheapest")
        for p in curve[:-1]:
            gpus.annotate(f"+ at {p.to_rps:.3g}", (p.to_rps, p.accelerators), fontsize=7,
                          xytext=(2, 4), textcoords="offset points")
    eff.axhline(min_efficiency, color="grey", linestyle=":", linewidth=1, label=f"stops paying < {min_efficiency:g}")
    gpus.set_xlabel("traffic (req/s)")
    gpus.set_ylabel("accelerators")
    gpus.set_title("GPUs needed (steps: add a replica)")
    eff.set_xlabel("replicas")
    eff.set_ylabel("efficiency (1.0 = linear)")
    eff.set_title("scaling (average) and marginal efficiency")
    for ax in (gpus, eff):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    figure.suptitle(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(figure)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    return path
