"""A :class:`~simulator.workloads.requests.RequestSet` (fixed prompts at fixed times) on a
simulated cluster, through serveout's router, and what routing did with it.

The cluster is :class:`~simulator.cluster.ClusterSim` itself (the replicas, the
router's :class:`~serving.routing.core.RoutingCore` and policy, admission); only its
arrivals are the set's own, request ``i`` at its time, instead of a profile's
schedule. With ``engine_view`` the router sees each replica's prefix cache exactly as
the engine holds it (:class:`SimulatedCacheView`: the simulator's KV block pool, the
counterpart of following a vLLM engine's KV cache events without their milliseconds
of delay). Figures: the engines' prefix hit rate (hit tokens over prompt tokens looked
up at admission), TTFT percentiles, SLO attainment, and per replica the requests
routed there and the time-averaged requests in flight.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from loadtest.cli import build_parser, config_from_args
from serving.routing import build_policy
from serving.routing.core import RoutingCore
from serving.routing.metrics import RoutingMetrics
from simulator.cluster import ClusterSim, StageRun
from simulator.hosts import Host
from simulator.config import SimulationConfig
from simulator.replica_setup import ReplicaSetup, replica_setup
from simulator.errors import SimulationConfigError
from simulator.kv_cache import BlockPool
from simulator.workloads.requests import FixedTraffic, RequestSet

DRAIN_S = 3600.0  # how long requests may run on after the last arrival
REQUEST_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class Slo:
    """A per-request objective: first token within ``ttft_s`` and tokens ``tpot_s`` apart."""

    ttft_s: float
    tpot_s: float

    def label(self) -> str:
        return f"TTFT <= {self.ttft_s * 1000:g} ms, TPOT <= {self.tpot_s * 1000:g} ms"


class SimulatedCacheView:
    """A simulated engine's prefix cache as a routing policy reads it (exact, current)."""

    __slots__ = ("_pool",)

    def __init__(self, pool: BlockPool) -> None:
        self._pool = pool

    def cached_blocks(self, hashes: Sequence[int]) -> int:
        return self._pool.cached_prefix(hashes)


@dataclass(frozen=True)
class FixedRunResult:
    """One request set on one cluster under one policy."""

    policy: str
    requests: int
    ok: int
    prompt_tokens_queried: int
    prefix_hit_tokens: int
    ttft_s: np.ndarray  # of the requests that succeeded
    slo_met: int
    routed: tuple[int, ...]  # per replica
    in_flight_mean: tuple[float, ...]  # per replica, time-averaged
    end_s: float
    preemptions: int

    @property
    def hit_rate(self) -> float:
        return self.prefix_hit_tokens / self.prompt_tokens_queried if self.prompt_tokens_queried else 0.0

    def ttft_p(self, q: float) -> float | None:
        return float(np.percentile(self.ttft_s, q)) if len(self.ttft_s) else None

    @property
    def slo_attainment(self) -> float:
        """Share of requests meeting the SLO (a failed request misses)."""
        return self.slo_met / self.requests if self.requests else 0.0

    @property
    def max_over_mean_routed(self) -> float:
        mean = sum(self.routed) / len(self.routed)
        return max(self.routed) / mean if mean else 0.0

    @property
    def max_over_mean_in_flight(self) -> float:
        mean = sum(self.in_flight_mean) / len(self.in_flight_mean)
        return max(self.in_flight_mean) / mean if mean else 0.0


def _load_config(requests: RequestSet):
    args = ["run", "--target", "http://simulated.invalid", "--no-metrics", "--timeout", f"{REQUEST_TIMEOUT_S:g}s",
            "--profile", "poisson:rate=1,max_concurrency=4096", "--workload", "random:input_len=8,output_len=8",
            "--duration", f"{requests.span_s + 1.0:.3f}s", "--requests", str(len(requests)),
            "--drain-timeout", f"{DRAIN_S:g}s"]
    return config_from_args(build_parser().parse_args(args))


class FixedArrivalSim(ClusterSim):
    """:class:`ClusterSim` on a request set's own arrivals, counting load per replica."""

    def __init__(self, setup: ReplicaSetup, sim: SimulationConfig, requests: RequestSet, *, seed: int,
                 engine_view: bool) -> None:
        config = _load_config(requests)
        plan = config.profile.next_stage([])
        super().__init__(setup, sim, config, plan, FixedTraffic(requests), seed=seed)
        self.arrivals = np.array([r.t_s for r in requests.requests])
        self.free_users = list(range(len(requests) - 1, -1, -1))  # a client slot per request: none waits
        if engine_view:
            if setup.replica().unit_tokens != sim.routing.prefix_block_tokens:
                raise SimulationConfigError(
                    f"the engine view needs prefix_block_tokens = the simulated cache's unit "
                    f"({setup.replica().unit_tokens}), got {sim.routing.prefix_block_tokens}")
            rng = random.Random(seed)
            self.core = RoutingCore(build_policy(sim.routing, rng=rng), RoutingMetrics("engine"), rng=rng,
                                    cache_views=self._cache_view)
        self._views: dict[str, SimulatedCacheView] = {}
        self.routed: dict[str, int] = {}
        self.in_flight_s: dict[str, float] = {}
        self._sent_at: dict[int, float] = {}

    def _cache_view(self, replica_id: str) -> SimulatedCacheView | None:
        return self._views.get(replica_id)

    def _new_host(self) -> Host:
        host = super()._new_host()
        self._views[host.id] = SimulatedCacheView(host.replica.kv)
        return host

    def _send(self, f, host, request) -> None:
        self.routed[host.id] = self.routed.get(host.id, 0) + 1
        self._sent_at[f.rid] = self.now
        super()._send(f, host, request)

    def _complete(self, host, seq) -> None:
        self.in_flight_s[host.id] = self.in_flight_s.get(host.id, 0.0) + self.now - self._sent_at.pop(seq.rid)
        super()._complete(host, seq)


def run_fixed(requests: RequestSet, sim: SimulationConfig, slo: Slo, *, seed: int = 0,
              engine_view: bool = True, setup: ReplicaSetup | None = None) -> FixedRunResult:
    """Simulate ``requests`` on ``sim``'s cluster (fixed replica count) and measure routing."""
    setup = setup or replica_setup(sim)
    cluster = FixedArrivalSim(setup, sim, requests, seed=seed, engine_view=engine_view)
    run: StageRun = cluster.run()
    rows = run.rows
    ok = [r for r in rows if r[6]]
    ttft = np.array([r[11] for r in ok], dtype=float)
    met = sum(1 for r in ok if r[11] <= slo.ttft_s and _tpot(r) <= slo.tpot_s)
    hosts = cluster.hosts
    span = max(run.end_s, 1e-9)
    return FixedRunResult(
        policy=str(sim.routing.policy), requests=len(rows), ok=len(ok),
        prompt_tokens_queried=sum(h.replica.prefix_queried for h in hosts),
        prefix_hit_tokens=sum(h.replica.prefix_hits for h in hosts),
        ttft_s=ttft, slo_met=met,
        routed=tuple(cluster.routed.get(h.id, 0) for h in hosts),
        in_flight_mean=tuple(cluster.in_flight_s.get(h.id, 0.0) / span for h in hosts),
        end_s=run.end_s, preemptions=run.preemptions)


def _tpot(row: tuple) -> float:
    ttft, e2e, tokens = row[11], row[12], row[14]
    return (e2e - ttft) / (tokens - 1) if tokens and tokens > 1 else 0.0
