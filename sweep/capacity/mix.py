"""The cheapest heterogeneous mix of replica types for a traffic level (Mélange-style; pure).

A replica type is one replica's configuration on one kind of GPU (e.g. ``h200-tp4``)
with its capacity at the SLO (the highest rate one replica carries within it, measured
or simulated) and its price per hour. Behind one least-loaded router the capacities of
replicas add up (the assumption Mélange makes too; a pooled queue usually does a little
better, so it errs on the safe side). The mix for traffic ``T`` with headroom ``h`` is
the integer program

    minimise  sum_i n_i cost_i   subject to   sum_i n_i capacity_i >= T / (1 - h),
    0 <= n_i <= max_i

solved exactly by enumeration: every type needs at most ``ceil(T' / capacity_i)``
replicas, so for a handful of types the search is tiny. Ties go to fewer accelerators,
then fewer replicas, then the order of the types.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from pydantic import Field, PositiveFloat, PositiveInt

from sweep.strict import Strict

_EPS = 1e-9


class ReplicaType(Strict):
    """One replica's configuration on one GPU kind, with its capacity and price."""

    name: str
    accelerators: PositiveInt = Field(description="GPUs one replica takes (its TP size)")
    cost_per_hour: PositiveFloat = Field(description="one replica, per hour")
    capacity_rps: PositiveFloat = Field(description="req/s one replica carries within the SLO")
    max_replicas: PositiveInt | None = Field(None, description="availability limit; None = unlimited")


class Mix(Strict):
    """How many replicas of each type (types with 0 left out), and what they cost and carry."""

    counts: dict[str, int]
    cost_per_hour: float
    capacity_rps: float
    accelerators: int

    @property
    def replicas(self) -> int:
        return sum(self.counts.values())


def _mix(types: Sequence[ReplicaType], counts: Sequence[int]) -> Mix:
    return Mix(
        counts={t.name: n for t, n in zip(types, counts, strict=True) if n},
        cost_per_hour=sum(t.cost_per_hour * n for t, n in zip(types, counts, strict=True)),
        capacity_rps=sum(t.capacity_rps * n for t, n in zip(types, counts, strict=True)),
        accelerators=sum(t.accelerators * n for t, n in zip(types, counts, strict=True)),
    )


def cheapest_mix(types: Sequence[ReplicaType], traffic_rps: float, headroom: float = 0.0) -> Mix | None:
    """The cheapest mix carrying ``traffic_rps`` with ``headroom`` spare (``None``: the
    availability limits cannot carry it)."""
    if traffic_rps <= 0 or not math.isfinite(traffic_rps):
        raise ValueError("traffic must be > 0 req/s")
    if not 0.0 <= headroom < 1.0:
        raise ValueError("headroom must be within [0, 1)")
    if len({t.name for t in types}) != len(types):
        raise ValueError("replica type names must be unique")
    need = traffic_rps / (1.0 - headroom)
    ranges = [range(0, min(math.ceil(need / t.capacity_rps - _EPS), t.max_replicas or math.inf) + 1) for t in types]
    best: tuple[tuple[float, int, int, tuple[int, ...]], tuple[int, ...]] | None = None
    for counts in itertools.product(*ranges):
        if sum(t.capacity_rps * n for t, n in zip(types, counts, strict=True)) < need * (1 - _EPS):
            continue
        mix = _mix(types, counts)
        key = (round(mix.cost_per_hour, 9), mix.accelerators, mix.replicas, tuple(-n for n in counts))
        if best is None or key < best[0]:
            best = (key, counts)
    return None if best is None else _mix(types, best[1])


def cheapest_single_type(types: Sequence[ReplicaType], traffic_rps: float, headroom: float = 0.0) -> Mix | None:
    """The cheapest homogeneous answer (one type only), to show what the mix saves."""
    options = [m for t in types if (m := cheapest_mix([t], traffic_rps, headroom)) is not None]
    return min(options, key=lambda m: (m.cost_per_hour, m.accelerators), default=None)
