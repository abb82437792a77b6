"""Every record's inter-chunk gaps in one flat array (pure).

A stage of a simulated hour holds ~46M gaps: as Python lists inside each record they
take gigabytes and every figure over them loops in Python. :class:`GapTable` keeps
them as one ``float64`` array and each row's place in it, so the stage figures
(:func:`loadtest.analysis.metrics.build_stage`) select, gather and accumulate them
with numpy; selecting rows never copies a gap. ``loadtest run``'s records carry their
gaps in ``itl_s`` (:meth:`GapTable.of_records`); the simulator's rows are runs of its
replicas' step-to-step gaps (:mod:`simulator.token_gaps`), shared by the requests that
decoded together.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np

from loadtest.analysis.records import RequestRecord
from loadtest.analysis.stats import Counted

_BLOCK_VALUES = 4_000_000  # gaps gathered, or padded cells summed, per block of rows


@dataclass(frozen=True)
class GapTable:
    """Row ``i``'s gaps are ``values[starts[i]:starts[i] + lengths[i]]`` (one row per
    record). Rows need not be in order, nor cover ``values``; they may overlap (the
    simulator's rows are runs of its replicas' step-to-step gaps)."""

    values: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray

    def __post_init__(self) -> None:
        if len(self.starts) != len(self.lengths):
            raise ValueError("a start and a length per row")
        if len(self.starts) and ((self.starts < 0).any() or (self.lengths < 0).any()
                                 or (self.starts + self.lengths > len(self.values)).any()):
            raise ValueError("gap rows must lie inside the values")

    @classmethod
    def of_lengths(cls, values: np.ndarray, lengths: np.ndarray) -> GapTable:
        """Rows one after the other, of ``lengths`` gaps each."""
        lengths = np.asarray(lengths, dtype=np.int64)
        return cls(np.asarray(values, dtype=float), np.cumsum(lengths) - lengths, lengths)

    @classmethod
    def of_records(cls, records: Sequence[RequestRecord]) -> GapTable:
        """The gaps of each record's ``itl_s``."""
        lengths = np.fromiter((len(r.itl_s) for r in records), dtype=np.int64, count=len(records))
        values = np.fromiter(chain.from_iterable(r.itl_s for r in records), dtype=float, count=int(lengths.sum()))
        return cls.of_lengths(values, lengths)

    @classmethod
    def of_arrays(cls, rows: Sequence[np.ndarray | None]) -> GapTable:
        """One row per array (``None``: no gaps)."""
        lengths = np.fromiter((0 if r is None else len(r) for r in rows), dtype=np.int64, count=len(rows))
        present = [r for r in rows if r is not None and len(r)]
        values = np.concatenate(present).astype(float, copy=False) if present else np.zeros(0)
        return cls.of_lengths(values, lengths)

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def total(self) -> int:
        """Gaps in all rows."""
        return int(self.lengths.sum())

    def rows(self) -> Iterator[np.ndarray]:
        """Each row's gaps, in order."""
        values = self.values
        return (values[a:a + n] for a, n in zip(self.starts.tolist(), self.lengths.tolist()))

    def tolists(self) -> list[list[float]]:
        """Each row as a list (what a record's ``itl_s`` holds)."""
        return [row.tolist() for row in self.rows()]

    def select(self, rows: np.ndarray) -> GapTable:
        """The table of the rows where the boolean mask ``rows`` is true, in order."""
        rows = self._mask(rows)
        return self if rows.all() else GapTable(self.values, self.starts[rows], self.lengths[rows])

    def blank(self, rows: np.ndarray) -> GapTable:
        """The same rows, those where the boolean mask ``rows`` is true emptied."""
        rows = self._mask(rows)
        return GapTable(self.values, self.starts, np.where(rows, 0, self.lengths)) if rows.any() else self

    def gather(self, first: int = 0, end: int | None = None) -> np.ndarray:
        """The gaps of rows ``first`` to ``end`` (excluded), row after row."""
        starts, lengths = self.starts[first:end], self.lengths[first:end]
        if not len(starts):
            return np.zeros(0)
        if _one_run(starts, lengths):
            return self.values[starts[0]:starts[0] + int(lengths.sum())]
        shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
        return self.values[np.arange(len(shift)) + shift]

    def flat(self) -> np.ndarray:
        """Every row's gaps, row after row (gathered a block of rows at a time)."""
        tiles = not len(self) or (self.starts[0] == 0 and _one_run(self.starts, self.lengths))
        if tiles and self.total == len(self.values):
            return self.values
        out = np.empty(self.total)
        done = 0
        for first, end in self._blocks(self.lengths):
            part = self.gather(first, end)
            out[done:done + len(part)] = part
            done += len(part)
        return out

    def value_counts(self) -> Counted:
        """Every row's gaps as each value and the number of rows holding it (rows may
        share values: a value counts once per row)."""
        size = len(self.values) + 1
        cover = np.bincount(self.starts, minlength=size) - np.bincount(self.starts + self.lengths, minlength=size)
        return Counted(self.values, np.cumsum(cover)[:-1])

    def _blocks(self, lengths: np.ndarray) -> Iterator[tuple[int, int]]:
        step = max(1, _BLOCK_VALUES // max(1, int(lengths.max(initial=0))))
        return ((first, min(first + step, len(self))) for first in range(0, len(self), step))

    def _mask(self, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, dtype=bool)
        if rows.shape != (len(self),):
            raise ValueError(f"a mask of {len(self)} rows expected, got shape {rows.shape}")
        return rows


def _one_run(starts: np.ndarray, lengths: np.ndarray) -> bool:
    """Whether the rows follow one another in the values."""
    return bool((starts[1:] == starts[:-1] + lengths[:-1]).all())


def segment_cumsum_blocks(firsts: np.ndarray, gaps: GapTable) -> Iterator[tuple[slice, np.ndarray]]:
    """Row after row, ``firsts[i]`` then the running sums of row ``i``'s gaps added to it
    one by one: the floats a Python loop ``t += gap`` gives (numpy accumulates in order).
    Yields ``(rows, sums)`` a block of whole rows at a time (rows padded into a matrix of
    about :data:`_BLOCK_VALUES` cells, the padding after a row's end never read)."""
    firsts = np.asarray(firsts, dtype=float)
    if not len(firsts):
        return
    values = gaps.values if len(gaps.values) else np.zeros(1)
    for first, end in gaps._blocks(gaps.lengths + 1):
        counts = gaps.lengths[first:end] + 1
        width = int(counts.max())
        cells = np.empty((end - first, width))
        cells[:, 0] = firsts[first:end]
        if width > 1:  # each row's gaps, then whatever follows them (summed after the row's end: never read)
            cells[:, 1:] = values.take(gaps.starts[first:end, None] + np.arange(width - 1), mode="clip")
        inside = np.arange(width) < counts[:, None]
        yield slice(first, end), np.cumsum(cells, axis=1)[inside]
