"""The cluster a :class:`~serving.config.stack.StackConfig` is rendered for.

A :class:`ClusterTarget` says what the cluster offers (nodes, accelerators, the
container image, where the weights live) and nothing about the deployment itself:
replicas, routing, autoscaling and engine settings stay in the StackConfig, so the
same stack file renders for a laptop ``kind`` cluster or three 8-GPU nodes.
Example (``deploy/targets/h200-3x8.yaml``)::

    name: h200-3x8
    namespace: serveout
    image: ghcr.io/serveout/serveout:0.1.0-cuda
    accelerator: h200
    worker_nodes: 3
    worker: {cpus: 176, memory_gib: 1600, accelerators: 8,
             node_selector: {nvidia.com/gpu.product: NVIDIA-H200}}
    head: {cpus: 16, memory_gib: 64, node_selector: {serveout.io/pool: cpu}}
    traffic: {peak_output_tokens_per_s: 36000, output_tokens_per_request: 256}
    gateways: {tokens_per_core: 520}        # pods for gateway.mode separate
    weights: {claim_name: serveout-models, mount_path: /models}
    ray_token_secret: serveout-ray-token     # Secrets created beforehand, never rendered
    api_keys_secret: serveout-api-keys

On a GPU target the Ray head needs a node besides the ``worker_nodes`` GPU nodes
(3 x 8 H200 is four nodes): engine pods split a GPU node's CPUs and memory among
themselves, leaving no room for the head. So on a GPU target the workers go to the GPU
pool (``worker.node_selector``, by default ``nvidia.com/gpu.present: "true"``, the label
NVIDIA's GPU feature discovery puts on GPU nodes) and the head, and the gateway pods if
any, to CPU nodes: their ``node_selector`` when given (it must not select the GPU pool),
else a node affinity for nodes without that label.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import Field, field_validator, model_validator

from serving.config.model_spec import AcceleratorKind, Strict

GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
"""The label NVIDIA's GPU feature discovery (GPU operator) sets to ``"true"`` on GPU nodes."""

RAY_VERSION = "2.60.0"
"""The Ray version of the image (``pyproject.toml`` pins ``ray[serve]==2.60.0``)."""

_DNS_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
_SECRET_NAME = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"


class Toleration(Strict):
    """A Kubernetes pod toleration (the subset GPU node pools use)."""

    key: str
    operator: Literal["Exists", "Equal"] = "Exists"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None

    def manifest(self) -> dict:
        return self.model_dump(exclude_none=True)


class Placement(Strict):
    """Which Kubernetes nodes a group of pods may land on."""

    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()


class WorkerNodes(Placement):
    """One worker node as Kubernetes offers it to Ray pods.

    ``cpus`` and ``memory_gib`` are what pods may request on one node (its
    allocatable resources minus daemons), not the machine's raw size: the renderer
    splits them among the engine pods that fit on the node.
    """

    cpus: int = Field(ge=1)
    memory_gib: int = Field(ge=1)
    accelerators: int = Field(0, ge=0, description="GPUs per node; 0 on CPU nodes")
    shm_gib: int = Field(16, ge=1, description="/dev/shm of one engine pod (NCCL, Ray objects)")


class HeadNode(Placement):
    """The Ray head pod: GCS, Serve controller, the gateway; never an engine.

    On GPU targets it runs on a CPU node (one node more than ``worker_nodes``), see
    :meth:`ClusterTarget._head_off_the_gpu_pool`.
    """

    cpus: int = Field(ge=1)
    memory_gib: int = Field(ge=1)
    shm_gib: int = Field(2, ge=1)


class GcsStore(Strict):
    """The Redis that keeps the head's GCS tables across a head restart
    (:mod:`serving.manifests.gcs_store`), on the head's nodes."""

    image: str = Field("redis:7.4", description="a Redis image (KubeRay supports a standalone Redis)")
    password_secret: str = Field(
        "serveout-gcs-store", pattern=_SECRET_NAME,
        description="Secret (key 'password', created beforehand) holding the Redis password")
    storage_gib: int = Field(8, ge=1, description="its volume (the append-only file of the GCS tables)")
    storage_class: str | None = Field(None, description="the volume's StorageClass; None = the cluster's default")
    memory_gib: int = Field(1, ge=1)


class Traffic(Strict):
    """What the app must carry at its peak: it sizes the front end in both gateway modes
    (HAProxy threads and routers per node, :func:`.sizing.plan_front_end`; the separate
    mode's gateway replicas, :func:`.sizing.gateway_replicas`). Unset: nothing is sized,
    Ray's and the stack's own counts stand."""

    peak_output_tokens_per_s: float | None = Field(
        None, gt=0, description="expected peak of streamed output tokens/s of the whole app"
    )
    output_tokens_per_request: float = Field(
        256, gt=0, description="mean streamed output tokens per request: turns the peak into requests/s"
    )


