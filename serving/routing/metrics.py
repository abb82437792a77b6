"""Routing metrics in the gateway's Prometheus output.

Names (all labelled with ``deployment``, the label the app builder gives the
engine deployment; ``replica`` is Serve's replica id):

``serveout_routed_requests_total{deployment,replica,policy}`` (counter)
    Generation requests a replica accepted, counted in Serve's
    ``on_request_routed`` hook (Serve calls it when it enforces
    ``max_ongoing_requests``: its default, except under Ray Client). Control
    calls (``stats``, ``check_health``) are routed least-loaded and not counted.
``serveout_routing_decisions_total{deployment,policy,decision}`` (counter)
    The policy's decision for each of those requests, taken when it ranked the
    replicas: ``prefix_hit``, ``prefix_fallback_imbalance``, ``prefix_miss``,
    ``session_hit``, ``session_new``, ``session_moved``, ``least_loaded``,
    ``round_robin``. Prefix hit rate at routing time:
    ``prefix_hit / (prefix_hit + prefix_fallback_imbalance + prefix_miss)``.
``serveout_engine_waiting_requests{deployment,replica}`` (gauge)
``serveout_engine_running_requests{deployment,replica}`` (gauge)
``serveout_engine_kv_cache_usage{deployment,replica}`` (gauge, 0..1)
``serveout_engine_prefix_cache_queries_total{deployment,replica}`` (counter, tokens)
``serveout_engine_prefix_cache_hits_total{deployment,replica}`` (counter, tokens)
``serveout_engine_prompt_tokens_total{deployment,replica}`` (counter)
``serveout_engine_generation_tokens_total{deployment,replica}`` (counter)
``serveout_engine_adapters_loaded{deployment,replica}`` (gauge)
``serveout_engine_adapters_refused{deployment,replica}`` (gauge)
``serveout_engine_adapter_loads_total{deployment,replica}`` (counter)
``serveout_engine_adapter_load_seconds_total{deployment,replica}`` (counter, seconds)
``serveout_engine_adapters_cached{deployment,replica}`` (gauge)
``serveout_engine_adapters_active{deployment,replica}`` (gauge)
``serveout_engine_adapter_evictions_total{deployment,replica}`` (counter)
``serveout_engine_adapter_residency{deployment,replica,adapter,state}`` (gauge, 1)
    Each replica's engine stats as last polled by Serve (``record_routing_stats``,
    every ``RoutingSpec.stats_period_s``); absent until the first poll. Residency
    says where each loaded adapter is in each replica's engine: ``active`` (in the
    running batch's slots), ``cached`` (host memory), ``absent`` (evicted from the
    host LRU: its next request reads it from disk inside an engine step); one series
    per replica and loaded adapter, so bounded by the catalogue.
``serveout_replica_failed{deployment,replica}`` (gauge, 1)
    A live replica this router skips because a request to it failed when it died
    (its engine or actor); the series goes when Serve removes the replica.
``serveout_adapter_slot_waits_total{deployment,adapter}`` (counter)
    Requests for a LoRA adapter routed while no replica had it running or a free
    adapter slot: each waits in its engine until one frees (adapters outnumber
    ``max_loras`` x replicas at that moment; raise ``lora.max_loras`` or add replicas).
``serveout_queue_depth{deployment}`` (gauge)
    Engine waiting + running summed over the deployment's replicas: the signal
    for an outside autoscaler (KEDA, HPA).

Series of replicas that left are dropped. Shape: each router owns a
:class:`RoutingMetrics`; one :class:`RoutingMetricsCollector` per Prometheus
registry merges every router of the process, because the exposition format
allows each metric family once and a gateway holds one router per engine
deployment (or more). Serve, not serveout, constructs routers, so a router finds
its registry's collector with :func:`routing_collector`, a lookup keyed by the
registry object (the one process-level table here; entries die with their
registry). Routers run on their own event-loop thread and ``/metrics`` on
another: both classes lock.
"""

from __future__ import annotations

import threading
import weakref
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import REGISTRY, CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

from serving.config.stack import RoutingPolicyName
from serving.engine.protocol import EngineStats
from serving.routing.policy import RoutingDecision

ROUTED = "serveout_routed_requests"
DECISIONS = "serveout_routing_decisions"
QUEUE_DEPTH = "serveout_queue_depth"
FAILED = "serveout_replica_failed"
SLOT_WAITS = "serveout_adapter_slot_waits"
RESIDENCY = "serveout_engine_adapter_residency"


@dataclass(frozen=True)
class _EngineFamily:
    """One per-replica family, read from the :class:`EngineStats` field ``stat``."""

    name: str
    stat: str
    counter: bool
    doc: str


