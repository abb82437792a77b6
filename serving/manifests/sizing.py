"""How many Ray worker pods a config needs on a target, and how big each one is.

One worker pod per engine replica: a pod holds exactly the replica's placement
group (:func:`serving.engine.placement.placement_bundles`, the resources the app
builder reserves), so the pods ask Kubernetes for ``replicas x tensor_parallel_size``
GPUs in total, no more, and Ray's autoscaler adds or removes whole pods as Serve
adds or removes replicas. Kubernetes packs several engine pods onto one node when
they fit (two TP-4 replicas per 8-GPU node).

* GPU specs: a pod gets ``tensor_parallel_size`` GPUs and the node's CPUs and
  memory in proportion (``tp / accelerators_per_node`` of them).
* CPU specs: a pod gets ``cpus_per_rank x tensor_parallel_size`` cores, requests
  equal to limits (Guaranteed QoS, so a kubelet with the static CPU manager gives
  the pod its own cores, which the engine's core binding then uses).

Gateway pods (``gateway.mode: separate``, when the target asks for them): one gateway
replica per pod, as many as the sizing rule of docs/serving.md gives for the target's
expected peak (:func:`gateway_replicas`), each with the target's ``gateways.cpus``. Each
pod offers Ray the resources one gateway replica asks for (``gateway.ray_resources``), so
the replicas land on these pods only, and autoscaled gateways make KubeRay add and remove
pods.

The front end (both modes, :func:`plan_front_end`): Serve's HAProxy on every pod with a
Serve proxy, and in the direct mode the routers Ray runs beside it on every such node.
HAProxy's threads and the routers per node come from the target's peak by the rule of
:func:`haproxy_threads` and :func:`routers_per_node`, with the CPU costs below.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from serving.config.model_spec import AcceleratorKind
from serving.config.stack import StackConfig
from serving.engine.placement import placement_bundles
from serving.errors import ConfigError
from serving.manifests.target import ClusterTarget

GPU_RESOURCE = {AcceleratorKind.H200: "nvidia.com/gpu", AcceleratorKind.B300: "nvidia.com/gpu"}
"""The Kubernetes extended resource of each GPU kind (NVIDIA device plugin)."""


@dataclass(frozen=True)
class WorkerSizing:
    """The engine worker group of one config on one target."""

    min_pods: int
    initial_pods: int
    max_pods: int
    pods_per_node: int
    cpus: int
    memory_gib: int
    gpus: int
    gpu_resource: str | None
    autoscaling: bool


def plan_workers(config: StackConfig, target: ClusterTarget) -> WorkerSizing:
    """The worker group for ``config`` on ``target``; :class:`ConfigError` if it cannot fit."""
    spec = config.model
    if spec.accelerator is not target.accelerator:
        raise ConfigError(
            f"model {spec.name} runs on {spec.accelerator.value} but target {target.name} "
            f"offers {target.accelerator.value}"
        )
    bundles = placement_bundles(config)  # the app builder's own reservation
    replica_gpus = int(sum(b.get("GPU", 0.0) for b in bundles))
    replica_cpus = int(sum(b.get("CPU", 0.0) for b in bundles))
    node = target.worker
    if spec.accelerator is AcceleratorKind.CPU:
        if config.replicas.cpus_per_rank is None:
            raise ConfigError(
                "CPU engines on a cluster need replicas.cpus_per_rank: without it an engine "
                "divides its node's cores by max_replicas, which assumes one shared machine"
            )
        pods_per_node = node.cpus // replica_cpus
        cpus = replica_cpus
        gpu_resource = None
        if pods_per_node < 1:
            raise ConfigError(
                f"one replica needs {replica_cpus} cores; a {target.name} node offers {node.cpus}"
            )
    else:
        if replica_gpus > node.accelerators:
            raise ConfigError(
                f"tensor_parallel_size {spec.tensor_parallel_size} needs {replica_gpus} GPUs on one "
                f"node; a {target.name} node has {node.accelerators}"
            )
        pods_per_node = node.accelerators // replica_gpus
        cpus = node.cpus // pods_per_node
        gpu_resource = GPU_RESOURCE[spec.accelerator]
        if cpus < replica_cpus:
            raise ConfigError(f"a {target.name} node has too few CPUs for {pods_per_node} engine pods")
    capacity = pods_per_node * target.worker_nodes
    wanted = config.max_replica_count
    if wanted > capacity:
        raise ConfigError(
            f"{wanted} replicas of {spec.name} need {wanted} engine pods; {target.name} fits "
            f"{pods_per_node} per node x {target.worker_nodes} nodes = {capacity}"
        )
    scaling = config.autoscaling
    if scaling.enabled:
        low, initial, high = scaling.min_replicas, max(scaling.min_replicas, 1), scaling.max_replicas
    else:
        low = initial = high = config.replicas.num_replicas
    return WorkerSizing(
        min_pods=low,
        initial_pods=initial,
        max_pods=high,
        pods_per_node=pods_per_node,
        cpus=cpus,
        memory_gib=node.memory_gib // pods_per_node,
        gpus=replica_gpus,
        gpu_resource=gpu_resource,
        autoscaling=scaling.enabled and low != high,
    )


FRONT_END_UTILISATION = Fraction(7, 10)
"""The share of a front-end core the sizing rule plans to use (headroom for bursts and TTFT)."""
SPARE_GATEWAYS = 1
"""Gateways beyond the rule's count, so losing one does not overload the rest."""


