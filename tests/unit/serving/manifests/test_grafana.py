"""The Grafana dashboard: valid JSON, a sane layout, and queries on real metric names."""

from __future__ import annotations

import json

from serving.config.model_spec import AcceleratorKind
from serving.manifests import render_grafana_dashboard
from tests.unit.serving.manifests.manifest_helpers import (
    CATALOG,
    cluster_config,
    promql_parser,
    ray_metric_names,
    referenced_metrics,
    serveout_series_names,
)

KNOWN = serveout_series_names() | ray_metric_names()


def _dashboard(config) -> dict:
    return json.loads(json.dumps(render_grafana_dashboard(config)))  # valid JSON, round trip


def _targets(dashboard: dict) -> list[dict]:
    return [t for p in dashboard["panels"] for t in p.get("targets", [])]


def test_dashboard_is_valid_json_with_a_sane_layout(config):
    dashboard = _dashboard(config)
    assert dashboard == render_grafana_dashboard(config)
    assert dashboard["uid"] and len(dashboard["uid"]) <= 40
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24
        for dy in range(grid["h"]):
            for dx in range(grid["w"]):
                cell = (grid["x"] + dx, grid["y"] + dy)
                assert cell not in cells, f"panel {panel['title']!r} overlaps another"
                cells.add(cell)
        if panel["type"] == "timeseries":
            ref_ids = [t["refId"] for t in panel["targets"]]
            assert panel["targets"] and len(ref_ids) == len(set(ref_ids))
            assert panel["datasource"]["uid"] == "${datasource}"


def test_every_query_names_known_metrics(config):
    for target in _targets(_dashboard(config)):
        names = referenced_metrics(target["expr"])
        assert names, target["expr"]
        assert names <= KNOWN, f"unknown {sorted(names - KNOWN)} in {target['expr']}"


def test_queries_parse_as_promql(config):
    parser = promql_parser()
    for target in _targets(_dashboard(config)):
        parser.parse(target["expr"])


def test_the_panels_an_operator_needs(config):
    dashboard = _dashboard(config)
    titles = {p["title"] for p in dashboard["panels"]}
    assert {"Requests/s by status", "Time to first token", "Request latency", "Tokens/s",
            "In-flight requests", "Queue depth", "Replicas", "Waiting per replica",
            "Running per replica", "KV cache use per replica", "Prefix-cache hit rate per replica",
            "Routing decisions/s", "Rejections/s by reason"} <= titles
    used = set().union(*(referenced_metrics(t["expr"]) for t in _targets(dashboard)))
    assert {"serveout_time_to_first_token_seconds_bucket", "serveout_request_latency_seconds_bucket",
            "serveout_rejected_requests_total", "serveout_queue_depth", "serveout_replicas",
            "serveout_engine_kv_cache_usage", "serveout_routing_decisions_total"} <= used
    quantiles = [t for t in _targets(dashboard) if "histogram_quantile" in t["expr"]]
    assert {t["legendFormat"] for t in quantiles} == {"p50", "p95"}


def test_gpu_panels_only_for_gpu_specs(config):
    used = set().union(*(referenced_metrics(t["expr"]) for t in _targets(_dashboard(config))))
    on_gpu = config.model.accelerator is not AcceleratorKind.CPU
    assert ("ray_node_gpus_utilization" in used) is on_gpu


def test_prefix_hit_rate_at_routing_only_for_the_policies_that_route_on_prefixes(h200):
    spec = CATALOG.get("llama-3.1-8b-instruct")
    titles = lambda c: {p["title"] for p in _dashboard(c)["panels"]}  # noqa: E731
    for policy in ("prefix-affinity", "cache-aware"):
        assert "Prefix hit rate at routing time" in titles(cluster_config(spec, h200, routing={"policy": policy}))
    for policy in ("least-loaded", "round-robin", "session"):
        assert "Prefix hit rate at routing time" not in titles(cluster_config(spec, h200, routing={"policy": policy}))
    panel = next(p for p in _dashboard(cluster_config(spec, h200))["panels"]
                 if p["title"] == "Prefix hit rate at routing time")
    assert 'decision="cache_hit"' in panel["targets"][0]["expr"]


