"""The KubeRay ``RayService`` of a deployment (``apiVersion: ray.io/v1``).

Field names follow KubeRay's Go API (``ray-operator/apis/ray/v1``:
``RayServiceSpec`` and ``RayClusterSpec``), checked against its source, not run
here (no Kubernetes on the project's machines):

* ``spec.serveConfigV2`` is a *string* holding the Serve config YAML (the CRD
  declares it "a YAML multi-line scalar string"); KubeRay posts it to the Serve
  REST API, which validates it with Ray's ``ServeDeploySchema``.
* ``spec.serveService`` is a user-defined Service for Serve traffic: KubeRay
  keeps its name, type and labels, replaces its selector with the active
  cluster's serving pods and keeps only the port named ``serve``. Serving pods are
  every worker pod whose readiness probe passes (KubeRay adds the Serve proxy's
  ``/-/healthz`` to it) and the head while its proxy is healthy, unless
  ``spec.excludeHeadPodFromServeSvc`` (KubeRay >= 1.3) leaves the head out.
* ``spec.upgradeStrategy`` needs KubeRay >= 1.3 and is only written when the
  target sets it.
* Ray's GPU count is not set in ``rayStartParams``: KubeRay derives ``num-gpus``
  from the container's ``nvidia.com/gpu`` limit and ``num-cpus`` from its CPU limit.
* ``rayClusterConfig.authOptions`` (token mode, the target's Secret) needs KubeRay
  >= 1.6 (``secretName``); see :mod:`.access`.

Exposure: the dashboard cannot move to loopback or be turned off here, because
KubeRay posts ``serveConfigV2`` to it and polls Serve's status through the head
Service (``http://<head service>:8265``). So it listens on the pod's interfaces
(``dashboard-host: 0.0.0.0`` inside the pod's network namespace), and what keeps it
private is Ray's token (job submission needs it), the head Service being
``ClusterIP`` and the NetworkPolicy (:mod:`.network_policy`) letting only the Ray
pods and the KubeRay operator's namespace reach it. Serve's HTTP proxy must listen
on the pod's interfaces too (``gateway.host: 0.0.0.0``): the gateway Service
(``serveService``, ``ClusterIP`` unless the target says otherwise) forwards to the
pods' IPs, and it is the one way in meant for clients.

Which pods take client traffic: Serve 2.60 runs a proxy (here HAProxy, with the direct
mode's routers beside it) on the head and on every node that holds a replica of a
deployment other than the router, no others. In the direct mode the gateway runs in
every engine replica, so the engine pods are the front end: the Service selects them
(each one's HAProxy forwards to the replica the router chose, on any pod), and the head
only when the engines may scale to zero (:func:`.sizing.head_takes_clients`).
deploy/README.md ("The front end") argues this layout against CPU front-end pods.

Queue-depth autoscaling is two loops, both driven by the rendered config: Ray Serve
sets the engine replica count with serveout's policy (``autoscaling_config`` in
``serveConfigV2``), and KubeRay's in-tree autoscaler (``enableInTreeAutoscaling``)
adds a worker pod for each replica whose placement group cannot be placed and
removes idle ones, between the worker group's ``minReplicas`` and ``maxReplicas``
(one pod per replica, so the same bounds as Serve's). Neither RayService nor
RayCluster has a ``/scale`` subresource: nothing outside Ray (HPA, KEDA) can scale
them, and nothing else is needed.

Gateway pods (``gateway.mode: separate`` only): a target with a ``gateways`` section
gets a second worker group, ``gateways``, on CPU nodes: one pod per gateway replica, sized by
:func:`.sizing.plan_gateways`. These pods offer Ray no CPU (``num-cpus: 0``), so no
engine lands on them, and offer what one gateway replica asks for
(``gateway.ray_resources``, :data:`.naming.GATEWAY_RESOURCE` by default) in
``rayStartParams.resources``, which nothing else offers, so the gateway replicas land
on them alone. The group is fixed at the most replicas the config runs, or, with
gateway autoscaling on, follows Serve's bounds (``minReplicas``/``maxReplicas``): KubeRay's
autoscaler reads the offered resource from ``rayStartParams`` and adds a pod for each
gateway replica Ray cannot place.
"""

from __future__ import annotations

import json

from serving.config.stack import StackConfig
from serving.manifests.access import ray_auth_options
from serving.manifests.naming import (
    GATEWAY_COMPONENT,
    METRICS_PORT,
    SERVE_PORT_NAME,
    common_labels,
    gateway_service_name,
    dns_label,
    resource_name,
)
from serving.manifests.gcs_store import fault_tolerance_options
from serving.manifests.pods import gateway_pod_template, head_pod_template, worker_pod_template
from serving.manifests.serve_config import render_serve_config
from serving.manifests.sizing import head_takes_clients, plan_front_end, plan_gateways, plan_workers
from serving.manifests.target import ClusterTarget
from serving.manifests.yaml_text import to_yaml