class GatewayPods(Placement):
    """Ray pods of their own for the gateway replicas of ``gateway.mode: separate``, one
    replica per pod, counted from the target's traffic by the sizing rule of
    docs/serving.md (:func:`.sizing.gateway_replicas`). A stack running the direct mode
    (the gateway inside every engine replica) has no gateway replicas: these pods are
    then not rendered.

    The rule is Z = ceil(Y / (0.7 x X)) + 1 replicas for a peak of Y streamed output
    tokens/s (``traffic.peak_output_tokens_per_s``), where one front-end core (Serve's
    proxy + one gateway replica) carries X. Without a peak, or with a stack file that sets
    ``gateway.replicas`` itself, the stack's count is used as is.
    """

    # 520 was measured on the CPU dev box (Intel Xeon, 2 shared cores, stream_interval 1:
    # 1e6 / (proxy 673 + gateway 1250 us per token), docs/serving.md "Sizing rule").
    # Re-measure on the gateway hosts with benchmarks/serving_ceiling.py.
    tokens_per_core: float = Field(
        520, gt=0, description="streamed output tokens/s one front-end core carries"
    )
    cpus: int = Field(
        2, ge=1, description="cores of one gateway pod: the front-end core and Ray's daemons"
    )
    memory_gib: int = Field(4, ge=1)
    shm_gib: int = Field(1, ge=1)


class WeightsVolume(Strict):
    """Where the prepared weights live: a PersistentVolumeClaim every Ray pod mounts.

    Model ``NAME`` is served from ``<mount_path>/NAME`` (the StackConfig's
    ``model_path``). The claim must be mountable by many pods at once
    (ReadOnlyMany / ReadWriteMany: NFS, a CSI file store, ...). Weights are
    prepared on the cluster by the weights Job, never downloaded at serve time.
    """

    claim_name: str = Field(pattern=_DNS_LABEL)
    mount_path: PurePosixPath = PurePosixPath("/models")
    hf_token_secret: str | None = Field(
        None, description="Secret (key 'token') for gated hub models; read by the weights Job only"
    )

    @field_validator("mount_path")
    @classmethod
    def _absolute(cls, value: PurePosixPath) -> PurePosixPath:
        if not value.is_absolute():
            raise ValueError("weights.mount_path must be absolute")
        return value

    def model_path(self, model_name: str) -> Path:
        """The folder of ``model_name`` inside the pods."""
        return Path(str(self.mount_path / model_name))


class PrometheusSpec(Strict):
    """How the cluster's Prometheus finds serveout."""

    scrape_interval_s: int = Field(15, ge=1)
    monitor_labels: dict[str, str] = Field(
        default_factory=lambda: {"release": "prometheus"},
        description="labels the operator's Prometheus selects PodMonitors and rules by "
        "(kube-prometheus-stack: release=<helm release>)",
    )


