"""``loadtest compare``: two runs' headline figures side by side with ratios (B / A).

A ratio is highlighted only beyond the noise band the data give: the two runs' relative
95% half-widths (see :mod:`loadtest.reports.figures`) added in quadrature. A figure
without a noise estimate in either run is never highlighted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rich.table import Table

from loadtest.analysis.summary import StageSummary, Summary
from loadtest.reports.figures import ALL_FIGURES, Figure


@dataclass(frozen=True)
class ComparisonRow:
    """One figure of both runs; ``ratio`` is B / A and ``band`` the relative noise of that
    ratio (each ``None`` when undefined)."""

    figure: Figure
    a: float | None
    b: float | None
    band: float | None = None

    @property
    def ratio(self) -> float | None:
        if self.a is None or self.b is None or self.a == 0:
            return None
        return self.b / self.a

    @property
    def better(self) -> bool | None:
        """Whether B is notably better than A (``None`` when within the noise band)."""
        ratio = self.ratio
        if ratio is None or self.band is None or abs(ratio - 1.0) <= self.band:
            return None
        return (ratio < 1.0) == self.figure.lower_is_better


def noise_band(figure: Figure, a: StageSummary, b: StageSummary) -> float | None:
    """The relative 95% noise of ``figure``'s ratio between two stages."""
    na, nb = figure.noise(a), figure.noise(b)
    return None if na is None or nb is None else math.hypot(na, nb)


def compare_summaries(a: Summary, b: Summary) -> list[ComparisonRow]:
    """Every headline figure of ``a`` and ``b``."""
    ha, hb = a.headline, b.headline
    return [ComparisonRow(f, f.get(ha), f.get(hb), noise_band(f, ha, hb)) for f in ALL_FIGURES]


def comparison_table(rows: list[ComparisonRow], label_a: str, label_b: str) -> Table:
    table = Table(title="loadtest compare (ratio = B / A; highlighted beyond the noise band)")
    table.add_column("figure")
    table.add_column(f"A: {label_a}", justify="right")
    table.add_column(f"B: {label_b}", justify="right")
    table.add_column("B / A", justify="right")
    table.add_column("noise ±", justify="right")
    for row in rows:
        if row.a is None and row.b is None:
            continue
        ratio = "-" if row.ratio is None else f"{row.ratio:.2f}x"
        style = {None: "", True: "green", False: "red"}[row.better]
        band = "-" if row.band is None else f"{row.band:.0%}"
        table.add_row(row.figure.name, row.figure.format(row.a), row.figure.format(row.b),
                      f"[{style}]{ratio}" if style else ratio, band)  # fmt: skip
    return table