API_VERSION = "ray.io/v1"
WORKER_GROUP = "engines"
GATEWAY_GROUP = "gateways"
HEAD_SERVICE_TYPE = "ClusterIP"
"""The head Service (GCS, dashboard, Ray Client) is never exposed outside the cluster."""


def render_rayservice(config: StackConfig, target: ClusterTarget) -> dict:
    """The RayService for ``config`` on ``target``; :class:`ConfigError` if it does not fit."""
    plans = [(base, plan_workers(base, target)) for base in config.bases]
    gateways = plan_gateways(config, target)
    front = plan_front_end(config, target)
    cluster: dict = {
        "rayVersion": target.ray_version,
        "enableInTreeAutoscaling": any(plan.autoscaling for _, plan in plans) or bool(gateways and gateways.autoscaling),
        "authOptions": ray_auth_options(target),
        "headGroupSpec": {
            "serviceType": HEAD_SERVICE_TYPE,
            "rayStartParams": {
                # KubeRay reaches the dashboard through the head Service (module docstring).
                "dashboard-host": "0.0.0.0",
                # No engine on the head: it keeps the GCS and Serve controller
                # responsive; the gateway (num_cpus=0) may still run there unless it
                # asks for a resource only the gateway pods offer.
                "num-cpus": "0",
                "metrics-export-port": str(METRICS_PORT),
            },
            "template": head_pod_template(config, target, front),
        },
        # One group per base model, sized for its engine replicas (the first is
        # ``engines``, a further base's ``engines-<its name>``).
        "workerGroupSpecs": [
            {
                "groupName": WORKER_GROUP if i == 0 else f"{WORKER_GROUP}-{dns_label(base.model.name)}",
                "replicas": plan.initial_pods,
                "minReplicas": plan.min_pods,
                "maxReplicas": plan.max_pods,
                "rayStartParams": {"metrics-export-port": str(METRICS_PORT)},
                "template": worker_pod_template(base, target, plan, front),
            }
            for i, (base, plan) in enumerate(plans)
        ],
    }
    if gateways:
        # No engine here (engines need CPUs): the gateway and Serve's proxy only.
        params = {"num-cpus": "0", "metrics-export-port": str(METRICS_PORT)}
        if gateways.offers:
            params["resources"] = ray_start_resources(gateways.offers)
        cluster["workerGroupSpecs"].append({
            "groupName": GATEWAY_GROUP,
            "replicas": gateways.min_pods,
            "minReplicas": gateways.min_pods,
            "maxReplicas": gateways.max_pods,
            "rayStartParams": params,
            "template": gateway_pod_template(config, target, gateways, front),
        })
    if target.gcs_store is not None:
        cluster["gcsFaultToleranceOptions"] = fault_tolerance_options(config, target)
    spec: dict = {"serveConfigV2": to_yaml(render_serve_config(config)), "rayClusterConfig": cluster}
    spec["serveService"] = _serve_service(config, target)
    if not head_takes_clients(config, target):
        spec["excludeHeadPodFromServeSvc"] = True
    if target.upgrade_strategy:
        spec["upgradeStrategy"] = {"type": target.upgrade_strategy}
    return {
        "apiVersion": API_VERSION,
        "kind": "RayService",
        "metadata": {
            "name": resource_name(config),
            "namespace": target.namespace,
            "labels": common_labels(config),
            "annotations": {
                "serveout.io/model": config.model.name,
                "serveout.io/tensor-parallel-size": str(config.model.tensor_parallel_size),
                "serveout.io/max-replicas": str(config.max_replica_count),
                "serveout.io/gateway-mode": config.gateway.mode,
                **({} if config.gateway.direct else {
                    "serveout.io/gateway-replicas": str(config.gateway.max_replica_count)}),
            },
        },
        "spec": spec,
    }


def ray_start_resources(resources: dict[str, float]) -> str:
    """``rayStartParams.resources``: JSON inside a double-quoted, escaped string, the form
    KubeRay passes to ``ray start --resources`` through a shell and Ray's autoscaler reads
    back (``{"serveout_gateway": 1}`` -> ``"{\\"serveout_gateway\\": 1}"``)."""
    whole = {name: int(amount) if amount == int(amount) else amount
             for name, amount in resources.items()}
    return json.dumps(json.dumps(whole))


def _serve_service(config: StackConfig, target: ClusterTarget) -> dict:
    """The gateway's Service (OpenAI API on ``gateway.port``); KubeRay sets its selector."""
    return {
        "metadata": {
            "name": gateway_service_name(config),
            "labels": common_labels(config, GATEWAY_COMPONENT),
        },
        "spec": {
            "type": target.service_type,
            "ports": [
                {
                    "name": SERVE_PORT_NAME,
                    "port": config.gateway.port,
                    "targetPort": config.gateway.port,
                    "protocol": "TCP",
                }
            ],
        },
    }
