"""Helpers for the manifest tests: the real model specs, the checked-in targets, configs."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client.registry import CollectorRegistry

from serving.config.loading import build_stack_config
from serving.config.model_spec import AcceleratorKind, ModelCatalog, ModelSpec
from serving.config.stack import StackConfig
from serving.gateway.metrics import GatewayMetrics
from serving.manifests.access import DEFAULT_KEYS_FILE
from serving.manifests.command import load_cluster_target
from serving.manifests.target import ClusterTarget
from serving.routing.metrics import RoutingMetricsCollector
from tests.paths import REPO  # noqa: E402

MODELS = REPO / "models"
TARGETS = REPO / "deploy" / "targets"
CATALOG = ModelCatalog(MODELS)
SPECS = CATALOG.specs()


def target_for(spec: ModelSpec) -> ClusterTarget:
    """The checked-in target a spec's accelerator runs on."""
    name = "cpu-local-kind" if spec.accelerator is AcceleratorKind.CPU else "h200-3x8"
    return load_cluster_target(TARGETS / f"{name}.yaml")


def cluster_config(spec: ModelSpec, target: ClusterTarget, **overrides) -> StackConfig:
    """A StackConfig for ``spec`` on ``target`` (two replicas and the default gateway mode
    unless overridden; the keys file where ``serving render`` puts it when the target names
    a keys Secret)."""
    data: dict = {"model": spec.name, "gateway": {"host": "0.0.0.0"},
                  "replicas": {"num_replicas": 2}}
    if target.api_keys_secret:
        data["gateway"]["api_keys_file"] = str(DEFAULT_KEYS_FILE)
    if spec.accelerator is AcceleratorKind.CPU:
        data["replicas"]["cpus_per_rank"] = 2 // spec.tensor_parallel_size or 1
    for key, value in overrides.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return build_stack_config(data, catalog=CATALOG, model_path=target.weights.model_path(spec.name))


_SERIES_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def serveout_series_names() -> frozenset[str]:
    """Every series name serveout exposes, read from the live metric objects (the
    gateway's and the routing collector's), e.g. ``serveout_requests_total`` or
    ``serveout_request_latency_seconds_bucket`` (not the bare histogram name)."""
    registry = CollectorRegistry()
    GatewayMetrics(registry)
    families = list(registry.collect()) + RoutingMetricsCollector().describe()
    return frozenset(f.name + suffix for f in families for suffix in _SERIES_SUFFIXES[f.type])


def referenced_metrics(expr: str) -> set[str]:
    """Metric names a PromQL expression mentions: identifiers outside string literals
    that start with ``serveout_``, ``ray_`` or ``vllm:`` (label names here never do)."""
    unquoted = _QUOTED.sub('""', expr)
    return {t for t in _IDENTIFIER.findall(unquoted) if t.startswith(("serveout_", "ray_", "vllm:"))}


def ray_metric_names() -> frozenset[str]:
    """Ray's metric names, read from the Grafana panels of the installed Ray (its own
    record of what it exports), without importing Ray."""
    import importlib.util

    ray_root = Path(importlib.util.find_spec("ray").origin).parent
    panels = ray_root / "dashboard" / "modules" / "metrics" / "dashboards"
    text = "".join(p.read_text() for p in sorted(panels.glob("*_panels.py")))
    return frozenset(re.findall(r"\bray_[a-z0-9_]+\b", text))


def promql_parser():
    """The PromQL parser (PyPI `promql-parser`, pinned in requirements/cpu.lock)."""
    import promql_parser

    return promql_parser
