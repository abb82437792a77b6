"""Scrape configs, prometheus-operator monitors and alert rules."""

from __future__ import annotations

import re

import pytest

from serving.manifests import render_prometheus, render_rayservice
from serving.manifests.naming import gateway_service_name
from serving.manifests.prometheus import RULES_FILE
from tests.unit.serving.manifests.manifest_helpers import (
    CATALOG,
    cluster_config,
    promql_parser,
    referenced_metrics,
    serveout_series_names,
)

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
    groups = {g["groupName"]: g["template"] for g in cluster["workerGroupSpecs"]}
    return {"head": cluster["headGroupSpec"]["template"], "worker": groups.pop("engines"), **groups}


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
    assert all(_selects(nodes, pod) for pod in pods.values())
    (endpoint,) = nodes["spec"]["podMetricsEndpoints"]
    assert all(_has_port(pod, endpoint["port"]) for pod in pods.values())
    # ... the gateway once, through the head's Serve proxy (not once per node).
    assert [role for role, pod in pods.items() if _selects(gateway, pod)] == ["head"]
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


def _gateway_scrapes(config, target) -> tuple[dict, dict]:
    """The gateway's job of the plain config and its PodMonitor endpoint."""
    prom = render_prometheus(config, target)
    (job,) = [j for j in prom["scrape_config"]["scrape_configs"] if j["job_name"] == "serveout-gateway"]
    (endpoint,) = prom["operator_resources"][1]["spec"]["podMetricsEndpoints"]
    return job, endpoint


def test_gateway_is_scraped_with_a_key_whenever_its_metrics_need_one(config, target):
    """With API keys and metrics_public false /metrics answers 401 without a key: a
    scrape without credentials loses every serveout_* series."""
    job, endpoint = _gateway_scrapes(config, target)
    needs_key = config.gateway.api_keys_file is not None and not config.gateway.metrics_public
    assert ("authorization" in job) is needs_key and ("authorization" in endpoint) is needs_key
    if needs_key:
        secret = target.api_keys_secret
        assert job["authorization"] == {
            "type": "Bearer", "credentials_file": f"/etc/prometheus/secrets/{secret}/metrics-key"}
        assert endpoint["authorization"] == {
            "type": "Bearer", "credentials": {"name": secret, "key": "metrics-key"}}


def test_keyed_and_public_metrics_are_both_rendered(h200):
    """Both branches of the check above: the H200 example has keys; metrics_public opts out."""
    spec = CATALOG.get("llama-3.1-8b-instruct")
    assert "authorization" in _gateway_scrapes(cluster_config(spec, h200), h200)[0]
    public = cluster_config(spec, h200, gateway={"metrics_public": True})
    job, endpoint = _gateway_scrapes(public, h200)
    assert "authorization" not in job and "authorization" not in endpoint


def test_ray_nodes_need_no_credentials(config, target):
    prom = render_prometheus(config, target)
    (job,) = [j for j in prom["scrape_config"]["scrape_configs"] if j["job_name"] == "serveout-ray-nodes"]
    assert "authorization" not in job
    assert "authorization" not in prom["operator_resources"][0]["spec"]["podMetricsEndpoints"][0]


def _refusals() -> list[Exception]:
    """One refusal of each kind, from the gateway's real admission and rate-limit code."""
    from serving.config.gateway import KeyLimits
    from serving.errors import OverloadedError
    from serving.admission.bound import AdmissionController
    from serving.admission.api_keys import Caller
    from serving.admission.key_limits import KeyRateLimiter

    def refused(attempt) -> Exception:
        with pytest.raises(OverloadedError) as info:
            attempt()
        return info.value

    full = AdmissionController(1)
    full.admit("a")
    shared = AdmissionController(4, clock=lambda: 0.0)
    shared.admit("a")
    shared.admit("a")
    shared.admit("b")
    held_back = AdmissionController(4)  # sheddable may fill 2 of 4
    held_back.admit("a", klass="sheddable")
    held_back.admit("a", klass="sheddable")
    own = AdmissionController(10)
    own.admit("a", concurrency=1)
    limiter = KeyRateLimiter(clock=lambda: 0.0)
    per_minute = Caller("a", KeyLimits(rpm=1))
    limiter.admit(per_minute)
    tokens = Caller("b", KeyLimits(tpm=10))
    limiter.admit(tokens).reserve_tokens(10)
    return [refused(lambda: full.admit("a")),  # the bound
            refused(lambda: shared.admit("a")),  # a's fair share while b is active
            refused(lambda: own.admit("a", concurrency=1)),
            refused(lambda: limiter.admit(per_minute)),
            refused(lambda: limiter.admit(tokens).reserve_tokens(10)),
            refused(lambda: held_back.admit("a", klass="sheddable"))]


_MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')


def _counted(expr: str, metric: str, labels: dict[str, str]) -> bool:
    """Whether ``metric``'s selector in ``expr`` selects a series with ``labels``
    (PromQL regexes are anchored at both ends)."""
    (body,) = re.findall(re.escape(metric) + r"\{([^}]*)\}", expr)
    checks = {"=": lambda v, a: a == v, "!=": lambda v, a: a != v,
              "=~": lambda v, a: re.fullmatch(v, a) is not None, "!~": lambda v, a: re.fullmatch(v, a) is None}
    return all(checks[op](value, labels.get(name, "")) for name, op, value in _MATCHER.findall(body))


def test_overload_alert_counts_only_refusals_of_a_full_server(config, target):
    """serveout_rejected_requests_total also counts a key's own rpm/tpm/concurrency
    refusals: those are the client's quota, and must not page anyone as overload."""
    from serving.errors import RateLimitedError

    refusals = _refusals()
    server_full = {e.reason for e in refusals if not isinstance(e, RateLimitedError)} - {"priority"}
    assert server_full == {"overloaded", "fair_share"}
    assert {e.reason for e in refusals} - server_full == {"concurrency", "rpm", "tpm", "priority"}
    (rule,) = [r for r in _rules(config, target) if r["alert"] == "ServeoutOverloaded"]
    counted = {e.reason for e in refusals if _counted(
        rule["expr"], "serveout_rejected_requests_total", {"model": config.model.name, "reason": e.reason})}
    assert counted == server_full


def test_an_unfiltered_overload_alert_is_detected():
    """The check above can fail: the expression used before API keys counts every reason."""
    old = 'sum(rate(serveout_rejected_requests_total{model="m"}[5m])) / sum(rate(serveout_requests_total{model="m"}[5m]))'
    assert _counted(old, "serveout_rejected_requests_total", {"model": "m", "reason": "rpm"})