_ENGINE_FAMILIES = (
    _EngineFamily("serveout_engine_waiting_requests", "waiting", False,
                  "Requests waiting in the engine."),
    _EngineFamily("serveout_engine_running_requests", "running", False,
                  "Requests running in the engine."),
    _EngineFamily("serveout_engine_kv_cache_usage", "kv_cache_usage", False,
                  "Fraction of the KV cache in use."),
    _EngineFamily("serveout_engine_prefix_cache_queries", "prefix_cache_queries", True,
                  "Prompt tokens looked up in the prefix cache."),
    _EngineFamily("serveout_engine_prefix_cache_hits", "prefix_cache_hits", True,
                  "Prompt tokens found in the prefix cache."),
    _EngineFamily("serveout_engine_prompt_tokens", "prompt_tokens", True,
                  "Prompt tokens the engine processed."),
    _EngineFamily("serveout_engine_generation_tokens", "generation_tokens", True,
                  "Tokens the engine generated."),
    _EngineFamily("serveout_engine_adapters_loaded", "adapters_loaded", False,
                  "LoRA adapters the engine holds, ready for requests."),
    _EngineFamily("serveout_engine_adapters_refused", "adapters_refused", False,
                  "Declared LoRA adapters the engine refused (bad folder, rank, base): see its log."),
    _EngineFamily("serveout_engine_adapter_loads", "adapter_loads", True,
                  "LoRA adapters loaded since the engine started."),
    _EngineFamily("serveout_engine_adapter_load_seconds", "adapter_load_seconds", True,
                  "Seconds spent checking and loading LoRA adapters."),
    _EngineFamily("serveout_engine_adapters_cached", "adapters_cached_count", False,
                  "LoRA adapters in the engine's host-memory cache (lora.max_cpu_loras)."),
    _EngineFamily("serveout_engine_adapters_active", "adapters_active_count", False,
                  "LoRA adapters with requests in the running batch (at most lora.max_loras)."),
    _EngineFamily("serveout_engine_adapter_evictions", "adapter_evictions", True,
                  "Loaded LoRA adapters seen leaving the engine's host-memory cache (polled each second)."),
)

ENGINE_VIEW_FAMILIES = frozenset(spec.name for spec in _ENGINE_FAMILIES) | {QUEUE_DEPTH, RESIDENCY}
"""The families describing the engine replicas themselves (their polled stats and the
queue depth): every router of a deployment shows the same ones."""


@dataclass(frozen=True)
class RoutingMetricsSnapshot:
    """One router's routing counters and engine stats at one instant."""

    deployment: str
    routed: Mapping[tuple[str, RoutingPolicyName], int] = field(default_factory=dict)
    decisions: Mapping[tuple[RoutingPolicyName, RoutingDecision], int] = field(default_factory=dict)
    engine: Mapping[str, EngineStats] = field(default_factory=dict)
    failed: frozenset[str] = frozenset()
    engine_view: bool = True
    slot_waits: Mapping[str, int] = field(default_factory=dict)


class RoutingMetrics:
    """The counters and engine-stat snapshot of one router (thread-safe).

    ``engine_view`` False: export no engine stats (the ``serveout_engine_*`` families and
    the queue depth). The direct mode's router says so, because there every engine
    replica exports its own, fresher, stats."""

    def __init__(self, deployment: str, *, engine_view: bool = True) -> None:
        self.deployment = deployment
        self.engine_view = engine_view
        self._lock = threading.Lock()
        self._routed: Counter[tuple[str, RoutingPolicyName]] = Counter()
        self._decisions: Counter[tuple[RoutingPolicyName, RoutingDecision]] = Counter()
        self._engine: dict[str, EngineStats] = {}
        self._failed: frozenset[str] = frozenset()
        self._slot_waits: Counter[str] = Counter()

    def count_slot_wait(self, adapter: str) -> None:
        """A request for ``adapter`` went to a replica whose adapter slots were all taken."""
        with self._lock:
            self._slot_waits[adapter] += 1

    def count_routed(self, replica_id: str, policy: RoutingPolicyName, decision: RoutingDecision) -> None:
        """One generation request was sent to ``replica_id``."""
        with self._lock:
            self._routed[(replica_id, policy)] += 1
            self._decisions[(policy, decision)] += 1

    def set_replicas(self, engine_stats: Mapping[str, EngineStats | None]) -> None:
        """The live replicas and their latest stats (``None`` = not polled yet)."""
        with self._lock:
            self._engine = {rid: stats for rid, stats in engine_stats.items()
                            if stats is not None and self.engine_view}
            for key in [key for key in self._routed if key[0] not in engine_stats]:
                del self._routed[key]

    def set_failed(self, replica_ids: frozenset[str]) -> None:
        """The live replicas marked failed."""
        with self._lock:
            self._failed = replica_ids

    def snapshot(self) -> RoutingMetricsSnapshot:
        with self._lock:
            return RoutingMetricsSnapshot(
                self.deployment, dict(self._routed), dict(self._decisions), dict(self._engine),
                self._failed, self.engine_view, dict(self._slot_waits),
            )


