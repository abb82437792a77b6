"""Each simulated request's inter-token gaps, kept where they come from (pure).

A request's tokens end at a run of consecutive steps of its replica, so its gaps are a
run of that replica's step-to-step gaps (``step_end[k + 1] - step_end[k]``, the floats
``numpy.diff`` gives on its token times). Requests decoding together share those
gaps: :class:`TokenGaps` notes each request's run (replica, first step, count) and
builds the :class:`~loadtest.analysis.gaps.GapTable` at the end from every replica's
step gaps, ~450k floats for a simulated hour instead of ~46M. A request preempted
mid-way (tokens in several runs of steps) keeps its own gaps.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from loadtest.analysis.gaps import GapTable
from simulator.replica import Replica
from simulator.sequence import Seq


class TokenGaps:
    """Rows of gaps appended one request at a time (see the module docstring)."""

    def __init__(self) -> None:
        self._replicas: dict[int, Replica] = {}  # by id(): the replica of each run
        self._rows: list[tuple[int, int, int] | np.ndarray | None] = []

    def __len__(self) -> int:
        return len(self._rows)

    def append(self, gaps: np.ndarray | None) -> None:
        """A row of these gaps (``None``: no gaps, a failed request)."""
        self._rows.append(None if gaps is None else np.asarray(gaps, dtype=float))

    def append_tokens(self, replica: Replica, seq: Seq) -> None:
        """The row of ``seq``'s gaps, from the steps ``replica`` produced its tokens in."""
        if len(seq.segments) == 1:
            first, count = seq.segments[0]
            self._replicas.setdefault(id(replica), replica)
            self._rows.append((id(replica), first, count - 1))
        else:
            times = replica.token_times(seq)
            self._rows.append(times[1:] - times[:-1])

    def table(self, order: Sequence[int] | None = None) -> GapTable:
        """The rows (in ``order``: row indices; default as appended) as one table."""
        parts, offsets, size = [], {}, 0
        for key, replica in self._replicas.items():
            times = replica.step_times()
            offsets[key] = size
            parts.append(times[1:] - times[:-1])
            size += len(times) - 1 if len(times) else 0
        starts, lengths = [], []
        for row in (self._rows if order is None else (self._rows[i] for i in order)):
            if row is None:
                starts.append(0)
                lengths.append(0)
            elif isinstance(row, tuple):
                key, first, count = row
                starts.append(offsets[key] + first)
                lengths.append(count)
            else:
                starts.append(size)
                lengths.append(len(row))
                parts.append(row)
                size += len(row)
        values = np.concatenate(parts) if parts else np.zeros(0)
        return GapTable(values, np.array(starts, dtype=np.int64), np.array(lengths, dtype=np.int64))
