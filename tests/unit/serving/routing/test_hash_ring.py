import subprocess
import sys

from hypothesis import given
from hypothesis import strategies as st

from serving.routing.hash_ring import HashRing, stable_hash

KEYS = [f"session-{i}" for i in range(20_000)]
replica_sets = st.sets(st.text(alphabet="abcdef0123456789", min_size=4, max_size=8), min_size=2, max_size=6)


def owner(ring: HashRing, key: str) -> str:
    """The replica a session goes to first: the head of its walk."""
    return ring.walk(key)[0]


def first_point_clockwise(replica_ids, key: str, virtual_nodes: int) -> str:
    """The owner by brute force: the replica of the first point after ``key``'s hash, wrapping."""
    points = [(stable_hash(f"{r}#{i}"), r) for r in replica_ids for i in range(virtual_nodes)]
    after = [point for point in points if point[0] > stable_hash(key)]
    return min(after or points)[1]


def test_adding_a_replica_moves_about_one_in_n_sessions_all_to_the_new_replica():
    before = HashRing(["r1", "r2", "r3", "r4"])
    after = HashRing(["r1", "r2", "r3", "r4", "r5"])
    moved = [k for k in KEYS if owner(before, k) != owner(after, k)]
    assert 0.13 < len(moved) / len(KEYS) < 0.27  # expected 1/5
    assert {owner(after, k) for k in moved} == {"r5"}


@given(replica_sets, st.lists(st.text(max_size=12), min_size=1, max_size=50))
def test_removing_a_replica_moves_only_its_own_sessions(replica_ids, keys):
    removed = sorted(replica_ids)[0]
    before = HashRing(replica_ids, virtual_nodes=20)
    after = HashRing(replica_ids - {removed}, virtual_nodes=20)
    for key in keys:
        if owner(before, key) != removed:
            assert owner(after, key) == owner(before, key)


@given(replica_sets, st.text(max_size=12))
def test_walk_visits_every_replica_once_starting_at_the_owner(replica_ids, key):
    walk = HashRing(replica_ids, virtual_nodes=10).walk(key)
    assert walk[0] == first_point_clockwise(replica_ids, key, virtual_nodes=10)
    assert sorted(walk) == sorted(replica_ids)


def test_spreads_keys_over_replicas():
    ring = HashRing(["r1", "r2", "r3", "r4"])
    shares = [sum(owner(ring, k) == r for k in KEYS) / len(KEYS) for r in ("r1", "r2", "r3", "r4")]
    assert all(0.15 < share < 0.35 for share in shares)


def test_an_empty_ring_owns_nothing():
    assert HashRing([]).walk("s") == ()


def test_hashes_are_the_same_in_every_process():
    # Every gateway replica's router must build the same ring (Python's str hash is salted).
    code = "from serving.routing.hash_ring import stable_hash; print(stable_hash('session-42'))"
    other = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={"PYTHONHASHSEED": "123", "PYTHONPATH": ":".join(sys.path)},
    )
    assert int(other.stdout) == stable_hash("session-42")
