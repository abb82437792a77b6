"""Pod templates of the Ray head, the engine workers and the gateway pods (Kubernetes
``PodTemplateSpec``).

Both run the same serveout image and mount the weights claim read-only at the
target's mount path: the engines load weights from it and the gateway (on any
node, usually the head) loads the tokenizer from it. Nothing reaches a model hub
at serve time (``HF_HUB_OFFLINE=1``). Both run Ray with token authentication and,
when the gateway has API keys, mount the keys Secret read-only (:mod:`.access`).
"""

from __future__ import annotations

from serving.config.stack import StackConfig
from serving.manifests.access import KeysMount, keys_mount, ray_auth_env
from serving.manifests.naming import (
    CLIENT_PORT,
    DASHBOARD_PORT,
    GATEWAY_WORKER_COMPONENT,
    GCS_PORT,
    HEAD_COMPONENT,
    METRICS_PORT,
    METRICS_PORT_NAME,
    SERVE_PORT_NAME,
    WORKER_COMPONENT,
    common_labels,
)
from serving.manifests.sizing import GatewayPlan, WorkerPlan
from serving.manifests.target import ClusterTarget, Placement

WEIGHTS_VOLUME = "model-weights"
SHM_VOLUME = "dshm"
SHM_PATH = "/dev/shm"

OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
}


def head_pod_template(config: StackConfig, target: ClusterTarget) -> dict:
    """The head pod: GCS, dashboard, Serve controller and (usually) the gateway replica."""
    head = target.head
    ports = [
        _port("gcs-server", GCS_PORT),
        _port("dashboard", DASHBOARD_PORT),
        _port("client", CLIENT_PORT),
        _port(SERVE_PORT_NAME, config.gateway.port),
        _port(METRICS_PORT_NAME, METRICS_PORT),
    ]
    resources = _resources(cpus=head.cpus, memory_gib=head.memory_gib)
    container = _container("ray-head", config, target, ports, resources)
    return _template(config, HEAD_COMPONENT, container, target, head, shm_gib=head.shm_gib,
                     affinity=target.cpu_node_affinity(head))


def gateway_pod_template(config: StackConfig, target: ClusterTarget, plan: GatewayPlan) -> dict:
    """A gateway pod: a CPU node's room for one gateway replica and the Serve proxy beside it."""
    pods = target.gateways
    assert pods is not None, "gateway pods are rendered only for targets that ask for them"
    ports = [_port(SERVE_PORT_NAME, config.gateway.port), _port(METRICS_PORT_NAME, METRICS_PORT)]
    resources = _resources(cpus=plan.cpus, memory_gib=plan.memory_gib)
    container = _container("ray-gateway", config, target, ports, resources)
    return _template(config, GATEWAY_WORKER_COMPONENT, container, target, pods, shm_gib=pods.shm_gib,
                     affinity=target.cpu_node_affinity(pods))


def worker_pod_template(config: StackConfig, target: ClusterTarget, plan: WorkerPlan) -> dict:
    """An engine worker pod: room for exactly one engine replica (see :mod:`.sizing`)."""
    ports = [_port(SERVE_PORT_NAME, config.gateway.port), _port(METRICS_PORT_NAME, METRICS_PORT)]
    resources = _resources(cpus=plan.cpus, memory_gib=plan.memory_gib)
    if plan.gpu_resource:
        for bound in resources.values():
            bound[plan.gpu_resource] = str(plan.gpus)
    container = _container("ray-worker", config, target, ports, resources)
    return _template(config, WORKER_COMPONENT, container, target, target.worker,
                     shm_gib=target.worker.shm_gib)


def _container(name: str, config: StackConfig, target: ClusterTarget, ports: list[dict],
               resources: dict) -> dict:
    mounts = [
        {"name": WEIGHTS_VOLUME, "mountPath": str(target.weights.mount_path), "readOnly": True},
        {"name": SHM_VOLUME, "mountPath": SHM_PATH},
    ]
    if keys := _keys_mount(config, target):
        mounts.append(keys.volume_mount())
    return {
        "name": name,
        "image": target.image,
        "imagePullPolicy": target.image_pull_policy,
        "env": [{"name": k, "value": v} for k, v in OFFLINE_ENV.items()] + ray_auth_env(target),
        "ports": ports,
        "resources": resources,
        "volumeMounts": mounts,
        # KubeRay's samples stop Ray before the pod goes away (drains the raylet).
        "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "ray stop"]}}},
    }


def _keys_mount(config: StackConfig, target: ClusterTarget) -> KeysMount | None:
    return keys_mount(config, target, other_mounts=[str(target.weights.mount_path), SHM_PATH])


def _template(config: StackConfig, component: str, container: dict, target: ClusterTarget,
              placement: Placement, *, shm_gib: int, affinity: dict | None = None) -> dict:
    spec: dict = {
        "containers": [container],
        "volumes": [
            {
                "name": WEIGHTS_VOLUME,
                "persistentVolumeClaim": {"claimName": target.weights.claim_name, "readOnly": True},
            },
            {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_gib}Gi"}},
        ],
    }
    if keys := _keys_mount(config, target):
        spec["volumes"].append(keys.volume())
    if placement.node_selector:
        spec["nodeSelector"] = dict(placement.node_selector)
    if affinity:
        spec["affinity"] = affinity
    if placement.tolerations:
        spec["tolerations"] = [t.manifest() for t in placement.tolerations]
    return {"metadata": {"labels": common_labels(config, component)}, "spec": spec}


def _port(name: str, port: int) -> dict:
    return {"name": name, "containerPort": port, "protocol": "TCP"}


def _resources(*, cpus: int, memory_gib: int) -> dict:
    """Requests equal to limits: Guaranteed QoS, and Ray reads its CPU count from the limit."""
    bound = {"cpu": str(cpus), "memory": f"{memory_gib}Gi"}
    return {"requests": dict(bound), "limits": dict(bound)}
