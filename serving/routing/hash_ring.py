"""A consistent-hash ring with virtual nodes.

Each replica owns ``virtual_nodes`` points on a 64-bit ring; a key belongs to the
first point clockwise from its hash. Adding a replica takes over only the keys
that fall just before its new points (about 1/N of them); removing one hands
only its own keys to their next owners. Hashes are BLAKE2b, so every process
(every gateway replica's router) builds the same ring from the same replica ids.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable


def stable_hash(key: str) -> int:
    """A 64-bit hash of ``key`` that is the same in every process."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


class HashRing:
    """An immutable ring over a set of replica ids."""

    def __init__(self, replica_ids: Iterable[str], *, virtual_nodes: int = 100) -> None:
        if virtual_nodes < 1:
            raise ValueError(f"virtual_nodes must be >= 1, got {virtual_nodes}")
        self.replica_ids = frozenset(replica_ids)
        points = sorted(
            (stable_hash(f"{replica_id}#{i}"), replica_id)
            for replica_id in self.replica_ids
            for i in range(virtual_nodes)
        )
        self._hashes = [h for h, _ in points]
        self._owners = [replica_id for _, replica_id in points]

    def walk(self, key: str) -> tuple[str, ...]:
        """Every replica once, in ring order from ``key``'s owner (its fallbacks, in turn)."""
        if not self._hashes:
            return ()
        start = self._start(key)
        seen: dict[str, None] = {}
        n = len(self._owners)
        for offset in range(n):
            seen.setdefault(self._owners[(start + offset) % n])
            if len(seen) == len(self.replica_ids):
                break
        return tuple(seen)

    def _start(self, key: str) -> int:
        return bisect.bisect_right(self._hashes, stable_hash(key)) % len(self._hashes)
