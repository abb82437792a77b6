"""The discrete-event simulation of one load-test stage against a simulated cluster.

Events (a heap ordered by time): a client starts a session's turn; a replica's planned
step(s) end; the autoscaler ticks; a new replica becomes ready; the routers poll the
replicas' stats (their LoRA slots and host caches, a period late). The parts that decide
are serveout's own: :class:`serving.routing.core.RoutingCore` with the configured
policy ranks the live replicas for every request (fed each replica's ongoing count as
Serve's queue-length cache, the id the router would see, and the prompt's token ids);
:class:`serving.admission.bound.AdmissionController`, on the simulated clock, turns
requests past the gateway's bound into 429s; :class:`ServeAutoscaler` applies
:func:`serving.autoscaling.queue_depth.desired_replicas`. As Serve does, a request goes to the
first ranked replica with fewer than ``max_ongoing`` requests, else waits at the handle
until one finishes. The client side is ``loadtest run``'s: open-loop arrivals from the
same schedule (at most ``max_concurrency`` sessions in flight; a late start is
recorded as such), or closed-loop users; a failed turn ends its session. Each request's
serving path (what the HTTP proxy, gateway and Ray hops add to its first token and its
end) varies around the profile's mean (``serving_path_sigma``), so closed-loop users
that start together drift apart over their turns, as real ones do, instead of arriving,
prefilling and finishing in lock-step.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from loadtest.analysis.arrivals import stage_arrivals
from loadtest.analysis.records import ErrorKind
from loadtest.client.openai_api import MAX_RETRY_AFTER_S
from loadtest.config import LoadTestConfig
from loadtest.profiles import OpenLoad, StagePlan
from serving.engine.protocol import EngineStats
from serving.errors import OverloadedError
from serving.admission.bound import AdmissionController
from serving.routing import RoutingRequest, build_policy
from serving.routing.core import Candidate, RoutingCore
from serving.routing.metrics import RoutingMetrics
from serving.routing.prefix_index import block_hashes
from simulator.autoscaler import ServeAutoscaler
from simulator.config import SimulationConfig
from simulator.lora import AdapterCounters
from simulator.replica_setup import ReplicaSetup
from simulator.hosts import Flight, Host
from simulator.sequence import Seq
from simulator.token_gaps import TokenGaps
from simulator.traffic import StageTraffic

TURN, ARRIVAL, STEP, TICK, READY, ANSWERED, STATS = range(7)  # ANSWERED: the client has read an answer's end


@dataclass
class StageRun:
    """What one simulated stage produced: raw rows for the records, and cluster figures."""

    rows: list[tuple] = field(default_factory=list)
    itls: TokenGaps = field(default_factory=TokenGaps)  # each row's inter-token gaps
    replica_seconds: float = 0.0
    replica_timeline: list[tuple[float, int]] = field(default_factory=list)
    preemptions: int = 0
    session_wraps: int = 0
    end_s: float = 0.0
    adapters: AdapterCounters = field(default_factory=AdapterCounters)  # every replica's, summed


class ClusterSim:
    """One stage's simulation; :meth:`run` returns its :class:`StageRun`."""

    def __init__(self, setup: ReplicaSetup, sim: SimulationConfig, config: LoadTestConfig, plan: StagePlan,
                 traffic: StageTraffic, *, seed: int, progress: Callable[[float], None] | None = None) -> None:
        self.setup, self.sim, self.config, self.plan, self.traffic = setup, sim, config, plan, traffic
        self.progress = progress
        self.now = 0.0
        self.heap: list[tuple] = []
        self.counter = itertools.count()
        rng = random.Random(seed)
        self._path_rng = random.Random(seed + 1)  # each request's serving path (users drift apart, as real ones)
        self._path_mean = setup.hardware.serving_path_s
        self._path_sigma = setup.hardware.path_sigma
        self.core = RoutingCore(build_policy(sim.routing, rng=rng), RoutingMetrics("engine"), rng=rng,
                                adapter_slots=sim.routing.adapter_slots)
        self.admission = AdmissionController(sim.max_in_flight, clock=lambda: self.now)
        self.autoscaler = ServeAutoscaler(sim.autoscaling) if sim.autoscaling.enabled else None
        self.hosts: list[Host] = []
        self.handle_queue: deque[Flight] = deque()
        self.issued = 0
        self.client_events = 0
        self.in_flight = 0
        self.out = StageRun()
        self._hashes: dict[tuple[int, int], tuple[int, ...]] = {}
        self._candidates: dict[tuple[str, int], Candidate] = {}
        load = plan.load
        self.open = isinstance(load, OpenLoad)
        self.duration = config.duration_s
        if self.open:
            self.arrivals = stage_arrivals(load, seed=plan.seed(config.seed), duration_s=config.duration_s,
                                           count=config.max_requests)
            self.free_users = list(range(load.max_concurrency - 1, -1, -1))
            self.waiting_arrivals: deque[float] = deque()
        self.limit = config.stage_time_limit_s

    # --- the loop -------------------------------------------------------------------------
    def push(self, t: float, kind: int, payload) -> None:
        if kind in (TURN, ARRIVAL, ANSWERED):
            self.client_events += 1
        heapq.heappush(self.heap, (t, next(self.counter), kind, payload))

    def run(self) -> StageRun:
        initial = self.sim.autoscaling.min_replicas if self.autoscaler else self.sim.replicas
        initial = max(initial, self.sim.replicas if self.autoscaler else 0, 1)
        if self.autoscaler:
            initial = min(initial, self.sim.autoscaling.max_replicas)
        for _ in range(initial):
            self._ready(self._new_host())
        self._sync_router()
        if self.open:
            if len(self.arrivals):
                self.push(float(self.arrivals[0]), ARRIVAL, 0)
        else:
            load = self.plan.load
            for user in range(load.users):
                self.push(load.ramp_up_s * user / load.users, TURN, (user, None, 0, None))
        if self.autoscaler:
            self.push(self.sim.autoscaling.metrics_interval_s, TICK, None)
        if self.setup.lora is not None and self.setup.adapters:
            self.push(self.sim.routing.stats_period_s, STATS, None)
        handlers = {TURN: self._on_turn, ARRIVAL: self._on_arrival, STEP: self._on_step, TICK: self._on_tick,
                    READY: self._on_ready, ANSWERED: self._on_answered, STATS: self._on_stats}
        events = 0
        heap = self.heap
        while heap:
            t, _, kind, payload = heapq.heappop(heap)
            if t > self.limit:
                break
            self.now = t
            handlers[kind](payload)
            events += 1
            if self.progress is not None and events % 4096 == 0:
                self.progress(t)
        self._cancel_leftovers()
        self.out.end_s = self.now
        for host in self.hosts:
            self.out.replica_seconds += (host.stopped if host.stopped is not None else self.now) - host.started
            self.out.preemptions += host.replica.preemptions
            if host.replica.adapters is not None:
                self.out.adapters.add(host.replica.adapters.counters)
        self.out.session_wraps = self.traffic.wraps
        return self.out

    # --- client ---------------------------------------------------------------------------
    def _budget_left(self) -> bool:
        if self.config.max_requests is not None and self.issued >= self.config.max_requests:
            return False
        return self.duration is None or self.now < self.duration

    def _on_arrival(self, index: int) -> None:
        self.client_events -= 1
        scheduled = float(self.arrivals[index])
        if index + 1 < len(self.arrivals) and self._budget_left():
            self.push(float(self.arrivals[index + 1]), ARRIVAL, index + 1)
        if not self._budget_left():
            return
        if self.free_users:
            self._start_session(self.free_users.pop(), scheduled)
        else:
            self.waiting_arrivals.append(scheduled)

    def _start_session(self, user: int, scheduled: float | None) -> None:
        self.client_events += 1
        self._on_turn((user, self.traffic.next_session(), 0, scheduled))

    def _session_over(self, user: int, pause_s: float = 0.0) -> None:
        if self.open:
            if self.waiting_arrivals and self._budget_left():
                self._start_session(user, self.waiting_arrivals.popleft())
            else:
                self.free_users.append(user)
        elif self._budget_left():
            self.push(self.now + pause_s, TURN, (user, None, 0, None))

    def _on_turn(self, payload) -> None:
        self.client_events -= 1
        user, session, turn, scheduled = payload
        if not self._budget_left():
            return self._session_over(user)
        if session is None:
            session = self.traffic.next_session()
        prompt = self.traffic.prompt(session, turn)
        out_len = self.traffic.sessions[session].max_tokens[turn]
        model = self.traffic.sessions[session].model
        adapter = model if model in self.setup.adapters else None
        flight = Flight(self.issued, user, session, turn, scheduled, self.now, prompt, out_len, adapter)
        self.issued += 1
        # As in the direct mode (the default): the router plans a request (its context
        # check included) before the replica admits it. (The separate mode's gateway
        # admits first; a refusal is a 400 either way, only the order of two refusals
        # of one request differs.)
        if len(prompt) + out_len > self.setup.spec.max_model_len:
            return self._fail(flight, 400, ErrorKind.HTTP_4XX, "prompt + max_tokens exceed max_model_len")
        try:
            flight.ticket = self.admission.admit()
        except OverloadedError as exc:
            return self._fail(flight, 429, ErrorKind.HTTP_429, str(exc), float(exc.retry_after_s))
        self.in_flight += 1
        self._route(flight)

    def _fail(self, f: Flight, status: int, kind: ErrorKind, message: str, retry_after: float | None = None) -> None:
        self.out.rows.append((f.rid, f.session, f.turn, f.user, f.scheduled, f.start, False, status, kind, message,
                              retry_after, None, 0.0, len(f.prompt), None, f.out_len))
        self.out.itls.append(None)
        pause = min(retry_after, MAX_RETRY_AFTER_S) if retry_after and not self.open else 0.0
        self._session_over(f.user, pause)

    # --- gateway and router ---------------------------------------------------------------
    def _request(self, f: Flight) -> RoutingRequest:
        session_id = f"session-{f.user}-{f.session}" if self.sim.send_session_id else None
        return RoutingRequest(str(f.rid), f.prompt, session_id, f.adapter)

    def _route(self, f: Flight) -> None:
        live = {h.id: h for h in self.hosts if h.live}
        candidates = [self._candidate(h.id, len(h.flights)) for h in live.values()]
        request = self._request(f)
        order = self.core.choose(request, candidates)
        for replica_id in order:
            host = live[replica_id]
            if len(host.flights) < self.setup.max_ongoing:
                return self._send(f, host, request)
        self.handle_queue.append(f)

    def _candidate(self, replica_id: str, ongoing: int) -> Candidate:
        """Serve's view of a replica (immutable: one object per replica and count, reused)."""
        candidate = self._candidates.get((replica_id, ongoing))
        if candidate is None:
            candidate = self._candidates[(replica_id, ongoing)] = Candidate(replica_id, ongoing)
        return candidate

    def _send(self, f: Flight, host: Host, request: RoutingRequest) -> None:
        self.core.on_routed(request, host.id)
        key = (f.session, f.turn)
        hashes = self._hashes.get(key)
        if hashes is None:
            hashes = self._hashes[key] = block_hashes(f.prompt, host.replica.unit_tokens, f.adapter)
        seq = Seq(f.rid, len(f.prompt), f.out_len, hashes, self.setup.adapter_id(f.adapter))
        host.flights[f.rid] = (f, seq)
        f.host = host
        host.replica.add(seq)
        if not host.busy:
            self._plan(host)
        else:
            end = host.replica.interrupt(self.now)
            if end is not None:
                host.version += 1
                self.push(end, STEP, (host, host.version))

    def _dispatch_waiting(self) -> None:
        for _ in range(len(self.handle_queue)):
            if not any(h.live and len(h.flights) < self.setup.max_ongoing for h in self.hosts):
                return
            self._route(self.handle_queue.popleft())

    # --- replicas -------------------------------------------------------------------------
    def _plan(self, host: Host) -> None:
        end = host.replica.plan(self.now)
        host.busy = end is not None
        if end is not None:
            host.version += 1
            self.push(end, STEP, (host, host.version))

    def _on_step(self, payload) -> None:
        host, version = payload
        if version != host.version:
            return
        for seq in host.replica.commit():
            self._complete(host, seq)
        self._plan(host)
        if not host.live and not host.flights and host.stopped is None:
            host.stopped = self.now
        self._dispatch_waiting()

    def _complete(self, host: Host, seq: Seq) -> None:
        f, _ = host.flights.pop(seq.rid)
        times = host.replica.token_times(seq)
        path = self._serving_path()  # the HTTP proxy, gateway and Ray hops
        e2e = float(times[-1]) + path - f.start
        timeout = self.config.target.request_timeout_s
        if e2e > timeout:
            self.out.rows.append((f.rid, f.session, f.turn, f.user, f.scheduled, f.start, False, None,
                                  ErrorKind.TIMEOUT, "no complete answer within the request timeout", None, None,
                                  timeout, len(f.prompt), None, f.out_len))
            self.out.itls.append(None)
        else:
            self.out.rows.append((f.rid, f.session, f.turn, f.user, f.scheduled, f.start, True, 200, None, None, None,
                                  float(times[0]) + path - f.start, e2e, len(f.prompt), len(times), f.out_len))
            self.out.itls.append_tokens(host.replica, seq)
        f.ticket.release()
        self.core.on_finished(str(f.rid))
        self.in_flight -= 1
        self.push(self.now + path, ANSWERED, (f.user, f.session, f.turn, e2e <= timeout))

    def _serving_path(self) -> float:
        """One request's serving path: the profile's mean times a mean-1 lognormal factor."""
        if not self._path_mean or not self._path_sigma:
            return self._path_mean
        sigma = self._path_sigma
        return self._path_mean * self._path_rng.lognormvariate(-sigma * sigma / 2, sigma)

    def _on_answered(self, payload) -> None:
        """The client has the answer's end (the serving path after the engine's last token)."""
        self.client_events -= 1
        user, session_id, turn, ok = payload
        session = self.traffic.sessions[session_id]
        if ok and turn + 1 < len(session.turns):
            self.push(self.now + session.think_time_s, TURN, (user, session_id, turn + 1, None))
        else:
            self._session_over(user)

    def _cancel_leftovers(self) -> None:
        for host in self.hosts:
            for f, _ in host.flights.values():
                self._cancel(f)
        for f in self.handle_queue:
            self._cancel(f)

    def _cancel(self, f: Flight) -> None:
        self.out.rows.append((f.rid, f.session, f.turn, f.user, f.scheduled, f.start, False, None, ErrorKind.CANCELLED,
                              "still in flight at the hard stop", None, None, self.now - f.start, len(f.prompt),
                              None, f.out_len))
        self.out.itls.append(None)

    # --- scaling --------------------------------------------------------------------------
    def _new_host(self) -> Host:
        host = Host(f"replica-{len(self.hosts)}", self.setup.replica(), self.now)
        self.hosts.append(host)
        return host

    def _ready(self, host: Host) -> None:
        host.live = True
        host.replica.now = self.now

    def _on_ready(self, host: Host) -> None:
        if host.stopped is None:
            self._ready(host)
            self._sync_router()
            self._dispatch_waiting()

    def _sync_router(self, *, replicas_changed: bool = True) -> None:
        live = [h for h in self.hosts if h.live]
        self.core.update_replicas({h.id: self._engine_stats(h) for h in live})
        if replicas_changed:
            self.out.replica_timeline.append((self.now, len(live)))

    def _engine_stats(self, host: Host) -> EngineStats | None:
        """What a replica's stats poll tells the router: its adapter slots (the slot-aware
        ranking) and the adapters its host cache holds (cached-first), as serving's do."""
        lora, slots = self.setup.lora, host.replica.adapters
        if lora is None or slots is None:
            return None
        names = self.setup.adapters
        return EngineStats(host.id, adapter_slots=lora.max_loras, adapters=names,
                           adapters_cached=tuple(names[i - 1] for i in slots.cached))

    def _on_stats(self, _payload) -> None:
        """Serve's routing-stats poll: the routers see each replica's adapters a period late."""
        self._sync_router(replicas_changed=False)
        if self.client_events or self.in_flight:
            self.push(self.now + self.sim.routing.stats_period_s, STATS, None)

    def _on_tick(self, _payload) -> None:
        active = [h for h in self.hosts if h.stopped is None and (h.live or not h.flights)]
        depth = sum(h.replica.queue_depth for h in self.hosts if h.live)
        handle = self.in_flight  # admitted requests, those queued at the handle included
        target = self.autoscaler.tick(self.now, depth, handle, len(active))
        if target is not None:
            self._scale(target, active)
        if self.client_events or self.in_flight:
            self.push(self.now + self.sim.autoscaling.metrics_interval_s, TICK, None)

    def _scale(self, target: int, active: list[Host]) -> None:
        if target > len(active):
            for _ in range(target - len(active)):
                self.push(self.now + self.setup.replica_start_s, READY, self._new_host())
            return
        # Serve stops replicas still starting first, then the least busy ones.
        victims = sorted(active, key=lambda h: (h.live, len(h.flights)))[:len(active) - target]
        for host in victims:
            host.live = False
            if not host.flights:
                host.stopped = self.now
        self._sync_router()
