"""Gaps as one table: rows, selection, running sums as Python sums them,
and stage figures from a table equal to those from each record's ``itl_s``."""

from dataclasses import replace
from itertools import accumulate, chain

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtest.analysis import gaps as gaps_module
from loadtest.analysis.columns import RecordColumns
from loadtest.analysis.gaps import GapTable, segment_cumsum_blocks
from loadtest.analysis.metrics import build_stage
from loadtest.analysis.slo import parse_slos
from loadtest.analysis.summary import GeneratorReport
from loadtest.profiles import ClosedLoad, StagePlan
from tests.unit.loadtest.loadtest_factories import ErrorKind, failed_record, ok_record

rows = st.lists(st.one_of(st.none(), st.lists(st.floats(0.0, 5.0), max_size=12).map(np.array)), max_size=30)


@settings(max_examples=200, deadline=None)
@given(rows, st.data())
def test_rows_selection_and_blanking_keep_each_records_gaps(arrays, data):
    table = GapTable.of_arrays(arrays)
    plain = [[] if a is None else a.tolist() for a in arrays]
    assert len(table) == len(arrays)
    assert table.tolists() == plain
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=len(arrays), max_size=len(arrays))), dtype=bool)
    assert table.select(mask).tolists() == [g for g, keep in zip(plain, mask) if keep]
    assert table.blank(mask).tolists() == [[] if keep else g for g, keep in zip(plain, mask)]


@settings(max_examples=200, deadline=None)
@given(rows, st.integers(1, 40))
def test_running_sums_are_the_floats_python_adds_up(arrays, block):
    table = GapTable.of_arrays(arrays)
    firsts = np.linspace(0.1, 7.3, len(arrays))
    expected = list(chain.from_iterable(accumulate([f, *(a.tolist() if a is not None else [])])
                                        for f, a in zip(firsts.tolist(), arrays)))
    saved = gaps_module._BLOCK_VALUES
    gaps_module._BLOCK_VALUES = block  # small blocks: rows padded and cut in many pieces
    try:
        blocks = [sums for _, sums in segment_cumsum_blocks(firsts, table)]
        assert np.concatenate(blocks or [np.zeros(0)]).tolist() == expected
    finally:
        gaps_module._BLOCK_VALUES = saved


def test_columns_need_one_gap_row_per_record():
    columns = RecordColumns.of_records([ok_record(0.0, 0.1, [0.1, 0.2])])
    with pytest.raises(ValueError, match="different lengths"):
        replace(columns, gaps=GapTable.of_arrays([]))


instants = st.floats(0.0, 20.0)


@st.composite
def record(draw):
    start = draw(instants)
    if draw(st.integers(0, 6)) == 0:
        return failed_record(start, ErrorKind.TIMEOUT, elapsed=draw(st.floats(0.01, 5)))
    r = ok_record(start, draw(st.floats(0.01, 2)), draw(st.lists(st.floats(0.001, 0.5), max_size=15)))
    if draw(st.integers(0, 8)) == 0:
        r = r.model_copy(update={"ttft_s": None, "itl_s": []})
    return r


@settings(max_examples=60, deadline=None)
@given(st.lists(record(), min_size=1, max_size=25), st.sampled_from(["", "itl_p90=80ms,ttft_p95=1s", "itl_max=0.3s",
                                                                      "itl_mean=0.2s,tpot_p99=0.3s"]))
def test_figures_from_columns_with_a_gap_table_equal_those_from_the_records(records, slos):
    common = dict(plan=StagePlan(index=0, label="x", load=ClosedLoad(users=3)), window=(1.0, 15.0), timed=True,
                  objectives=parse_slos(slos), started_unix=0.0, offset_s=0.0, generator=GeneratorReport())
    bare = RecordColumns.of_records([r.model_copy(update={"itl_s": []}) for r in records])
    columns = replace(bare, gaps=GapTable.of_records(records))
    assert build_stage(columns, **common) == build_stage(records, **common)
