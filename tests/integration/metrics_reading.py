"""Reading the gateway's /metrics in tests (prometheus_client's own parser)."""

from __future__ import annotations

import time

from benchmarks.common.metrics import samples  # one /metrics reader for the tests and the benchmarks


def by_label(url: str, name: str, label: str) -> dict[str, float]:
    """``{value of label: sum of the samples carrying it}`` (summed over the other labels,
    such as ``gateway_replica`` with several gateway replicas)."""
    out: dict[str, float] = {}
    for key, value in samples(url, name).items():
        out[dict(key)[label]] = out.get(dict(key)[label], 0.0) + value
    return out


def wait_until(predicate, *, timeout_s: float, period_s: float = 0.5):
    """Poll ``predicate`` until it returns a truthy value; return it (or the last falsy one)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(period_s)


def settled(read, *, period_s: float = 1.5, timeout_s: float = 20.0):
    """``read()`` once two reads ``period_s`` apart agree: every process of the app
    publishes its series to /metrics about once a second, so a count read right after
    traffic may still grow."""
    deadline = time.monotonic() + timeout_s
    last = read()
    while True:
        time.sleep(period_s)
        value = read()
        if value == last or time.monotonic() > deadline:
            return value
        last = value
