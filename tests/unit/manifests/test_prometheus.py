"""Scrape configs, prometheus-operator monitors and alert rules."""

from __future__ import annotations

import pytest
from manifest_helpers import CATALOG, cluster_config, promql_parser

from serving.manifests import render_prometheus, render_rayservice
from serving.manifests.metric_names import referenced_metrics, serveout_series_names
from serving.manifests.naming import gateway_service_name
from serving.manifests.prometheus import RULES_FILE

KNOWN = serveout_series_names()


def _rules(config, target) -> list[dict]:
    return [r for g in render_prometheus(config, target)["rules"]["groups"] for r in g["rules"]]


def test_rules_use_only_metrics_the_gateway_and_router_expose(config, target):
    for rule in _rules(config, target):
        names = referenced_metrics(rule["expr"])
        assert names, f"{rule['alert']} names no metric"
        assert names <= KNOWN, f"{rule['alert']}: unknown {sorted(names - KNOWN)}"


def test_required_alerts_watch_the_right_metrics(config, target):
    by_name = {r["alert"]: referenced_metrics(r["expr"]) for r in _rules(config, target)}
    assert "serveout_rejected_requests_total" in by_name["ServeoutOverloaded"]
    assert "serveout_queue_depth" in by_name["ServeoutQueueSaturated"]
    assert by_name["ServeoutReplicasNotReady"] == {"serveout_replicas"}
    for rule in _rules(config, target):
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["for"].endswith("m") and rule["annotations"]["summary"]


def test_rules_are_filtered_to_this_deployment(config, target):
    for rule in _rules(config, target):
        expr = rule["expr"]
        assert f'model="{config.model.name}"' in expr or 'deployment="serveout:engine"' in expr


def test_thresholds_follow_the_config(h200):
    spec = CATALOG.get("llama-3.1-8b-instruct")
    small = {r["alert"]: r for r in _rules(cluster_config(spec, h200, replicas={"max_ongoing_requests": 10}), h200)}
    large = {r["alert"]: r for r in _rules(cluster_config(spec, h200, replicas={"max_ongoing_requests": 100}), h200)}
    assert small["ServeoutQueueSaturated"]["expr"].endswith("> 9")
    assert large["ServeoutQueueSaturated"]["expr"].endswith("> 90")
    assert "< 2" in small["ServeoutReplicasNotReady"]["expr"]  # the fixed replica count


def test_no_replica_alert_is_dropped_when_scaling_to_zero(h200):
    spec = CATALOG.get("llama-3.1-8b-instruct")
    to_zero = cluster_config(spec, h200, autoscaling={"enabled": True, "min_replicas": 0, "max_replicas": 2})
    assert "ServeoutNoReplicaReady" in {r["alert"] for r in _rules(cluster_config(spec, h200), h200)}
    assert "ServeoutNoReplicaReady" not in {r["alert"] for r in _rules(to_zero, h200)}


def test_rules_parse_as_promql(config, target):
    parser = promql_parser()
    for rule in _rules(config, target):
        parser.parse(rule["expr"])


def test_plain_scrape_config(config, target):
    prom = render_prometheus(config, target)["scrape_config"]
    assert prom["rule_files"] == [RULES_FILE]
    jobs = {job["job_name"]: job for job in prom["scrape_configs"]}
    gateway = jobs["serveout-gateway"]
    assert gateway["metrics_path"] == "/metrics"
    assert gateway["static_configs"][0]["targets"] == [
        f"{gateway_service_name(config)}.{target.namespace}.svc:{config.gateway.port}"]
    ray = jobs["serveout-ray-nodes"]
    keep = {r["regex"] for r in ray["relabel_configs"] if r.get("action") == "keep"}
    assert keep == {"metrics", render_rayservice(config, target)["metadata"]["name"]}


def _pod_templates(config, target) -> dict[str, dict]:
    cluster = render_rayservice(config, target)["spec"]["rayClusterConfig"]
    return {"head": cluster["headGroupSpec"]["template"],
            "worker": cluster["workerGroupSpecs"][0]["template"]}


def _selects(monitor: dict, template: dict) -> bool:
    labels = template["metadata"]["labels"]
    return monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()


def _has_port(template: dict, name: str) -> bool:
    return any(p["name"] == name for c in template["spec"]["containers"] for p in c["ports"])


def test_operator_monitors_select_the_rendered_pods(config, target):
    nodes, gateway, rule = render_prometheus(config, target)["operator_resources"]
    pods = _pod_templates(config, target)
    assert (nodes["kind"], gateway["kind"], rule["kind"]) == ("PodMonitor", "PodMonitor", "PrometheusRule")
    # Ray's metrics on every Ray pod ...
    assert _selects(nodes, pods["head"]) and _selects(nodes, pods["worker"])
    (endpoint,) = nodes["spec"]["podMetricsEndpoints"]
    assert _has_port(pods["head"], endpoint["port"]) and _has_port(pods["worker"], endpoint["port"])
    # ... the gateway once, through the head's Serve proxy (not once per node).
    assert _selects(gateway, pods["head"]) and not _selects(gateway, pods["worker"])
    (endpoint,) = gateway["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "serve" and endpoint["path"] == "/metrics"
    for resource in (nodes, gateway, rule):
        assert resource["metadata"]["namespace"] == target.namespace
        assert target.prometheus.monitor_labels.items() <= resource["metadata"]["labels"].items()
    assert rule["spec"]["groups"] == render_prometheus(config, target)["rules"]["groups"]


def test_a_monitor_that_misses_its_pods_is_detected(config, target):
    """The selector check above can fail: a wrong label value selects nothing."""
    nodes = render_prometheus(config, target)["operator_resources"][0]
    nodes["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"] = "another-deployment"
    assert not _selects(nodes, _pod_templates(config, target)["worker"])


@pytest.mark.parametrize("expr, expected", [
    ('sum(rate(serveout_requests_total{model="m"}[1m]))', {"serveout_requests_total"}),
    ('serveout_nope{deployment="serveout_queue_depth"}', {"serveout_nope"}),
    ("ray_node_gram_used{rayservice='x'} / 100", {"ray_node_gram_used"}),
    ("sum by (le) (x)", set()),
])
def test_referenced_metrics(expr, expected):
    assert referenced_metrics(expr) == expected


def test_an_unknown_metric_name_is_caught():
    assert not referenced_metrics("rate(serveout_request_total[5m])") <= KNOWN
    assert "serveout_request_latency_seconds" not in KNOWN  # histogram: only _bucket/_sum/_count