def test_admission_bound_is_drawn_from_the_config(h200):
    config = cluster_config(CATALOG.get("llama-3.1-8b-instruct"), h200, gateway={"max_in_flight": 777})
    panel = next(p for p in _dashboard(config)["panels"] if p["title"] == "In-flight requests")
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps[-1]["value"] == 777


def test_ray_names_come_from_the_installed_ray():
    names = ray_metric_names()
    assert {"ray_node_cpu_utilization", "ray_node_gpus_utilization", "ray_node_gram_used"} <= names
    assert "ray_node_gpu_utilisation" not in names


def _ray_source(relative: str) -> str:
    import importlib.util
    from pathlib import Path

    return (Path(importlib.util.find_spec("ray").origin).parent / relative).read_text()


def test_ray_reports_gpu_memory_in_mib():
    """The premise of the panel below, read from the installed Ray: NVML bytes // 1024**2."""
    providers = _ray_source("dashboard/modules/reporter/gpu_providers.py")
    assert "MB = 1024 * 1024" in providers and "memory_used=int(memory_info.used) // MB" in providers
    panels = _ray_source("dashboard/modules/metrics/dashboards/default_dashboard_panels.py")
    assert "ray_node_gram_used{{" in panels and "* 1024 * 1024" in panels  # Ray's own panel converts back


def test_gpu_memory_panel_shows_bytes_from_mib(h200):
    dashboard = _dashboard(cluster_config(CATALOG.get("llama-3.3-70b-instruct"), h200))
    panel = next(p for p in dashboard["panels"] if p["title"] == "GPU memory used")
    (target,) = panel["targets"]
    assert referenced_metrics(target["expr"]) == {"ray_node_gram_used"}
    assert target["expr"].endswith(" * 1048576"), "MiB -> bytes"
    assert panel["fieldConfig"]["defaults"]["unit"] == "bytes"  # Grafana's IEC bytes (not decmbytes = 10^6)


def test_api_key_panels_only_when_the_gateway_has_keys(config):
    dashboard = _dashboard(config)
    titles = {p["title"] for p in dashboard["panels"]}
    has_keys = config.gateway.api_keys_file is not None
    assert ("Requests/s per API key" in titles) is has_keys
    assert ("API keys" in titles) is has_keys
    if has_keys:
        used = set().union(*(referenced_metrics(t["expr"]) for t in _targets(dashboard)))
        assert {"serveout_key_requests_total", "serveout_key_rejected_requests_total",
                "serveout_auth_failures_total"} <= used


def test_adapters_add_per_model_panels_and_the_gateway_panels_cover_every_served_name(h200):
    spec = CATALOG.get("smollm2-135m-instruct")
    config = cluster_config(spec, h200, adapters=[{"name": "clinic", "path": "/models/adapters/clinic"},
                                                  {"name": "pharmacy.v2", "path": "/models/adapters/p"}])
    dashboard = _dashboard(config)
    titles = {p["title"] for p in dashboard["panels"]}
    assert {"Requests/s per model", "Adapters loaded per replica", "Adapter slot waits/s"} <= titles
    parser = promql_parser()
    for target in _targets(dashboard):
        parser.parse(target["expr"])
        assert referenced_metrics(target["expr"]) <= KNOWN
    by_status = next(p for p in dashboard["panels"] if p["title"] == "Requests/s by status")
    assert 'model=~"smollm2-135m-instruct|clinic|pharmacy\\\\.v2"' in by_status["targets"][0]["expr"]
    plain = _dashboard(cluster_config(spec, h200))
    assert "Requests/s per model" not in {p["title"] for p in plain["panels"]}