class ClusterTarget(Strict):
    """A Kubernetes cluster (or a set of VMs) to render manifests for."""

    name: str = Field(description="the target's own name, e.g. h200-3x8 (documentation only)")
    namespace: str = Field(pattern=_DNS_LABEL)
    image: str = Field(description="a container image with serveout installed (deploy/docker/)")
    image_pull_policy: Literal["IfNotPresent", "Always", "Never"] = "IfNotPresent"
    ray_version: Literal["2.60.0"] = RAY_VERSION
    accelerator: AcceleratorKind
    worker_nodes: int = Field(ge=1, description="worker nodes the engines may use")
    worker: WorkerNodes
    head: HeadNode
    weights: WeightsVolume
    traffic: Traffic = Traffic()
    gateways: GatewayPods | None = Field(
        None, description="pods of their own for the gateway replicas of gateway.mode separate, "
        "sized from the traffic; None = the gateways share the head and engine pods"
    )
    service_type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = "ClusterIP"
    upgrade_strategy: Literal["NewCluster", "None"] | None = Field(
        None,
        description="RayService upgradeStrategy.type (KubeRay >= 1.3); None = KubeRay's "
        "default (NewCluster: a cluster-spec change starts a second cluster, so it needs "
        "twice the GPUs while both run)",
    )
    prometheus: PrometheusSpec = PrometheusSpec()
    gcs_store: GcsStore | None = Field(
        GcsStore(),
        description="GCS fault tolerance: a Redis the manifests start, so a restarted head "
        "keeps the cluster (KubeRay >= 1.3); None = none (a head restart restarts every pod)",
    )
    ray_token_secret: str = Field(
        "serveout-ray-token", pattern=_SECRET_NAME,
        description="Secret (key 'auth_token', created beforehand) holding Ray's token: every "
        "Ray pod runs with RAY_AUTH_MODE=token, and KubeRay reads it to reach the dashboard",
    )
    api_keys_secret: str | None = Field(
        None, pattern=_SECRET_NAME,
        description="Secret (created beforehand) holding the gateway's keys file under 'keys.txt' "
        "(and Prometheus' key under 'metrics-key'), mounted read-only into every Ray pod; "
        "None = no API keys",
    )
    kuberay_namespace: str = Field(
        "default", pattern=_DNS_LABEL,
        description="namespace of the KubeRay operator: the only one, besides the Ray pods "
        "themselves, the NetworkPolicy lets reach the dashboard port",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_keda(cls, data: object) -> object:
        if isinstance(data, dict) and "keda" in data:
            raise ValueError(
                "the keda section was removed: KEDA scales through a /scale subresource, which "
                "KubeRay's RayService and RayCluster lack; use autoscaling.enabled in the stack "
                "file (Ray Serve scales on queue depth, KubeRay adds the pods; deploy/README.md)"
            )
        return data

    @model_validator(mode="before")
    @classmethod
    def _peak_moved_to_traffic(cls, data: object) -> object:
        """``gateways.peak_output_tokens_per_s`` (the old place) is read as ``traffic``'s."""
        if not isinstance(data, dict) or not isinstance(data.get("gateways"), dict):
            return data
        gateways = dict(data["gateways"])
        if "peak_output_tokens_per_s" not in gateways:
            return data
        peak = gateways.pop("peak_output_tokens_per_s")
        traffic = dict(data.get("traffic") or {})
        if traffic.get("peak_output_tokens_per_s", peak) != peak:
            raise ValueError("gateways.peak_output_tokens_per_s and traffic.peak_output_tokens_per_s "
                             "differ: state the peak once, in traffic")
        return {**data, "gateways": gateways, "traffic": {**traffic, "peak_output_tokens_per_s": peak}}

    @field_validator("image")
    @classmethod
    def _image_reference(cls, value: str) -> str:
        if not re.match(r"^[^\s:]+(:[^\s]+)?$", value):
            raise ValueError(f"image {value!r} is not an image reference")
        return value

    @model_validator(mode="after")
    def _accelerators_match(self) -> "ClusterTarget":
        on_cpu = self.accelerator is AcceleratorKind.CPU
        if on_cpu and self.worker.accelerators:
            raise ValueError("a cpu target has worker.accelerators: 0")
        if not on_cpu and not self.worker.accelerators:
            raise ValueError(f"a {self.accelerator.value} target needs worker.accelerators >= 1")
        return self

    @model_validator(mode="before")
    @classmethod
    def _gpu_pool_by_default(cls, data: object) -> object:
        """GPU workers select ``nvidia.com/gpu.present: "true"`` unless the target names a pool."""
        if not isinstance(data, dict) or data.get("accelerator") in (None, AcceleratorKind.CPU.value):
            return data
        worker = data.get("worker")
        if isinstance(worker, dict) and not worker.get("node_selector"):
            data = {**data, "worker": {**worker, "node_selector": {GPU_PRESENT_LABEL: "true"}}}
        return data

    @model_validator(mode="after")
    def _head_off_the_gpu_pool(self) -> "ClusterTarget":
        """GPU targets keep the head (and gateway pods) off the GPU pool's nodes.

        Engine pods take a GPU node's CPUs and memory in proportion to its GPUs, so a
        full node has no room left for the head: it must go to a CPU node. A selector
        given here must not select the GPU pool; an empty one becomes a node affinity
        for nodes without :data:`GPU_PRESENT_LABEL` (:meth:`cpu_node_affinity`).
        """
        if not self.on_gpus:
            return self
        pods = {"head": self.head, "gateways": self.gateways}
        for name, placement in pods.items():
            selector = placement.node_selector if placement else {}
            if selector and selector.items() <= self.worker.node_selector.items():
                raise ValueError(
                    f"{name}.node_selector selects the GPU workers' pool; it must name a CPU node "
                    f"pool (e.g. {{serveout.io/pool: cpu}}): the Ray head and the gateway pods "
                    f"need CPU nodes besides the {self.worker_nodes} GPU nodes"
                )
        return self

    @property
    def on_gpus(self) -> bool:
        return self.accelerator is not AcceleratorKind.CPU

    def cpu_node_affinity(self, placement: Placement) -> dict | None:
        """The node affinity keeping a CPU pod (head, gateways) off GPU nodes, when a GPU
        target gives it no node selector of its own; None otherwise."""
        if not self.on_gpus or placement.node_selector:
            return None
        term = {"matchExpressions": [{"key": GPU_PRESENT_LABEL, "operator": "NotIn", "values": ["true"]}]}
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [term]}}}
