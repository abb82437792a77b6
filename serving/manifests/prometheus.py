"""How Prometheus scrapes a deployment, in two flavours of the same thing.

What is scraped:

* the gateway's ``/metrics`` on the Serve HTTP port: every ``serveout_*`` series,
  including the per-replica engine stats and routing counters the request router
  publishes there. Any gateway replica, reached through any Serve proxy, answers
  for all of them (each replica's series labelled ``gateway_replica``:
  :mod:`serving.gateway.metrics_sharing`), so it is scraped once, through one
  address: the gateway Service (plain config) or the head pod's ``serve`` port
  (operator; Serve keeps a proxy on the head). Scraping every proxy would count
  each series once per node.
* Ray's metrics export port (8080, ``metrics``) on every Ray pod: Ray's node,
  actor and Serve metrics (``ray_*``). vLLM's own ``vllm:*`` metrics are not
  exported by this stack (they stay in each replica's process registry); the
  engines' load reaches Prometheus as ``serveout_engine_*`` through the gateway.

Flavours: a plain ``prometheus.yml`` (Kubernetes pod discovery) plus its rule
file, and prometheus-operator resources (two ``PodMonitor`` s and a
``PrometheusRule``) for kube-prometheus-stack installs.

With API keys and ``gateway.metrics_public`` false the gateway's ``/metrics`` needs
a key: both flavours send ``metrics-key`` of the keys Secret as a bearer token (the
plain config reads it from :data:`SECRETS_DIR` ``/<secret>/metrics-key``, where
prometheus-operator's ``Prometheus.spec.secrets`` mounts a Secret; the PodMonitor
names the Secret itself). Ray's metrics port needs no credentials.
"""

from __future__ import annotations

from serving.config.stack import StackConfig
from serving.manifests.access import METRICS_KEY, metrics_key_secret
from serving.manifests.alerts import alert_rule_groups
from serving.manifests.naming import (
    HEAD_COMPONENT,
    METRICS_PORT_NAME,
    SERVE_PORT_NAME,
    common_labels,
    gateway_service_name,
    resource_name,
    selector_labels,
)
from serving.manifests.promql import RAYSERVICE_LABEL
from serving.manifests.target import ClusterTarget

RULES_FILE = "serveout-rules.yml"
OPERATOR_API = "monitoring.coreos.com/v1"
GATEWAY_JOB = "serveout-gateway"
RAY_JOB = "serveout-ray-nodes"
SECRETS_DIR = "/etc/prometheus/secrets"

_INSTANCE_META = "__meta_kubernetes_pod_label_app_kubernetes_io_instance"


def render_prometheus(config: StackConfig, target: ClusterTarget) -> dict:
    """Prometheus configuration for ``config`` on ``target``.

    Keys: ``scrape_config`` (a ``prometheus.yml``), ``rules`` (its rule file,
    :data:`RULES_FILE`) and ``operator_resources`` (a list of Kubernetes objects).
    """
    groups = alert_rule_groups(config)
    return {
        "scrape_config": _scrape_config(config, target),
        "rules": {"groups": groups},
        "operator_resources": [
            _ray_nodes_monitor(config, target),
            _gateway_monitor(config, target),
            _prometheus_rule(config, target, groups),
        ],
    }


def _scrape_config(config: StackConfig, target: ClusterTarget) -> dict:
    interval = f"{target.prometheus.scrape_interval_s}s"
    address = f"{gateway_service_name(config)}.{target.namespace}.svc:{config.gateway.port}"
    gateway: dict = {"job_name": GATEWAY_JOB, "metrics_path": "/metrics"}
    if secret := metrics_key_secret(config, target):
        gateway["authorization"] = {"type": "Bearer",
                                    "credentials_file": f"{SECRETS_DIR}/{secret}/{METRICS_KEY}"}
    gateway["static_configs"] = [{"targets": [address],
                                  "labels": {RAYSERVICE_LABEL: resource_name(config)}}]
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [RULES_FILE],
        "scrape_configs": [
            gateway,
            {
                "job_name": RAY_JOB,
                "metrics_path": "/metrics",
                "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [target.namespace]}}],
                "relabel_configs": [
                    {"source_labels": [_INSTANCE_META], "regex": resource_name(config), "action": "keep"},
                    {"source_labels": ["__meta_kubernetes_pod_container_port_name"],
                     "regex": METRICS_PORT_NAME, "action": "keep"},
                    {"source_labels": [_INSTANCE_META], "target_label": RAYSERVICE_LABEL},
                    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
                    {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
                ],
            },
        ],
    }


def _monitor_metadata(config: StackConfig, target: ClusterTarget, suffix: str) -> dict:
    return {
        "name": f"{resource_name(config)}-{suffix}",
        "namespace": target.namespace,
        "labels": {**common_labels(config), **target.prometheus.monitor_labels},
    }


def _rayservice_relabel() -> dict:
    return {"sourceLabels": [_INSTANCE_META], "targetLabel": RAYSERVICE_LABEL, "action": "replace"}


def _ray_nodes_monitor(config: StackConfig, target: ClusterTarget) -> dict:
    return {
        "apiVersion": OPERATOR_API,
        "kind": "PodMonitor",
        "metadata": _monitor_metadata(config, target, "ray-nodes"),
        "spec": {
            "selector": {"matchLabels": selector_labels(config)},
            "namespaceSelector": {"matchNames": [target.namespace]},
            "podMetricsEndpoints": [{
                "port": METRICS_PORT_NAME,
                "path": "/metrics",
                "interval": f"{target.prometheus.scrape_interval_s}s",
                "relabelings": [_rayservice_relabel()],
            }],
        },
    }


def _gateway_monitor(config: StackConfig, target: ClusterTarget) -> dict:
    endpoint: dict = {
        "port": SERVE_PORT_NAME,
        "path": "/metrics",
        "interval": f"{target.prometheus.scrape_interval_s}s",
    }
    if secret := metrics_key_secret(config, target):
        endpoint["authorization"] = {"type": "Bearer",
                                     "credentials": {"name": secret, "key": METRICS_KEY}}
    endpoint["relabelings"] = [_rayservice_relabel()]
    return {
        "apiVersion": OPERATOR_API,
        "kind": "PodMonitor",
        "metadata": _monitor_metadata(config, target, "gateway"),
        "spec": {
            "selector": {"matchLabels": selector_labels(config, HEAD_COMPONENT)},
            "namespaceSelector": {"matchNames": [target.namespace]},
            "podMetricsEndpoints": [endpoint],
        },
    }


def _prometheus_rule(config: StackConfig, target: ClusterTarget, groups: list[dict]) -> dict:
    return {
        "apiVersion": OPERATOR_API,
        "kind": "PrometheusRule",
        "metadata": _monitor_metadata(config, target, "alerts"),
        "spec": {"groups": groups},
    }
