"""Figures per model (``stages[].models``) from records naming several models, and the
records' ``model`` field (old records without it still load)."""

import math

import numpy as np
import pytest

from loadtest.analysis.metrics import build_stage, request_tpot
from loadtest.analysis.per_model import model_groups
from loadtest.analysis.records import ErrorKind, parse_record_line, record_line
from loadtest.analysis.stats import Distribution
from loadtest.analysis.summary import GeneratorReport
from loadtest.profiles import parse_profile
from tests.unit.loadtest.loadtest_factories import failed_record, ok_record


def stage_of(records, window=(1.0, 11.0)):
    return build_stage(records, plan=parse_profile("concurrency:users=4").next_stage([]), window=window, timed=True,
                       objectives=(), started_unix=1_800_000_000.0, offset_s=0.0, generator=GeneratorReport())


def mixed_records():
    """12 s of requests: ``clinic`` twice as often as ``pharmacy``, ``base`` rarely; some
    failures, a client cancel and requests in the warm-up (before 1 s)."""
    records = []
    for i in range(60):
        model = ("clinic", "clinic", "pharmacy", "clinic", "pharmacy", "base")[i % 6]
        start = i * 0.2
        ttft = {"clinic": 0.05, "pharmacy": 0.2, "base": 0.1}[model] + 0.001 * i
        records.append(ok_record(start, ttft, [0.01 + 0.0001 * i] * 7, model=model))
    records.append(failed_record(5.0, ErrorKind.HTTP_5XX).model_copy(update={"model": "pharmacy"}))
    records.append(failed_record(6.0, ErrorKind.TIMEOUT).model_copy(update={"model": "pharmacy"}))
    records.append(failed_record(7.0, ErrorKind.CLIENT_CANCELLED).model_copy(update={"model": "clinic"}))
    return records


def test_each_model_gets_its_counts_and_its_own_percentiles():
    records = mixed_records()
    stage = stage_of(records)
    measured = [r for r in records if 1.0 <= r.start_s < 11.0]
    assert [m.model for m in stage.models] == ["clinic", "pharmacy", "base"]  # most requested first
    for m in stage.models:
        mine = [r for r in measured if r.model == m.model]
        ok = [r for r in mine if r.ok]
        assert m.requests == len(mine)
        assert m.errors == sum(not r.ok and r.error_kind is not ErrorKind.CLIENT_CANCELLED for r in mine)
        assert m.share == len(mine) / stage.requests.measured
        # the exact percentiles of the model's own samples, as the stage's are computed
        assert m.ttft == Distribution.of([r.ttft_s for r in ok])
        assert m.tpot == Distribution.of([request_tpot(r) for r in ok])
        assert m.e2e == Distribution.of([r.e2e_s for r in ok])
    assert {m.model: (m.requests, m.errors) for m in stage.models} == {"clinic": (26, 0), "pharmacy": (18, 2),
                                                                       "base": (9, 0)}
    assert sum(m.requests for m in stage.models) == stage.requests.measured
    assert sum(m.errors for m in stage.models) == stage.requests.failed
    assert math.fsum(m.share for m in stage.models) == pytest.approx(1.0, abs=1e-12)
    # the models' streamed tokens add up to the stage's
    rates = [m.output_tokens_per_s for m in stage.models]
    assert math.fsum(rates) == pytest.approx(stage.throughput.output_tokens_per_s, rel=1e-12)
    clinic, pharmacy = stage.models[0], stage.models[1]
    assert clinic.ttft.p95 < pharmacy.ttft.p50  # the slow adapter shows apart


def test_one_model_or_old_records_give_no_figures_per_model():
    records = mixed_records()
    single = [r.model_copy(update={"model": "base"}) for r in records]
    old = [r.model_copy(update={"model": None}) for r in records]
    assert stage_of(single).models == () and stage_of(old).models == ()
    # a model whose requests all fell outside the measured window is not a measured model
    only_warmup = [r.model_copy(update={"model": "base" if r.start_s >= 1.0 else "clinic"}) for r in records]
    assert stage_of(only_warmup).models == ()


def test_model_groups_order_and_masks():
    models = np.array(["b", "a", "b", "c", "a", "b"])
    groups = model_groups(models)
    assert [(name, mask.tolist()) for name, mask in groups] == [
        ("b", [True, False, True, False, False, True]),
        ("a", [False, True, False, False, True, False]),
        ("c", [False, False, False, True, False, False]),
    ]
    assert model_groups(np.array(["a", "a"])) == [] and model_groups(np.array([], dtype=str)) == []


def test_records_carry_their_model_and_old_lines_still_load():
    old_line = record_line(ok_record(0.0, 0.1, [0.01]))  # a record written before models were recorded
    assert '"model"' not in old_line and parse_record_line(old_line).model is None
    named = ok_record(0.0, 0.1, [0.01], model="clinic")
    assert parse_record_line(record_line(named)) == named
