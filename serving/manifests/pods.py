"""Pod templates of the Ray head, the engine workers and the gateway pods (Kubernetes
``PodTemplateSpec``).

All run the same serveout image and mount the weights claim read-only at the
target's mount path: the engines load weights from it, and the gateway and the routers
(on any node) load the tokenizer from it. Nothing reaches a
model hub at serve time (``HF_HUB_OFFLINE=1``). All run Ray with token authentication,
with Serve's HAProxy settings (:mod:`.ray_env`) and, when the gateway has API keys,
mount the keys Secret read-only (:mod:`.access`).

Stopping a pod drains what runs on it, as ``serving down`` drains a local stack: its
preStop hook runs :mod:`serving.cluster.drain_node` (the node's Serve proxy leaves the Service
and soft-stops; every gateway replica on the node refuses new completions, lets its
requests finish for ``drain.timeout_s`` and cuts the rest with an error the client sees),
then ``ray stop``. ``terminationGracePeriodSeconds`` leaves room for all of it
(:func:`serving.cluster.drain_node.prestop_budget_s`). The drain's JSON report goes to the
container's log (``/proc/1/fd/1``: a hook's own output is not kept).
"""

from __future__ import annotations

import shlex

from serving.config.stack import StackConfig
from serving.cluster.drain_node import prestop_budget_s
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
    drained_deployment,
)
from serving.manifests.ray_env import container_env
from serving.manifests.sizing import FrontEndSizing, GatewaySizing, WorkerSizing
from serving.manifests.target import ClusterTarget, Placement

WEIGHTS_VOLUME = "model-weights"
SHM_VOLUME = "dshm"
SHM_PATH = "/dev/shm"

OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
}


def head_pod_template(config: StackConfig, target: ClusterTarget, front: FrontEndSizing) -> dict:
    """The head pod: GCS, dashboard, Serve controller, its Serve proxy (and, in the separate
    mode without gateway pods, possibly gateway replicas)."""
    head = target.head
    ports = [
        _port("gcs-server", GCS_PORT),
        _port("dashboard", DASHBOARD_PORT),
        _port("client", CLIENT_PORT),
        _port(SERVE_PORT_NAME, config.gateway.port),
        _port(METRICS_PORT_NAME, METRICS_PORT),
    ]
    resources = _resources(cpus=head.cpus, memory_gib=head.memory_gib)
    container = _container("ray-head", config, target, ports, resources, front, head.cpus)
    return _template(config, HEAD_COMPONENT, container, target, head, shm_gib=head.shm_gib,
                     affinity=target.cpu_node_affinity(head))


def gateway_pod_template(config: StackConfig, target: ClusterTarget, plan: GatewaySizing,
                         front: FrontEndSizing) -> dict:
    """A gateway pod: a CPU node's room for one gateway replica and the Serve proxy beside it."""
    pods = target.gateways
    assert pods is not None, "gateway pods are rendered only for targets that ask for them"
    ports = [_port(SERVE_PORT_NAME, config.gateway.port), _port(METRICS_PORT_NAME, METRICS_PORT)]
    resources = _resources(cpus=plan.cpus, memory_gib=plan.memory_gib)
    container = _container("ray-gateway", config, target, ports, resources, front, plan.cpus)
    return _template(config, GATEWAY_WORKER_COMPONENT, container, target, pods, shm_gib=pods.shm_gib,
                     affinity=target.cpu_node_affinity(pods))


def worker_pod_template(config: StackConfig, target: ClusterTarget, plan: WorkerSizing,
                        front: FrontEndSizing) -> dict:
    """An engine worker pod: room for exactly one engine replica (see :mod:`.sizing`), and
    its node's Serve proxy (HAProxy) and routers."""
    ports = [_port(SERVE_PORT_NAME, config.gateway.port), _port(METRICS_PORT_NAME, METRICS_PORT)]
    resources = _resources(cpus=plan.cpus, memory_gib=plan.memory_gib)
    if plan.gpu_resource:
        for bound in resources.values():
            bound[plan.gpu_resource] = str(plan.gpus)
    container = _container("ray-worker", config, target, ports, resources, front, plan.cpus)
    return _template(config, WORKER_COMPONENT, container, target, target.worker,
                     shm_gib=target.worker.shm_gib)


def prestop_command(config: StackConfig) -> list[str]:
    """The preStop hook's command: drain this node (:mod:`serving.cluster.drain_node`), then stop Ray."""
    drain = shlex.join(["python", "-m", "serving.cluster.drain_node", "--app", config.app_name,
                        "--deployment", drained_deployment(config), "--timeout-s", f"{config.drain.timeout_s:g}"])
    return ["/bin/sh", "-c", f"{drain} >/proc/1/fd/1 2>&1; ray stop"]


def _container(name: str, config: StackConfig, target: ClusterTarget, ports: list[dict],
               resources: dict, front: FrontEndSizing, cpus: int) -> dict:
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
        "env": [{"name": k, "value": v} for k, v in OFFLINE_ENV.items()] + ray_auth_env(target)
        + container_env(config, front, cpus),
        "ports": ports,
        "resources": resources,
        "volumeMounts": mounts,
        # Drain this node's proxy and gateway replicas, then stop Ray (module docstring).
        "lifecycle": {"preStop": {"exec": {"command": prestop_command(config)}}},
    }


def _keys_mount(config: StackConfig, target: ClusterTarget) -> KeysMount | None:
    return keys_mount(config, target, other_mounts=[str(target.weights.mount_path), SHM_PATH])


def _template(config: StackConfig, component: str, container: dict, target: ClusterTarget,
              placement: Placement, *, shm_gib: int, affinity: dict | None = None) -> dict:
    spec: dict = {
        "containers": [container],
        "terminationGracePeriodSeconds": prestop_budget_s(config.drain.timeout_s),
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
