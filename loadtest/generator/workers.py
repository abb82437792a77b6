"""How a distributed stage is shared among worker processes, and what their reports add
up to (pure: no gevent, no I/O).

The master computes the open-loop schedule once and deals it round-robin to the workers
that Locust gives users (worker ``k`` of ``n`` gets ``arrivals[k::n]``), so together they
send exactly the schedule; the request budget is split exactly (by user count for closed
loops); each worker draws sessions from its own block of the prompt pool, sized alike.
A replay binds each arrival to its own session: worker ``k`` then gets ``sessions[k::n]``
with ``arrivals[k::n]``, so every request still leaves at its own time.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from loadtest.analysis.stats import Distribution
from loadtest.analysis.summary import WorkerReport
from loadtest.generator.child import cpu_percentages
from loadtest.generator.job import GeneratorStatus, WorkerStatus
from loadtest.workloads.base import WorkloadPlan

CLOCK_SKEW_WARN_S = 0.005


@dataclass(frozen=True)
class Share:
    """What one worker sends: its ``slot`` among the ``slots`` workers that have users,
    its part of the request budget, (open loop) its arrivals and the block of the prompt
    pool it draws sessions from, ``sessions = (start, stop)``, or paired (a replay) every
    ``slots``-th session from ``slot``. A worker that Locust gives no user gets nothing
    to send (a budget of 0)."""

    slot: int
    slots: int
    max_requests: int | None
    arrivals: tuple[float, ...] | None
    sessions: tuple[int, int]
    paired: bool = False

    @property
    def idle(self) -> bool:
        return self.max_requests == 0


def split_counts(total: int, weights: Sequence[int]) -> list[int]:
    """``total`` in whole parts proportional to ``weights``: they add up to ``total``
    exactly, each within one of its exact share (earlier parts rounded up)."""
    whole = sum(weights)
    cuts, running = [0], 0
    for weight in weights:
        running += weight
        cuts.append(-(-total * running // whole))
    return [b - a for a, b in zip(cuts, cuts[1:])]


def plan_shares(
    users: Sequence[int], *, arrivals: Sequence[float] | None, max_requests: int | None, sessions: int,
    paired: bool = False,
) -> list[Share]:
    """Each worker's share, given the users Locust dispatches to each (in worker order)
    and the size of the prompt pool. Open loop, the active workers weigh the same (the
    arrivals are dealt round-robin); closed loop, by their users."""
    active = [i for i, count in enumerate(users) if count > 0]
    if not active:
        raise ValueError("no worker has a user")
    n = len(active)
    weights = [1] * n if arrivals is not None else [users[i] for i in active]
    budgets = split_counts(max_requests, weights) if max_requests is not None else [None] * n
    blocks = split_counts(sessions, weights)
    shares = [Share(0, 1, 0, () if arrivals is not None else None, (0, 1))] * len(users)
    start = 0
    for k, i in enumerate(active):
        part = tuple(float(a) for a in arrivals[k::n]) if arrivals is not None else None
        block = (start, start + blocks[k]) if blocks[k] else (0, sessions)  # a pool smaller than the workers: share it
        shares[i] = Share(k, n, budgets[k], part, block, paired)
        start += blocks[k]
    return shares


def plan_part(plan: WorkloadPlan, share: Share) -> WorkloadPlan:
    """The sessions a worker draws from (its block of the pool; paired, its stride)."""
    if share.paired:
        return plan.model_copy(update={"sessions": plan.sessions[share.slot :: share.slots]})
    start, stop = share.sessions
    if (start, stop) == (0, len(plan.sessions)):
        return plan
    return plan.model_copy(update={"sessions": plan.sessions[start:stop]})


def combined_status(
    phase: str,
    *,
    t: float,
    t0_unix: float,
    workers: Sequence[WorkerStatus],
    own_cpu: tuple[float, float] | None = None,
    own_realtime: bool | None = None,
    error: str | None = None,
) -> GeneratorStatus:
    """A master's status line: its workers' counters added up (loop lag: the worst
    worker's), plus the master's own ``(cpu_seconds, cpu_seconds_load)`` when given;
    ``realtime`` when the master and every worker said they ran at real-time priority."""
    lags = [w.loop_lag_p99_s for w in workers if w.loop_lag_p99_s is not None]
    worst = max((w for w in workers if w.loop_lag_max_s is not None), key=lambda w: w.loop_lag_max_s, default=None)
    waits = [w.cpu_wait_s for w in workers if w.cpu_wait_s is not None]
    loads = [w.cpu_seconds_load for w in workers if w.cpu_seconds_load is not None]
    cpu = cpu_load = None
    if own_cpu is not None:
        cpu = own_cpu[0] + sum(w.cpu_seconds for w in workers)
        cpu_load = own_cpu[1] + sum(loads)
    reasons = sorted({w.stop_reason for w in workers if w.stop_reason})
    return GeneratorStatus(
        phase=phase,
        t=t,
        t0_unix=t0_unix,
        issued=sum(w.issued for w in workers),
        completed=sum(w.completed for w in workers),
        in_flight=sum(w.in_flight for w in workers),
        users=sum(w.users for w in workers),
        cpu_seconds=cpu,
        cpu_seconds_load=cpu_load,
        loop_lag_p99_s=max(lags, default=None),
        loop_lag_max_s=worst.loop_lag_max_s if worst else None,
        cpu_wait_s=max(waits, default=None),
        cpu_wait_at_lag_max_s=worst.cpu_wait_at_lag_max_s if worst else None,
        session_wraps=sum(w.session_wraps for w in workers),
        user_errors=sum(w.user_errors for w in workers),
        stop_reason=", ".join(reasons) or None,
        realtime=all_realtime([own_realtime, *(w.realtime for w in workers)]) if workers else None,
        workers=tuple(workers),
        error=error,
    )


def all_realtime(flags: Iterable[bool | None]) -> bool | None:
    """``True`` when every process ran at real-time priority, ``False`` when one did not,
    ``None`` when none said ``False`` and one said nothing."""
    flags = list(flags)
    return False if False in flags else None if None in flags else True


def cpu_series(samples: Iterable[WorkerStatus], since_unix: float) -> dict[int, list[tuple[float, float]]]:
    """Each worker's CPU over the stage from its own samples: ``{index: [(seconds since
    since_unix, percent of one core), ...]}``."""
    points: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for s in samples:
        points[s.index].append((s.t_unix, s.cpu_seconds))
    return {
        index: [(t, p) for t, p in cpu_percentages(sorted(set(series)), since_unix) if t >= 0]
        for index, series in points.items()
    }


def worker_report(final: WorkerStatus, cpu: Sequence[tuple[float, float]], saturation_percent: float) -> WorkerReport:
    """One worker's report from its final status and its CPU series."""
    dist = Distribution.of(p for _, p in cpu)
    return WorkerReport(
        index=final.index,
        host=final.host,
        pid=final.pid,
        records=final.records,
        cpu_seconds_load=final.cpu_seconds_load,
        cpu_percent_mean=dist.mean,
        cpu_percent_p90=dist.p90,
        cpu_percent_max=dist.max,
        loop_lag_p99_s=final.loop_lag_p99_s,
        loop_lag_max_s=final.loop_lag_max_s,
        cpu_wait_s=final.cpu_wait_s,
        cpu_wait_at_lag_max_s=final.cpu_wait_at_lag_max_s,
        saturated=dist.p90 is not None and dist.p90 >= saturation_percent,
        clock_offset_s=final.clock_offset_s,
        clock_rtt_s=final.clock_rtt_s,
        stop_reason=final.stop_reason,
    )


