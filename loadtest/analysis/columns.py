"""A stage's records as columns (pure): one array per field the stage figures read.

:func:`loadtest.analysis.metrics.build_stage` computes every figure from
:class:`RecordColumns`, whose arrays are taken with numpy instead of attribute by
attribute: ``loadtest run``'s records become columns (:meth:`RecordColumns.of_records`),
and the simulator builds them straight from its raw rows, ~180,000 requests and
~46M inter-token gaps for a simulated hour, without a :class:`RequestRecord` each
(it builds those only when a report needs them).

Missing values: ``NaN`` in float columns (``ttft_s``, ``scheduled_s``), :data:`NONE`
in integer ones (token counts); a record's error kind is ``None`` when it has none.
The session columns (``session``, ``turn``, ``session_seq``, ``fanout``) may be left out
(``None``): the session figures then are not computed; so may ``model`` (the model each
request named, ``""`` when not recorded): then there are no figures per model; and so
may ``tenant`` and ``priority_class`` (``""`` where a request had none).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from loadtest.analysis.gaps import GapTable
from loadtest.analysis.records import ErrorKind, RequestRecord, TokenSource

NONE = -1  # an integer field (a token count) that is None
SOURCES = tuple(TokenSource)  # token_source codes: index in this tuple


@dataclass(frozen=True)
class RecordColumns:
    """The fields :func:`build_stage` reads, one array each (one row per record, in the
    records' order), and their inter-chunk gaps."""

    start_s: np.ndarray
    e2e_s: np.ndarray
    ttft_s: np.ndarray
    scheduled_s: np.ndarray
    ok: np.ndarray
    user: np.ndarray
    output_tokens: np.ndarray
    prompt_tokens: np.ndarray
    requested_output_tokens: np.ndarray
    expected_prompt_tokens: np.ndarray
    token_source: np.ndarray
    error_kind: tuple[ErrorKind | None, ...]
    gaps: GapTable
    session: np.ndarray | None = None
    turn: np.ndarray | None = None
    session_seq: np.ndarray | None = None  # NONE where unknown
    fanout: np.ndarray | None = None  # NONE for a request that is no agent step's
    cancel_after_s: np.ndarray | None = None  # NaN for a request the client was not to abandon
    model: np.ndarray | None = None  # strings, "" where not recorded
    tenant: np.ndarray | None = None  # strings, "" where not recorded
    priority_class: np.ndarray | None = None  # strings, "" where none was asked for

    def __post_init__(self) -> None:
        n = len(self.start_s)
        sizes = {len(getattr(self, f)) for f in self.__dataclass_fields__ if getattr(self, f) is not None}
        if sizes != {n}:
            raise ValueError(f"columns of different lengths: {sorted(sizes)}")

    def __len__(self) -> int:
        return len(self.start_s)

    @functools.cached_property
    def end_s(self) -> np.ndarray:
        """``start_s + e2e_s`` (:attr:`RequestRecord.end_s`)."""
        return self.start_s + self.e2e_s

    def take(self, rows: np.ndarray) -> RecordColumns:
        """The records where the boolean mask ``rows`` is true, in order."""
        rows = np.asarray(rows, dtype=bool)
        if rows.all():
            return self
        kinds = tuple(k for k, keep in zip(self.error_kind, rows.tolist()) if keep)
        arrays = {f: None if getattr(self, f) is None else getattr(self, f)[rows]
                  for f in self.__dataclass_fields__ if f not in ("error_kind", "gaps")}
        return RecordColumns(**arrays, error_kind=kinds, gaps=self.gaps.select(rows))

    @classmethod
    def of(cls, records: Sequence[RequestRecord] | RecordColumns) -> RecordColumns:
        """``records`` as columns (columns as they are)."""
        return records if isinstance(records, RecordColumns) else cls.of_records(records)

    @classmethod
    def of_records(cls, records: Sequence[RequestRecord]) -> RecordColumns:
        """The columns of ``records`` (their gaps from each one's ``itl_s``)."""
        n = len(records)

        def floats(field: str) -> np.ndarray:
            values = (getattr(r, field) for r in records)
            return np.fromiter((np.nan if v is None else v for v in values), dtype=float, count=n)

        def ints(field: str) -> np.ndarray:
            values = (getattr(r, field) for r in records)
            return np.fromiter((NONE if v is None else v for v in values), dtype=np.int64, count=n)

        def strings(field: str) -> np.ndarray:
            return np.array([getattr(r, field) or "" for r in records], dtype=str)

        codes = {source: i for i, source in enumerate(SOURCES)}
        return cls(
            start_s=floats("start_s"), e2e_s=floats("e2e_s"), ttft_s=floats("ttft_s"),
            scheduled_s=floats("scheduled_s"), ok=np.fromiter((r.ok for r in records), dtype=bool, count=n),
            user=ints("user"), output_tokens=ints("output_tokens"), prompt_tokens=ints("prompt_tokens"),
            requested_output_tokens=ints("requested_output_tokens"),
            expected_prompt_tokens=ints("expected_prompt_tokens"),
            token_source=np.fromiter((codes[r.token_source] for r in records), dtype=np.int8, count=n),
            error_kind=tuple(r.error_kind for r in records), gaps=GapTable.of_records(records),
            session=ints("session"), turn=ints("turn"), session_seq=ints("session_seq"), fanout=ints("fanout"),
            cancel_after_s=floats("cancel_after_s"),
            model=strings("model"), tenant=strings("tenant"), priority_class=strings("priority_class"),
        )
