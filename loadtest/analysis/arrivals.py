"""Open-loop arrivals: their schedules, and how a stage kept them (pure; numpy random
generators with explicit seeds).

Inter-arrival gaps follow vLLM's benchmark: gamma-distributed with shape
``burstiness`` and mean ``1 / rate`` (burstiness 1 is a Poisson process, lower is
burstier, higher is more regular); ``burstiness=None`` means evenly spaced arrivals.
The first arrival is at t = 0. A linear rate ramp maps a unit-rate process through the
inverse of its cumulative intensity.

Schedules are normalised, as vLLM's benchmark does: a stage of ``duration_s`` gets
exactly :func:`arrival_count` arrivals (its expected count, rounded), the sampled gaps
rescaled so the arrival after the last would land at the end of the duration. Without a
duration, ``count`` arrivals are rescaled so their mean gap is exactly ``1 / rate``. A
sample's randomness stays in the spacing, never in how much load a stage offers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from loadtest.analysis.columns import RecordColumns
from loadtest.analysis.records import RequestRecord
from loadtest.analysis.stats import percentile
from loadtest.analysis.summary import Arrivals
from loadtest.errors import ConfigError
from loadtest.profiles import OpenLoad, ReplayLoad

MAX_ARRIVALS = 2_000_000
LATE_THRESHOLD_S = 0.05  # an arrival leaving later than this after its schedule is late
SLOT_SLACK_S = 1e-3  # float slack when deciding a slot was still busy


def unit_process(count: int, burstiness: float | None, rng: np.random.Generator) -> np.ndarray:
    """``count`` arrival times of a unit-rate renewal process starting at 0."""
    if count <= 0:
        return np.zeros(0)
    if burstiness is None:
        return np.arange(count, dtype=float)
    if burstiness <= 0:
        raise ConfigError(f"burstiness must be > 0, got {burstiness}")
    gaps = rng.gamma(shape=burstiness, scale=1.0 / burstiness, size=count - 1)
    return np.concatenate(([0.0], np.cumsum(gaps)))


def ramp_cumulative(t: np.ndarray | float, start_rate: float, end_rate: float, span_s: float):
    """Expected arrivals by time ``t`` for a rate rising linearly over ``span_s``."""
    slope = (end_rate - start_rate) / span_s
    return start_rate * t + 0.5 * slope * np.square(t)


def _ramp_inverse(s: np.ndarray, start_rate: float, end_rate: float, span_s: float) -> np.ndarray:
    slope = (end_rate - start_rate) / span_s
    if abs(slope) < 1e-12:
        return s / start_rate
    disc = np.maximum(start_rate * start_rate + 2.0 * slope * s, 0.0)
    # Stable form of (-r0 + sqrt(r0^2 + 2 a s)) / a.
    return 2.0 * s / (start_rate + np.sqrt(disc))


def arrival_count(start_rate: float, end_rate: float, duration_s: float) -> int:
    """Arrivals a normalised schedule places inside ``duration_s``: the expected count
    rounded half up, at least one."""
    return max(1, math.floor(float(ramp_cumulative(duration_s, start_rate, end_rate, duration_s)) + 0.5))


def schedule(
    *,
    start_rate: float,
    end_rate: float | None = None,
    burstiness: float | None,
    seed: int,
    duration_s: float | None = None,
    count: int | None = None,
) -> np.ndarray:
    """Sorted arrival offsets (seconds) of a normalised schedule within ``duration_s``
    and/or capped at ``count`` (the first ``count`` of the duration's arrivals).

    ``end_rate`` (a linear ramp over ``duration_s``) defaults to ``start_rate``.
    """
    end = start_rate if end_rate is None else end_rate
    if start_rate < 0 or end < 0 or (start_rate == 0 and end == 0):
        raise ConfigError(f"arrival rates must be >= 0 and not both 0 ({start_rate}, {end})")
    if duration_s is None and count is None:
        raise ConfigError("an open-loop schedule needs a duration or a request count")
    if end != start_rate and duration_s is None:
        raise ConfigError("a rate ramp needs a duration")
    if duration_s is not None:
        total = arrival_count(start_rate, end, duration_s)
        span = float(ramp_cumulative(duration_s, start_rate, end, duration_s))  # in unit-rate time
    else:
        assert count is not None
        total, span = count, float(count)
    if total > MAX_ARRIVALS:
        raise ConfigError(f"schedule of {total} arrivals is too large (max {MAX_ARRIVALS})")
    unit = unit_process(total + 1, burstiness, np.random.default_rng(seed))
    unit = unit[:total] * (span / unit[-1])  # arrival total + 1 would land at the end
    if count is not None:
        unit = unit[:count]
    if end == start_rate:
        times = unit / start_rate
    else:
        assert duration_s is not None
        times = _ramp_inverse(unit, start_rate, end, duration_s)
    if duration_s is not None:
        times = np.minimum(times, np.nextafter(duration_s, 0.0))  # float rounding at the very end
    return times



def stage_arrivals(load: OpenLoad, *, seed: int, duration_s: float | None, count: int | None) -> np.ndarray:
    """An open-loop stage's arrival times: :func:`schedule` at the load's rates, moved
    onto its rate curve (the generator and the simulator draw a stage from this alone)."""
    return load.follow_curve(schedule(start_rate=load.start_rate, end_rate=load.end_rate,
                                      burstiness=load.burstiness, seed=seed, duration_s=duration_s,
                                      count=count), duration_s)

def slot_waits(records: Sequence[RequestRecord] | RecordColumns) -> int:
    """Arrivals that had to wait for a free client slot.

    The generator runs ``max_concurrency`` users, each one session at a time, and a free
    user takes the next arrival at once; so an arrival taken by a user still busy with its
    previous request at the scheduled time found every slot busy.
    """
    c = RecordColumns.of(records)
    order = np.lexsort((c.start_s, c.user))  # by user, then start (stable, as sorting each user's own)
    users, scheduled, ends = c.user[order].tolist(), c.scheduled_s[order].tolist(), c.end_s[order].tolist()
    waits = 0
    user, busy_until = None, -math.inf
    for who, at, end in zip(users, scheduled, ends):
        if who != user:
            user, busy_until = who, -math.inf
        if at == at and busy_until > at + SLOT_SLACK_S:  # at == at: scheduled (not NaN)
            waits += 1
        busy_until = max(busy_until, end)
    return waits


def arrivals_of(
    records: Sequence[RequestRecord] | RecordColumns,
    load: OpenLoad | ReplayLoad | None = None,
    *,
    duration_s: float | None = None,
    max_requests: int | None = None,
) -> Arrivals:
    """How an open-loop stage kept its schedule (``duration_s``: the stage's load time,
    needed for the arrivals due and dropped and the achieved rate; a replay's are due
    whatever the duration: its requests)."""
    c = RecordColumns.of(records)
    scheduled = ~np.isnan(c.scheduled_s)
    lags = np.sort(np.maximum(0.0, c.start_s[scheduled] - c.scheduled_s[scheduled]))
    if load is None and not len(lags):
        return Arrivals()
    sent = len(lags)
    due = achieved = None
    if isinstance(load, ReplayLoad):
        due = load.requests if max_requests is None else min(load.requests, max_requests)
        if duration_s is not None:
            achieved = sent / duration_s
    elif load is not None and duration_s is not None:
        due = arrival_count(load.start_rate, load.end_rate, duration_s)
        if max_requests is not None:
            due = min(due, max_requests)
            if len(c) >= max_requests:  # the request budget, not the clock, ended it
                due = sent
        achieved = sent / duration_s
    elif sent >= 2:
        starts = np.sort(c.start_s[scheduled])
        first, last = float(starts[0]), float(starts[-1])
        achieved = (sent - 1) / (last - first) if last > first else None
    return Arrivals(
        scheduled=sent,
        late=int((lags > LATE_THRESHOLD_S).sum()),
        late_threshold_s=LATE_THRESHOLD_S,
        lag_p99_s=percentile(lags, 99.0) if sent else None,
        lag_max_s=float(lags[-1]) if sent else None,
        due=due,
        dropped=max(due - sent, 0) if due is not None else 0,
        achieved_rate=achieved,
        max_concurrency=load.max_concurrency if load is not None else None,
        slot_waits=slot_waits(c),
    )
