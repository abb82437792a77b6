"""What other pods may reach: the Serve port and Ray's metrics, never GCS, the dashboard
or Ray Client (the dashboard only from the KubeRay operator's namespace); the head and
gateway Services stay inside the cluster by default."""

from __future__ import annotations

import pytest

from serving.manifests import render_network_policy, render_rayservice
from serving.manifests.command import load_cluster_target
from serving.manifests.naming import CLIENT_PORT, DASHBOARD_PORT, GCS_PORT, METRICS_PORT
from serving.manifests.network_policy import NAMESPACE_NAME_LABEL
from serving.manifests.target import ClusterTarget
from tests.unit.serving.manifests.manifest_helpers import CATALOG, TARGETS, cluster_config

EVERY_PORT = frozenset({"every port"})


def _matches(selector: dict, labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, f"evaluator knows matchLabels only: {selector}"
    return selector.get("matchLabels", {}).items() <= labels.items()


def _peer_allowed(peer: dict, policy: dict, namespace: str, labels: dict[str, str]) -> bool:
    """Whether one ``from`` entry admits a pod with ``labels`` in ``namespace``."""
    same_namespace = namespace == policy["metadata"]["namespace"]
    if "namespaceSelector" in peer:
        namespace_ok = _matches(peer["namespaceSelector"], {NAMESPACE_NAME_LABEL: namespace})
    else:
        namespace_ok = same_namespace  # a podSelector alone means the policy's namespace
    return namespace_ok and _matches(peer.get("podSelector", {}), labels)


def reachable_ports(policy: dict, pod_labels: dict[str, str], *, namespace: str,
                    labels: dict[str, str]) -> frozenset:
    """The ports a pod (``namespace``, ``labels``) may open on a pod with ``pod_labels``
    under this one policy (Kubernetes semantics for the fields rendered here)."""
    if not _matches(policy["spec"]["podSelector"], pod_labels):
        return EVERY_PORT  # not selected: the policy does not restrict this pod
    ports: set = set()
    for rule in policy["spec"].get("ingress", []):
        peers = rule.get("from")
        if peers is not None and not any(_peer_allowed(p, policy, namespace, labels) for p in peers):
            continue
        if "ports" not in rule:
            return EVERY_PORT
        ports |= {p["port"] for p in rule["ports"]}
    return frozenset(ports)


def _head_labels(config, target) -> dict[str, str]:
    cluster = render_rayservice(config, target)["spec"]["rayClusterConfig"]
    return cluster["headGroupSpec"]["template"]["metadata"]["labels"]


def test_other_pods_reach_only_the_serve_and_metrics_ports(config, target):
    policy = render_network_policy(config, target)
    head = _head_labels(config, target)
    public = {config.gateway.port, METRICS_PORT}
    elsewhere = reachable_ports(policy, head, namespace="apps", labels={"app": "client"})
    next_door = reachable_ports(policy, head, namespace=target.namespace, labels={"app": "client"})
    assert elsewhere == next_door == public
    assert not {GCS_PORT, DASHBOARD_PORT, CLIENT_PORT} & elsewhere


def test_kuberay_reaches_the_dashboard_and_ray_pods_reach_each_other(config, target):
    """What a RayService needs: KubeRay posts serveConfigV2 to the dashboard; Ray's own
    traffic (GCS, raylets, object transfer) uses many ports between its pods."""
    policy = render_network_policy(config, target)
    head = _head_labels(config, target)
    operator = reachable_ports(policy, head, namespace=target.kuberay_namespace,
                               labels={"app.kubernetes.io/name": "kuberay-operator"})
    assert DASHBOARD_PORT in operator and GCS_PORT not in operator
    cluster = render_rayservice(config, target)["spec"]["rayClusterConfig"]
    worker = cluster["workerGroupSpecs"][0]["template"]["metadata"]["labels"]
    assert reachable_ports(policy, head, namespace=target.namespace, labels=worker) == EVERY_PORT
    assert reachable_ports(policy, worker, namespace=target.namespace, labels=head) == EVERY_PORT


def test_an_open_rule_is_detected(kind):
    """The evaluator can fail: an empty rule (allow everything) opens the dashboard."""
    config = cluster_config(CATALOG.get("smollm2-135m-instruct"), kind)
    policy = render_network_policy(config, kind)
    policy["spec"]["ingress"].append({})
    assert reachable_ports(policy, _head_labels(config, kind), namespace="apps", labels={}) == EVERY_PORT
    policy["spec"]["podSelector"] = {"matchLabels": {"app.kubernetes.io/instance": "another"}}
    assert reachable_ports(policy, _head_labels(config, kind), namespace="apps", labels={}) == EVERY_PORT


def test_the_dashboard_is_reachable_only_inside_the_cluster_and_with_the_token(config, target):
    """The dashboard accepts job submissions (remote code execution). KubeRay posts the
    Serve config to it through the head Service, so it cannot move to loopback: the head
    Service must stay ClusterIP, other pods must not reach it, and Ray must ask for the token."""
    cluster = render_rayservice(config, target)["spec"]["rayClusterConfig"]
    head = cluster["headGroupSpec"]
    assert head["serviceType"] == "ClusterIP"
    assert cluster["authOptions"]["mode"] == "token"
    policy = render_network_policy(config, target)
    assert DASHBOARD_PORT not in reachable_ports(policy, head["template"]["metadata"]["labels"],
                                                 namespace="apps", labels={})


@pytest.mark.parametrize("path", sorted(TARGETS.glob("*.yaml")), ids=lambda p: p.name)
def test_checked_in_targets_keep_the_gateway_service_inside_the_cluster(path):
    assert load_cluster_target(path).service_type == "ClusterIP"


def test_the_gateway_service_is_clusterip_unless_the_target_says_otherwise(config, target):
    assert ClusterTarget.model_fields["service_type"].default == "ClusterIP"
    service = render_rayservice(config, target)["spec"]["serveService"]
    assert service["spec"]["type"] == target.service_type
