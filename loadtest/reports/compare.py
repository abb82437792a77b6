"""``loadtest compare``: runs' headline figures side by side with ratios to the first.

A ratio is highlighted only beyond the noise band the data give: the two runs' relative
95% half-widths (see :mod:`loadtest.reports.figures`) added in quadrature. A figure
without a noise estimate in either run is never highlighted. A *regression* is a run
notably worse than the first (the baseline) on a figure: outside the band, in the bad
direction; ``--fail-on-regression`` ends with :attr:`ExitCode.REGRESSION` when any is.
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


@dataclass(frozen=True)
class Regression:
    """A run notably worse than the baseline on one figure."""

    run: int
    label: str
    row: ComparisonRow

    def describe(self) -> str:
        r = self.row
        return (f"{self.label}: {r.figure.name} {r.figure.format(r.b)} against {r.figure.format(r.a)} "
                f"({r.ratio:.2f}x, noise ±{r.band:.0%})")


def compare_runs(summaries: list[Summary]) -> list[list[ComparisonRow]]:
    """Every run after the first against the first (one row list per run)."""
    if len(summaries) < 2:
        raise ValueError("compare needs at least two runs")
    return [compare_summaries(summaries[0], other) for other in summaries[1:]]


def regressions(per_run: list[list[ComparisonRow]], labels: list[str], figures: set[str] | None = None) -> list[Regression]:
    """Each (run, figure) worse than the baseline beyond the noise band (``figures``: only
    those names, case-insensitive)."""
    wanted = None if figures is None else {f.lower() for f in figures}
    return [Regression(i + 1, labels[i + 1], row) for i, rows in enumerate(per_run) for row in rows
            if row.better is False and (wanted is None or row.figure.name.lower() in wanted)]  # fmt: skip


def runs_table(per_run: list[list[ComparisonRow]], labels: list[str]) -> Table:
    """The baseline's figures, then each run's value and ratio (red: worse beyond noise)."""
    table = Table(title=f"loadtest compare: ratios to the baseline {labels[0]} (highlighted beyond the noise band)")
    table.add_column("figure")
    table.add_column(f"baseline: {labels[0]}", justify="right")
    for label in labels[1:]:
        table.add_column(label, justify="right")
    for k, base in enumerate(per_run[0]):
        cells = []
        for rows in per_run:
            row = rows[k]
            ratio = "" if row.ratio is None else f" ({row.ratio:.2f}x"
            band = "" if row.ratio is None else ("" if row.band is None else f" ±{row.band:.0%}") + ")"
            style = {None: "", True: "green", False: "red"}[row.better]
            text = f"{row.figure.format(row.b)}{ratio}{band}"
            cells.append(f"[{style}]{text}[/]" if style else text)
        if base.a is None and all(rows[k].b is None for rows in per_run):
            continue
        table.add_row(base.figure.name, base.figure.format(base.a), *cells)
    return table


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
