"""A NetworkPolicy: which peers may open connections to a deployment's Ray pods.

* the Ray pods of this deployment, to one another: every port (GCS, raylets, object
  transfer, dashboard agents, Serve's proxies ...);
* anyone: the Serve port (the gateway, which checks API keys) and Ray's metrics
  port (Prometheus);
* the KubeRay operator's namespace: the dashboard port, where KubeRay posts
  ``serveConfigV2`` and reads Serve's status.

Everything else (GCS, the dashboard, Ray Client) is closed to other pods, on top of
Ray's token. Kubernetes always lets a node reach its own pods, so the kubelet's
probes still work. The policy only acts when the cluster's network plugin enforces
NetworkPolicies (Calico, Cilium, ...); otherwise it is inert and the token is the
only guard. Not applied to a cluster from the project's machines.
"""

from __future__ import annotations

from serving.config.stack import StackConfig
from serving.manifests.naming import (
    DASHBOARD_PORT,
    METRICS_PORT,
    common_labels,
    resource_name,
    selector_labels,
)
from serving.manifests.target import ClusterTarget

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""Set by Kubernetes (>= 1.22) on every namespace, to the namespace's name."""


def _tcp(*ports: int) -> list[dict]:
    return [{"protocol": "TCP", "port": port} for port in ports]


def render_network_policy(config: StackConfig, target: ClusterTarget) -> dict:
    """The ingress policy of the Ray pods of ``config`` on ``target``."""
    def ray_pods() -> dict:  # a fresh dict each time: no YAML anchors in the output
        return {"matchLabels": selector_labels(config)}

    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": f"{resource_name(config)}-ray",
            "namespace": target.namespace,
            "labels": common_labels(config),
        },
        "spec": {
            "podSelector": ray_pods(),
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": ray_pods()}]},
                {"ports": _tcp(config.gateway.port, METRICS_PORT)},
                {"from": [{"namespaceSelector": {"matchLabels": {
                    NAMESPACE_NAME_LABEL: target.kuberay_namespace}}}],
                 "ports": _tcp(DASHBOARD_PORT)},
            ],
        },
    }
