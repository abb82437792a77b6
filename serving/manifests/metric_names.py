"""Which metric series serveout really exposes, and which ones a PromQL query names.

The names come from the live metric objects, not from a list kept here: a fresh
:class:`~serving.gateway.metrics.GatewayMetrics` on a private registry and the
families :class:`~serving.routing.metrics.RoutingMetricsCollector` describes, so
a renamed metric makes every query that still uses the old name fail its check.
"""

from __future__ import annotations

import re

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import CollectorRegistry

from serving.gateway.metrics import GatewayMetrics
from serving.routing.metrics import RoutingMetricsCollector

_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "gauge": ("",),
    "summary": ("", "_sum", "_count"),
}

_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_METRIC_PREFIXES = ("serveout_", "ray_", "vllm:")


def serveout_families() -> list[Metric]:
    """The metric families of the gateway and the routing collector (no samples needed)."""
    registry = CollectorRegistry()
    GatewayMetrics(registry)
    return list(registry.collect()) + RoutingMetricsCollector().describe()


def serveout_series_names() -> frozenset[str]:
    """Every series name a query may use, e.g. ``serveout_requests_total`` or
    ``serveout_request_latency_seconds_bucket`` (not the bare histogram name)."""
    names: set[str] = set()
    for family in serveout_families():
        for suffix in _SUFFIXES[family.type]:
            names.add(family.name + suffix)
    return frozenset(names)


def referenced_metrics(expr: str) -> set[str]:
    """Metric names a PromQL expression mentions: identifiers outside string literals
    that start with ``serveout_``, ``ray_`` or ``vllm:`` (label names here never do)."""
    unquoted = _QUOTED.sub('""', expr)
    return {token for token in _IDENTIFIER.findall(unquoted) if token.startswith(_METRIC_PREFIXES)}
