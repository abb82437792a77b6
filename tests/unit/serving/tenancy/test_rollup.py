"""Usage arithmetic: requests into per-minute rows, rows into a report with shares and costs."""

from __future__ import annotations

import pytest

from serving.tenancy.records import RequestRecord
from serving.tenancy.rollup import (ReplicaTime, UsageRow, Usage, deployment_cost, parse_by, parse_since, report,
                                    rollup, total)


def rec(key="a", model="m", at=120.0, status=200, prompt=10, cached=None, output=5, engine_s=1.0):
    return RequestRecord(at=at, key=key, model=model, endpoint="chat", status=status, prompt_tokens=prompt,
                         cached_tokens=cached, output_tokens=output, engine_s=engine_s)


def test_requests_roll_up_by_minute_key_and_model():
    rows = rollup([rec(), rec(at=170, cached=4), rec(at=181), rec(key="b"), rec(status=429, prompt=0, output=0,
                                                                                engine_s=0)])
    by = {(r.minute, r.key, r.model): r.usage for r in rows}
    assert by[120, "a", "m"] == Usage(requests=3, errors=1, prompt_tokens=20, cached_tokens=4, output_tokens=10,
                                      engine_s=2.0)
    assert by[180, "a", "m"].requests == 1 and by[120, "b", "m"].requests == 1
    assert by[120, "a", "m"].uncached_tokens == 16


def test_a_report_groups_by_any_dimension_and_shares_the_cost_by_engine_time():
    rows = [UsageRow(0, "a", "m1", Usage(2, 0, 100, 0, 50, 3.0)), UsageRow(60, "a", "m2", Usage(1, 0, 10, 0, 5, 1.0)),
            UsageRow(0, "b", "m1", Usage(4, 1, 40, 20, 20, 4.0))]
    lines = report(rows, ("key",), cost=8.0)
    assert [line.group for line in lines] == [("b",), ("a",)]  # equal shares: more requests first
    assert lines[1].usage.requests == 3 and lines[1].share == pytest.approx(0.5) and lines[1].cost == pytest.approx(4)
    assert sum(line.cost for line in lines) == pytest.approx(8.0)
    by_both = report(rows, ("key", "model"))
    assert len(by_both) == 3 and all(line.cost is None for line in by_both)
    assert total(by_both) == Usage(7, 1, 150, 20, 75, 8.0)


def test_the_deployment_costs_its_replicas_running_time():
    ran = [ReplicaTime(0, "r1", "cpu", 1, 3600), ReplicaTime(0, "r2", "h200", 2, 1800)]
    assert deployment_cost(ran, {"cpu": 0.1, "h200": 6.0}) == pytest.approx(0.1 + 6.0)
    assert deployment_cost(ran, {"cpu": 0.1}) is None  # an unpriced accelerator
    assert deployment_cost([], {"cpu": 0.1}) is None


def test_nothing_used_reports_no_share():
    lines = report([UsageRow(0, "a", "m", Usage(requests=1, errors=1))], ("key",), cost=1.0)
    assert lines[0].share == 0 and lines[0].cost == 0


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("15m", 900), ("24h", 86400), ("7d", 604800),
                                           ("1.5h", 5400)])
def test_windows(text, seconds):
    assert parse_since(text) == seconds


@pytest.mark.parametrize("bad", ["24", "h", "-1h", "1w", ""])
def test_bad_windows(bad):
    with pytest.raises(ValueError):
        parse_since(bad)


def test_dimensions():
    assert parse_by("key,model") == ("key", "model") and parse_by("model") == ("model",)
    for bad in ("key,key", "tenant", ""):
        with pytest.raises(ValueError):
            parse_by(bad)
