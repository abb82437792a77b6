"""The heterogeneous mix solver: the known optimum of tiny cases, and exhaustive agreement."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sweep.capacity.mix import ReplicaType, cheapest_mix, cheapest_single_type

H200 = ReplicaType(name="h200-tp4", accelerators=4, cost_per_hour=4 * 6.0, capacity_rps=7.0)
B300 = ReplicaType(name="b300-tp4", accelerators=4, cost_per_hour=4 * 10.0, capacity_rps=13.0)


def test_a_mix_beats_either_type_alone_by_hand():
    # 20 req/s: 3 x H200 = 21 for 72/h; 2 x B300 = 26 for 80/h; 1 B300 + 1 H200 = 20 for 64/h
    mix = cheapest_mix([H200, B300], 20.0)
    assert mix is not None and mix.counts == {"h200-tp4": 1, "b300-tp4": 1}
    assert mix.cost_per_hour == pytest.approx(64.0) and mix.accelerators == 8
    alone = cheapest_single_type([H200, B300], 20.0)
    assert alone is not None and alone.counts == {"h200-tp4": 3}


def test_headroom_and_availability_limits():
    # 10% headroom turns 20 req/s into 22.2: 1 B300 + 2 H200 (27, 88/h) vs 2 B300 (26, 80/h)
    assert cheapest_mix([H200, B300], 20.0, headroom=0.1).counts == {"b300-tp4": 2}
    # one B300 available: 1 B300 + 2 H200 (27 req/s, 88/h) beats 4 H200 (28, 96/h)
    limited = B300.model_copy(update={"max_replicas": 1})
    assert cheapest_mix([H200, limited], 20.0, headroom=0.1).counts == {"h200-tp4": 2, "b300-tp4": 1}
    assert cheapest_mix([H200.model_copy(update={"max_replicas": 1})], 20.0) is None


def brute_force(types: list[ReplicaType], need: float) -> float:
    best = math.inf
    for counts in itertools.product(range(12), repeat=len(types)):
        if sum(t.capacity_rps * n for t, n in zip(types, counts)) >= need:
            best = min(best, sum(t.cost_per_hour * n for t, n in zip(types, counts)))
    return best


@given(caps=st.lists(st.floats(1.0, 10.0), min_size=1, max_size=3),
       costs=st.lists(st.floats(1.0, 50.0), min_size=3, max_size=3), traffic=st.floats(0.5, 10.0))
def test_the_enumeration_finds_the_brute_force_optimum(caps, costs, traffic):
    types = [ReplicaType(name=f"t{i}", accelerators=1, cost_per_hour=costs[i], capacity_rps=c)
             for i, c in enumerate(caps)]
    mix = cheapest_mix(types, traffic)
    assert mix is not None and mix.capacity_rps >= traffic * (1 - 1e-9)
    assert mix.cost_per_hour == pytest.approx(brute_force(types, traffic * (1 - 1e-9)))