def fleet_reports(
    final: GeneratorStatus | None, samples: Iterable[WorkerStatus], *, since_unix: float, saturation_percent: float
) -> tuple[tuple[WorkerReport, list[tuple[float, float]]], ...]:
    """Each worker's report with its CPU series, from a master's final status line and
    every worker sample (none for a single-process stage)."""
    if final is None or not final.workers:
        return ()
    series = cpu_series([*samples, *final.workers], since_unix)
    return tuple(
        (worker_report(w, series.get(w.index, []), saturation_percent), series.get(w.index, [])) for w in final.workers
    )


def worker_warnings(stage: int, reports: Iterable[WorkerReport], clock_skew_s: float = CLOCK_SKEW_WARN_S) -> list[str]:
    """Warnings about saturated workers and workers whose wall clock is off the master's
    by more than ``clock_skew_s`` beyond the measurement's own error (half its round trip)."""
    out = []
    for w in reports:
        name = f"stage {stage}: load-generator worker {w.index} ({w.host}, pid {w.pid})"
        if w.saturated:
            out.append(f"{name} was saturated (CPU p90 {w.cpu_percent_p90:.0f}% of one core): add workers")
        bound = (w.clock_rtt_s or 0.0) / 2
        if w.clock_offset_s is not None and abs(w.clock_offset_s) - bound > clock_skew_s:
            out.append(
                f"{name}: its wall clock is {w.clock_offset_s * 1e3:+.1f} ms (+/- {bound * 1e3:.1f} ms) off the "
                "master's, so its requests sit that far off the others' on the stage clock (its own latencies and "
                "arrival lateness are exact); synchronise the machines' clocks"
            )
    return out