def gateway_replicas(peak_tokens_per_s: float, tokens_per_core: float) -> int:
    """Gateway replicas for a peak of streamed output tokens/s: the sizing rule of
    docs/serving.md, Z = ceil(Y / (0.7 x X)) + 1, with X the tokens/s one front-end core
    (Serve's proxy + one gateway replica) carries."""
    if peak_tokens_per_s <= 0 or tokens_per_core <= 0:
        raise ConfigError("peak tokens/s and tokens per front-end core must be positive")
    per_gateway = FRONT_END_UTILISATION * Fraction(str(tokens_per_core))
    return math.ceil(Fraction(str(peak_tokens_per_s)) / per_gateway) + SPARE_GATEWAYS


def sized_gateway_replicas(target: ClusterTarget) -> int | None:
    """The gateway replicas the target's traffic asks for on its gateway pods (None: the
    target has no gateway pods or states no peak)."""
    peak = target.traffic.peak_output_tokens_per_s
    if target.gateways is None or peak is None:
        return None
    return gateway_replicas(peak, target.gateways.tokens_per_core)


GATEWAYS_PER_POD = 1
"""Gateway replicas one gateway pod hosts: its ``cpus`` are one front-end core (Serve's
proxy + one replica) plus Ray's daemons."""


@dataclass(frozen=True)
class GatewaySizing:
    """The gateway worker group: pods of :data:`GATEWAYS_PER_POD` gateway replicas each."""

    min_pods: int
    max_pods: int
    cpus: int
    memory_gib: int
    offers: dict[str, float]
    """Ray resources one pod offers: what its replicas ask for (``gateway.ray_resources``)."""

    @property
    def autoscaling(self) -> bool:
        return self.min_pods != self.max_pods


def plan_gateways(config: StackConfig, target: ClusterTarget) -> GatewaySizing | None:
    """Pods for the gateway replicas ``config`` runs, or None when the target gives the
    gateways no pods of their own or the config runs none (``gateway.mode: direct``).

    With gateway autoscaling on and ``gateway.ray_resources`` set, the group follows Serve's
    bounds: a replica Ray cannot place (no free gateway resource) makes KubeRay's autoscaler
    add a pod, and an idle pod is removed. Otherwise it is fixed at the most replicas the
    config runs (a replica asking for no resource never makes the autoscaler add a pod).
    """
    pods = target.gateways
    gateway = config.gateway
    if pods is None or gateway.direct:  # the direct mode runs the gateway in every engine replica
        return None
    scaling = gateway.autoscaling
    if scaling.enabled and gateway.ray_resources:
        low, high = scaling.min_replicas, scaling.max_replicas
    else:
        low = high = gateway.max_replica_count
    return GatewaySizing(
        min_pods=math.ceil(low / GATEWAYS_PER_POD),
        max_pods=math.ceil(high / GATEWAYS_PER_POD),
        cpus=pods.cpus,
        memory_gib=pods.memory_gib,
        offers={name: amount * GATEWAYS_PER_POD for name, amount in gateway.ray_resources.items()},
    )


# --- the front end: HAProxy on every proxy node, the direct mode's routers beside it ---
#
# CPU costs on the front end's hosts, measured with benchmarks/serving_ceiling.py on the
# project's 2-core AMD EPYC box (session 25, null engine, 32 streams of 256 tokens, one
# frame per token; docs/serving.md, "The token path"), rounded up. A GPU host's cores
# are faster and idle, so these are on the safe side there.

HAPROXY_CPU_US_PER_TOKEN = 7.0
"""CPU µs Serve's HAProxy spends per streamed output token (one SSE frame in, one out):
6.1 measured."""
HAPROXY_CPU_US_PER_REQUEST = 200.0
"""CPU µs HAProxy spends per request besides its tokens (connection, the router's Lua
call, headers, the answer's end): not measured apart (inside the per-token figure at
256 tokens per request), kept as an estimate."""
ROUTER_CPU_US_PER_REQUEST = 2500.0
"""CPU µs the routers spend per request (Serve's direct-ingress server, parse, chat
template, tokenise, route, hand over the plan): 2,150 measured (8.4 µs per token at
256 tokens per request)."""
REPLICA_CPU_US_PER_TOKEN = 150.0
"""CPU µs an engine replica's own process spends per streamed token in the direct mode,
on its event loop's one core: vLLM's output processing (detokenising; vLLM's own API
server, which runs the same, measured 127-148 µs per token with the real model) plus
serveout's framing and writing (22.9 µs measured on the null engine)."""
SPARE_ROUTERS = 1
"""Routers per node beyond the rule's count, so losing one does not overload the rest."""
MIN_ROUTERS_PER_NODE = 2
"""The fewest routers per node (the local stack's count): one may die without failing a request."""