class RoutingMetricsCollector:
    """A Prometheus collector merging the :class:`RoutingMetrics` of every router of a process.

    Routers of the same deployment add up (their counters are summed; engine
    stats are the same replicas' and the last one wins). A router's series go
    away with the router (sources are held weakly).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sources: weakref.WeakSet[RoutingMetrics] = weakref.WeakSet()

    def attach(self, source: RoutingMetrics) -> None:
        with self._lock:
            self._sources.add(source)

    def failed_replicas(self) -> list[str]:
        """Live replicas some router skips because a request to them failed (sorted)."""
        with self._lock:
            sources = list(self._sources)
        return sorted({replica for source in sources for replica in source.snapshot().failed})

    def describe(self) -> list[Metric]:
        """The families this collector owns (lets the registry catch name clashes)."""
        return list(_families([]))

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            sources = list(self._sources)
        yield from _families([source.snapshot() for source in sources])


def _families(snapshots: list[RoutingMetricsSnapshot]) -> Iterator[Metric]:
    routed: Counter[tuple[str, str, str]] = Counter()
    decisions: Counter[tuple[str, str, str]] = Counter()
    engine: dict[tuple[str, str], EngineStats] = {}
    failed: set[tuple[str, str]] = set()
    slot_waits: Counter[tuple[str, str]] = Counter()
    deployments: set[str] = set()
    for snap in snapshots:
        if snap.engine_view:
            deployments.add(snap.deployment)
        for (replica, policy), n in snap.routed.items():
            routed[(snap.deployment, replica, str(policy))] += n
        for (policy, decision), n in snap.decisions.items():
            decisions[(snap.deployment, str(policy), str(decision))] += n
        for replica, stats in snap.engine.items():
            engine[(snap.deployment, replica)] = stats
        failed.update((snap.deployment, replica) for replica in snap.failed)
        for adapter, n in snap.slot_waits.items():
            slot_waits[(snap.deployment, adapter)] += n

    family = CounterMetricFamily(ROUTED, "Generation requests routed to each engine replica.",
                                 labels=["deployment", "replica", "policy"])
    for labels, n in sorted(routed.items()):
        family.add_metric(list(labels), n)
    yield family

    family = CounterMetricFamily(DECISIONS, "Routing decisions by policy and outcome.",
                                 labels=["deployment", "policy", "decision"])
    for labels, n in sorted(decisions.items()):
        family.add_metric(list(labels), n)
    yield family

    for spec in _ENGINE_FAMILIES:
        kind = CounterMetricFamily if spec.counter else GaugeMetricFamily
        family = kind(spec.name, spec.doc, labels=["deployment", "replica"])
        for (deployment, replica), stats in sorted(engine.items()):
            family.add_metric([deployment, replica], getattr(stats, spec.stat))
        yield family

    family = GaugeMetricFamily(RESIDENCY, "Where each loaded LoRA adapter is in each replica's engine: "
                               "active (batch slots), cached (host memory) or absent (read from disk on use).",
                               labels=["deployment", "replica", "adapter", "state"])
    for (deployment, replica), stats in sorted(engine.items()):
        for adapter in sorted(stats.adapters):
            if (state := stats.adapter_residency(adapter)) != "unknown":
                family.add_metric([deployment, replica, adapter, state], 1)
    yield family

    family = GaugeMetricFamily(FAILED, "Live engine replicas skipped because they died under a request.",
                               labels=["deployment", "replica"])
    for labels in sorted(failed):
        family.add_metric(list(labels), 1)
    yield family

    family = CounterMetricFamily(SLOT_WAITS, "LoRA requests routed while every replica's adapter "
                                 "slots held other adapters.", labels=["deployment", "adapter"])
    for labels, n in sorted(slot_waits.items()):
        family.add_metric(list(labels), n)
    yield family

    depth = GaugeMetricFamily(QUEUE_DEPTH, "Engine waiting + running requests over the deployment.",
                              labels=["deployment"])
    for deployment in sorted(deployments):
        total = sum(s.queue_depth for (d, _), s in engine.items() if d == deployment)
        depth.add_metric([deployment], total)
    yield depth


_COLLECTORS: weakref.WeakKeyDictionary[CollectorRegistry, RoutingMetricsCollector] = (
    weakref.WeakKeyDictionary()
)
_COLLECTORS_LOCK = threading.Lock()


def routing_collector(registry: CollectorRegistry | None = None) -> RoutingMetricsCollector:
    """The registry's routing collector, created and registered on first use.

    ``None`` means prometheus_client's default registry (what the gateway serves).

    Calling it again with the same registry returns the same collector, so any
    number of routers share it and registering never raises a duplicate error.
    """
    if registry is None:
        registry = REGISTRY
    with _COLLECTORS_LOCK:
        collector = _COLLECTORS.get(registry)
        if collector is None:
            collector = RoutingMetricsCollector()
            registry.register(collector)
            _COLLECTORS[registry] = collector
        return collector
