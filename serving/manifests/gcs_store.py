"""The store that keeps the head's GCS tables across a head restart (GCS fault tolerance).

Without it a restarted head pod starts a fresh GCS: the worker pods cannot rejoin it,
their raylets exit and their engines start again, so every request in flight is lost
(KubeRay's "fate-sharing"). With it KubeRay starts the head's GCS on a Redis
(``rayClusterConfig.gcsFaultToleranceOptions``, KubeRay >= 1.3): a new head reads the
cluster back, and the worker pods' raylets wait for it (KubeRay gives them 600 s,
``RAY_gcs_rpc_server_reconnect_timeout_s``) while their engines and Serve's proxies keep
serving, as ``serving up --nodes N`` does on one machine with Ray's RocksDB store
(docs/serving.md, "The head node lost under load").

Rendered here (``gcs-store.yaml``): a one-replica Redis StatefulSet (KubeRay supports a
standalone Redis only) that appends every write to a file on its own volume (so a Redis
restart loses nothing either), its Service, and a NetworkPolicy that lets only this
deployment's Ray pods reach it. Its password comes from the target's
``gcs_store.password_secret`` (key ``password``), created beforehand like Ray's token.
"""

from __future__ import annotations

from serving.config.stack import StackConfig
from serving.manifests.naming import PART_OF, resource_name, selector_labels
from serving.manifests.target import ClusterTarget

REDIS_PORT = 6379
PASSWORD_KEY = "password"
"""Data key of the Redis password in ``gcs_store.password_secret``."""
COMPONENT = "gcs-store"


def store_name(config: StackConfig) -> str:
    """The Redis StatefulSet's and Service's name."""
    return f"{resource_name(config)}-{COMPONENT}"


def _labels(config: StackConfig) -> dict[str, str]:
    # An instance of its own: the Ray pods' NetworkPolicy and monitors select by theirs.
    return {"app.kubernetes.io/name": PART_OF, "app.kubernetes.io/instance": store_name(config),
            "app.kubernetes.io/component": COMPONENT, "app.kubernetes.io/part-of": PART_OF}


def _selector(config: StackConfig) -> dict[str, str]:
    return {"app.kubernetes.io/instance": store_name(config)}


def _on_the_heads_nodes(target: ClusterTarget) -> dict:
    spec: dict = {}
    if target.head.node_selector:
        spec["nodeSelector"] = dict(target.head.node_selector)
    if target.head.tolerations:
        spec["tolerations"] = [t.manifest() for t in target.head.tolerations]
    return spec


def fault_tolerance_options(config: StackConfig, target: ClusterTarget) -> dict:
    """The RayCluster's ``gcsFaultToleranceOptions``: the store's address and password."""
    return {
        "redisAddress": f"{store_name(config)}:{REDIS_PORT}",
        "redisPassword": {"valueFrom": {"secretKeyRef": {
            "name": target.gcs_store.password_secret, "key": PASSWORD_KEY}}},
    }


def render_gcs_store(config: StackConfig, target: ClusterTarget) -> list[dict]:
    """The store's Service, StatefulSet and NetworkPolicy."""
    store, name, namespace = target.gcs_store, store_name(config), target.namespace
    metadata = {"name": name, "namespace": namespace, "labels": _labels(config)}
    service = {
        "apiVersion": "v1", "kind": "Service", "metadata": metadata,
        "spec": {"type": "ClusterIP", "selector": _selector(config),
                 "ports": [{"name": "redis", "port": REDIS_PORT, "targetPort": REDIS_PORT}]},
    }
    container = {
        "name": "redis",
        "image": store.image,
        "imagePullPolicy": target.image_pull_policy,
        # Every write appended to the volume and fsynced each second; no snapshots.
        "command": ["sh", "-c", f'exec redis-server --port {REDIS_PORT} --dir /data --appendonly yes '
                    '--appendfsync everysec --save "" --protected-mode no --requirepass "$REDIS_PASSWORD"'],
        "env": [{"name": "REDIS_PASSWORD", "valueFrom": {"secretKeyRef": {
            "name": store.password_secret, "key": PASSWORD_KEY}}}],
        "ports": [{"name": "redis", "containerPort": REDIS_PORT}],
        "readinessProbe": {"tcpSocket": {"port": REDIS_PORT}, "periodSeconds": 5},
        "resources": {"requests": {"cpu": "250m", "memory": f"{store.memory_gib}Gi"},
                      "limits": {"memory": f"{store.memory_gib}Gi"}},
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }
    claim: dict = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": f"{store.storage_gib}Gi"}}}
    if store.storage_class:
        claim["storageClassName"] = store.storage_class
    stateful_set = {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": metadata,
        "spec": {
            "serviceName": name,
            "replicas": 1,
            "selector": {"matchLabels": _selector(config)},
            "template": {"metadata": {"labels": _labels(config)}, "spec": {
                "containers": [container],
                **_on_the_heads_nodes(target),
            }},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": claim}],
        },
    }
    policy = {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace, "labels": _labels(config)},
        "spec": {
            "podSelector": {"matchLabels": _selector(config)},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": selector_labels(config)}}],
                         "ports": [{"protocol": "TCP", "port": REDIS_PORT}]}],
        },
    }
    return [service, stateful_set, policy]
