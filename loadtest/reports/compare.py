"""``loadtest compare``: two runs' headline figures side by side with ratios (B / A)."""

from __future__ import annotations

from dataclasses import dataclass

from rich.table import Table

from loadtest.reports.figures import ALL_FIGURES, Figure
from loadtest.summary import Summary

NOTABLE = 0.10  # ratios beyond +-10 % are highlighted


@dataclass(frozen=True)
class ComparisonRow:
    """One figure of both runs; ``ratio`` is B / A (``None`` when undefined)."""

    figure: Figure
    a: float | None
    b: float | None

    @property
    def ratio(self) -> float | None:
        if self.a is None or self.b is None or self.a == 0:
            return None
        return self.b / self.a

    @property
    def better(self) -> bool | None:
        """Whether B is notably better than A (``None`` when within the noise band)."""
        ratio = self.ratio
        if ratio is None or abs(ratio - 1.0) <= NOTABLE:
            return None
        return (ratio < 1.0) == self.figure.lower_is_better


def compare_summaries(a: Summary, b: Summary) -> list[ComparisonRow]:
    """Every headline figure of ``a`` and ``b``."""
    return [ComparisonRow(f, f.get(a.headline), f.get(b.headline)) for f in ALL_FIGURES]


def comparison_table(rows: list[ComparisonRow], label_a: str, label_b: str) -> Table:
    table = Table(title="loadtest compare (ratio = B / A)")
    table.add_column("figure")
    table.add_column(f"A: {label_a}", justify="right")
    table.add_column(f"B: {label_b}", justify="right")
    table.add_column("B / A", justify="right")
    for row in rows:
        if row.a is None and row.b is None:
            continue
        ratio = "-" if row.ratio is None else f"{row.ratio:.2f}x"
        style = {None: "", True: "green", False: "red"}[row.better]
        table.add_row(row.figure.name, row.figure.format(row.a), row.figure.format(row.b), f"[{style}]{ratio}" if style else ratio)
    return table