@dataclass(frozen=True)
class FrontEndSizing:
    """How the front end is sized on a target: routers per proxy node and HAProxy threads
    (None: not sized, the target states no peak), with the figures they came from."""

    routers_per_node: int
    haproxy_threads: int | None
    peak_tokens_per_s: float | None = None
    peak_requests_per_s: float | None = None
    replica_tokens_per_s: float | None = None
    """The direct mode: what one engine replica streams itself at the peak (its share of it)."""

    @property
    def replica_core_share(self) -> float | None:
        """The share of one core a replica's event loop spends streaming at the peak."""
        if self.replica_tokens_per_s is None:
            return None
        return self.replica_tokens_per_s * REPLICA_CPU_US_PER_TOKEN / 1e6


def haproxy_threads(peak_tokens_per_s: float, peak_requests_per_s: float) -> int:
    """HAProxy threads of one pod taking client traffic: enough for the whole peak alone,
    ceil((Y x token cost + R x request cost) / 0.7 core), because the Service balances
    connections, not requests (a few clients with keep-alive pools may all land on one pod)."""
    busy = Fraction(str(peak_tokens_per_s)) * Fraction(str(HAPROXY_CPU_US_PER_TOKEN)) + Fraction(
        str(peak_requests_per_s)) * Fraction(str(HAPROXY_CPU_US_PER_REQUEST))
    return max(1, math.ceil(busy / 1_000_000 / FRONT_END_UTILISATION))


def routers_per_node(peak_requests_per_s: float) -> int:
    """Routers on each proxy node: HAProxy asks a router on its own node, so, like its
    threads, a node's routers must carry the whole peak: ceil(R x router cost / 0.7) + 1
    spare, at least :data:`MIN_ROUTERS_PER_NODE` (one router is one Python process, one core)."""
    busy = Fraction(str(peak_requests_per_s)) * Fraction(str(ROUTER_CPU_US_PER_REQUEST)) / 1_000_000
    return max(MIN_ROUTERS_PER_NODE, math.ceil(busy / FRONT_END_UTILISATION) + SPARE_ROUTERS)


def plan_front_end(config: StackConfig, target: ClusterTarget) -> FrontEndSizing:
    """The front end for ``config`` on ``target``; :class:`ConfigError` when a pod taking
    client traffic has fewer cores than its HAProxy threads."""
    if config.gateway.direct and config.gateway.ray_resources:
        raise ConfigError(
            "gateway.ray_resources pins the routers of gateway.mode direct, which Ray places on "
            "every node with a Serve proxy (the engine pods, the head): no pod offers it. Leave it "
            "unset, or use gateway.mode separate for gateway pods of their own")
    traffic = target.traffic
    peak = traffic.peak_output_tokens_per_s
    if peak is None:
        return FrontEndSizing(routers_per_node=MIN_ROUTERS_PER_NODE, haproxy_threads=None)
    requests = peak / traffic.output_tokens_per_request
    threads = haproxy_threads(peak, requests)
    for name, cpus in client_pod_cpus(config, target).items():
        if threads > cpus:
            raise ConfigError(f"{name} pods take client traffic with {cpus} CPUs, but HAProxy needs "
                              f"{threads} threads for the target's peak of {peak:g} tok/s")
    return FrontEndSizing(
        routers_per_node=routers_per_node(requests) if config.gateway.direct else MIN_ROUTERS_PER_NODE,
        haproxy_threads=threads, peak_tokens_per_s=peak, peak_requests_per_s=requests,
        replica_tokens_per_s=peak / config.max_replica_count if config.gateway.direct else None,
    )


def head_takes_clients(config: StackConfig, target: ClusterTarget) -> bool:
    """Whether the client Service includes the head pod: only when it may be the one pod
    with a Serve proxy (no gateway pods, and the engines may scale to zero), since its
    HAProxy holds requests while Serve starts a replica. Otherwise the head keeps to the
    GCS and the Serve controller."""
    return plan_workers(config, target).min_pods == 0 and plan_gateways(config, target) is None


def client_pod_cpus(config: StackConfig, target: ClusterTarget) -> dict[str, int]:
    """The CPUs of each kind of pod the client Service selects (KubeRay's serve Service:
    every ready worker pod, the head when :func:`head_takes_clients`)."""
    pods = {"engine": plan_workers(config, target).cpus}
    if gateways := plan_gateways(config, target):
        pods["gateway"] = gateways.cpus
    if head_takes_clients(config, target):
        pods["head"] = target.head.cpus
    return pods
