"""Every record's inter-chunk gaps in one flat array (pure).

A stage of a simulated hour holds ~46M gaps: as Python lists inside each record they
take gigabytes and every figure over them loops in Python. :class:`GapTable` keeps
them as one ``float64`` array with row offsets, so the stage figures
(:func:`loadtest.analysis.metrics.build_stage`) select, concatenate and accumulate
them with numpy. ``loadtest run``'s records carry their gaps in ``itl_s``
(:meth:`GapTable.of_records`); the simulator hands its own table beside records
built without them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np

from loadtest.analysis.records import RequestRecord

_BLOCK_VALUES = 4_000_000  # padded cells per block of rows in segment_cumsum


@dataclass(frozen=True)
class GapTable:
    """Row ``i``'s gaps are ``values[offsets[i]:offsets[i + 1]]`` (one row per record)."""

    values: np.ndarray
    offsets: np.ndarray

    def __post_init__(self) -> None:
        if len(self.offsets) < 1 or self.offsets[0] != 0 or self.offsets[-1] != len(self.values):
            raise ValueError("gap offsets must run from 0 to the number of values")

    @classmethod
    def of_lengths(cls, values: np.ndarray, lengths: np.ndarray) -> GapTable:
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return cls(np.asarray(values, dtype=float), offsets)

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
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def row(self, i: int) -> np.ndarray:
        return self.values[self.offsets[i]:self.offsets[i + 1]]

    def select(self, rows: np.ndarray) -> GapTable:
        """The table of the rows where the boolean mask ``rows`` is true, in order."""
        rows = self._mask(rows)
        if rows.all():
            return self
        lengths = self.lengths
        return GapTable.of_lengths(self.values[np.repeat(rows, lengths)], lengths[rows])

    def blank(self, rows: np.ndarray) -> GapTable:
        """The same rows, those where the boolean mask ``rows`` is true emptied."""
        rows = self._mask(rows)
        if not rows.any():
            return self
        lengths = self.lengths
        return GapTable.of_lengths(self.values[np.repeat(~rows, lengths)], np.where(rows, 0, lengths))

    def _mask(self, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, dtype=bool)
        if rows.shape != (len(self),):
            raise ValueError(f"a mask of {len(self)} rows expected, got shape {rows.shape}")
        return rows

    def tolists(self) -> list[list[float]]:
        """Each row as a list (what a record's ``itl_s`` holds)."""
        values, offsets = self.values.tolist(), self.offsets.tolist()
        return [values[a:b] for a, b in zip(offsets, offsets[1:])]


def segment_cumsum_blocks(firsts: np.ndarray, gaps: GapTable) -> Iterator[tuple[slice, np.ndarray]]:
    """Row after row, ``firsts[i]`` then the running sums of row ``i``'s gaps added to it
    one by one: the floats a Python loop ``t += gap`` gives (numpy accumulates in order).
    Yields ``(rows, sums)`` a block of whole rows at a time (rows padded into a matrix of
    about :data:`_BLOCK_VALUES` cells, the padding after a row's end never read)."""
    firsts = np.asarray(firsts, dtype=float)
    if not len(firsts):
        return
    lengths = gaps.lengths + 1
    step = max(1, _BLOCK_VALUES // int(lengths.max()))
    for row in range(0, len(firsts), step):
        end = min(row + step, len(firsts))
        counts = lengths[row:end]
        columns = np.arange(int(counts.max()))
        inside = columns[None, :] < counts[:, None]
        cells = np.zeros(inside.shape)
        cells[:, 0] = firsts[row:end]
        cells[inside & (columns > 0)[None, :]] = gaps.values[gaps.offsets[row]:gaps.offsets[end]]
        yield slice(row, end), np.cumsum(cells, axis=1)[inside]


def segment_cumsum(firsts: np.ndarray, gaps: GapTable) -> np.ndarray:
    """Every block of :func:`segment_cumsum_blocks`, as one array."""
    parts = [sums for _, sums in segment_cumsum_blocks(firsts, gaps)]
    return np.concatenate(parts) if parts else np.zeros(0)
