"""Figures and verdicts per tenant and per priority class (``stages[].tenants``,
``stages[].classes``) from records of several tenants."""

import math

import pytest

from loadtest.analysis.metrics import build_stage
from loadtest.analysis.per_tenant import KEY_CLASS
from loadtest.analysis.records import ErrorKind
from loadtest.analysis.slo import parse_slos
from loadtest.analysis.stats import Distribution
from loadtest.analysis.summary import GeneratorReport
from loadtest.profiles import parse_profile
from tests.unit.loadtest.loadtest_factories import failed_record, ok_record

CLASSES = {"chat": "interactive", "bulk": "batch", "probe": None}


def stage_of(records, slos="", own=None):
    return build_stage(records, plan=parse_profile("concurrency:users=4").next_stage([]), window=(1.0, 11.0),
                       timed=True, objectives=parse_slos(slos), started_unix=1_800_000_000.0, offset_s=0.0,
                       generator=GeneratorReport(), tenant_objectives=own)


def tenant_records():
    """12 s of requests: ``chat`` fast, ``bulk`` slow and rate limited twice, ``probe``
    rare and with no class of its own."""
    records = []
    for i in range(60):
        tenant = ("chat", "chat", "bulk", "chat", "bulk", "probe")[i % 6]
        ttft = {"chat": 0.05, "bulk": 0.8, "probe": 0.1}[tenant] + 0.001 * i
        records.append(ok_record(i * 0.2, ttft, [0.01] * 7, tenant=tenant, priority_class=CLASSES[tenant]))
    for start in (5.0, 6.0):
        records.append(failed_record(start, ErrorKind.HTTP_429, status=429).model_copy(
            update={"tenant": "bulk", "priority_class": "batch"}))
    return records


def test_each_tenant_and_class_gets_its_own_figures():
    records = tenant_records()
    stage = stage_of(records, slos="e2e_p95=2s")
    measured = [r for r in records if 1.0 <= r.start_s < 11.0]
    assert [t.tenant for t in stage.tenants] == ["chat", "bulk", "probe"]
    for t in stage.tenants:
        mine = [r for r in measured if r.tenant == t.tenant]
        ok = [r for r in mine if r.ok]
        assert (t.requests, t.errors, t.priority_class) == (len(mine), len(mine) - len(ok), CLASSES[t.tenant])
        assert t.ttft == Distribution.of([r.ttft_s for r in ok])
        assert t.itl == Distribution.of([g for r in ok for g in r.itl_s])
        assert t.slo.passed is None and t.slo.good_requests == len(ok)  # goodput against the run's SLO, no verdict
    bulk = stage.tenants[1]
    assert (bulk.errors, bulk.rate_limited) == (2, 2)
    assert sum(t.requests for t in stage.tenants) == stage.requests.measured
    rates = [t.output_tokens_per_s for t in stage.tenants]
    assert math.fsum(rates) == pytest.approx(stage.throughput.output_tokens_per_s, rel=1e-12)
    assert {c.priority_class: c.requests for c in stage.classes} == {
        "interactive": stage.tenants[0].requests, "batch": bulk.requests, KEY_CLASS: stage.tenants[2].requests}
    assert stage.passed is True


def test_a_tenant_missing_its_own_slo_fails_the_stage_with_its_name():
    own = {"bulk": parse_slos("ttft_p95=200ms,error_rate=50%"), "chat": parse_slos("ttft_p95=200ms")}
    stage = stage_of(tenant_records(), own=own)
    chat, bulk, probe = stage.tenants
    assert chat.slo.passed is True and probe.slo.passed is None
    assert bulk.slo.passed is False and [r.passed for r in bulk.slo.objectives] == [False, True]
    assert bulk.ttft.ci95  # judged figures carry their intervals
    assert stage.slo.passed is None  # no SLO for the run as a whole ...
    assert stage.passed is False and stage.verdict_reason == "tenant bulk: ttft_p95 missed"  # ... but for bulk


def test_no_tenant_figures_without_tenants_and_no_classes_when_none_was_asked():
    plain = [r.model_copy(update={"tenant": None, "priority_class": None}) for r in tenant_records()]
    stage = stage_of(plain)
    assert stage.tenants == () and stage.classes == () and stage.passed is None
    classless = [r.model_copy(update={"priority_class": None}) for r in tenant_records()]
    stage = stage_of(classless)
    assert len(stage.tenants) == 3 and stage.classes == ()
    one = [r.model_copy(update={"tenant": "chat"}) for r in tenant_records()]
    assert [t.tenant for t in stage_of(one).tenants] == ["chat"]  # one tenant still has its figures
