"""Which loaded LoRA adapters an engine keeps in host memory, and how often it evicts one.

vLLM keeps at most ``lora.max_cpu_loras`` adapters in a host-memory LRU.
Past that it drops the least recently used; a later request for a dropped adapter reads
it from disk again inside an engine step, stalling every request of that step. vLLM
counts none of this. :class:`HostCacheWatch` compares successive polls of the engine's
cache (``AsyncLLM.list_loras()``, the integer ids it holds) with the adapters the
replica serves: an adapter that was cached, is still served under the same id, and is
no longer cached was evicted. An eviction and a reload that both fall between two polls
are not seen (polled every :data:`POLL_PERIOD_S`). Pure: no engine here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

POLL_PERIOD_S = 1.0
"""How often a replica asks its engine which adapters it caches (one RPC to the engine core)."""


class HostCacheWatch:
    """The adapters an engine caches (by name) and the evictions seen so far."""

    def __init__(self) -> None:
        self.cached: tuple[str, ...] = ()
        self.evictions = 0
        self._cached_ids: dict[int, str] = {}

    def observe(self, cached_ids: Iterable[int], served: Mapping[int, str]) -> None:
        """One poll: ``cached_ids`` the engine holds now, ``served`` the replica's adapters
        by engine id (ids of removed adapters are not in it, so a removal is no eviction)."""
        now = {i: served[i] for i in cached_ids if i in served}
        self.evictions += sum(1 for i, name in self._cached_ids.items() if served.get(i) == name and i not in now)
        self._cached_ids = now
        self.cached = tuple(sorted(now.values()))
