"""Paged KV blocks with prefix caching, as vLLM V1's block pool keeps them (pure).

A block is *held* while a running sequence uses it (shared full prompt blocks are
held once, with a reference count), else *free*. Free blocks form one queue in the
order they were freed; allocation takes from its head, evicting the prefix-cache
entry of a cached block it takes. A freed full block keeps its hash (it stays in the
prefix cache until evicted); a lookup that finds it revives it. Blocks are counted in
runs, not one by one: anonymous blocks (partial, or generated tokens) free as one
``(None, n)`` entry. As in vLLM, a sequence frees its blocks tail first, so a prefix's
first blocks are evicted last.

Speed: the prefix cache is keyed in *units* of ``unit`` blocks (the replica uses
128-token units, the router's prefix block): a 1,024-token prompt is 8 cache entries,
not 64. A hit is so rounded down to a whole unit (at most 127 tokens fewer than
vLLM's); allocation and freeing stay exact to the block.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Sequence


class BlockPool:
    """``capacity`` KV blocks; hashed blocks are keyed by their prefix hash."""

    __slots__ = ("capacity", "unit", "used", "_held", "_cached", "_queue", "_tokens")

    def __init__(self, capacity: int, unit: int = 1) -> None:
        if capacity < 1 or unit < 1:
            raise ValueError("a KV cache needs at least one block")
        self.capacity, self.unit = capacity, unit
        self.used = 0  # held blocks (a shared block counts once)
        self._held: dict[int, int] = {}  # hash -> references
        self._cached: dict[int, int] = {}  # hash -> token of its live queue entry
        self._queue: deque[tuple[int | None, int]] = deque([(None, capacity)])
        self._tokens = itertools.count()

    @property
    def free(self) -> int:
        """Blocks that can be allocated now (free, cached or not)."""
        return self.capacity - self.used

    def cached_prefix(self, hashes: Sequence[int]) -> int:
        """How many leading ``hashes`` are held or cached (the prefix-cache hit, in units)."""
        hits = 0
        for h in hashes:
            if h not in self._held and h not in self._cached:
                break
            hits += 1
        return hits

    def revivals(self, hashes: Sequence[int]) -> int:
        """Blocks of ``hashes`` (a hit) in the free queue (taking them uses free blocks)."""
        held = self._held
        return self.unit * sum(1 for h in hashes if h not in held)

    def take_hashed(self, hashes: Sequence[int]) -> None:
        """Hold ``hashes``: a hit on held/cached blocks, or blocks just filled (new ones
        are allocated from the free queue)."""
        held, cached = self._held, self._cached
        fresh = taken = 0
        for h in hashes:
            refs = held.get(h)
            if refs:
                held[h] = refs + 1
                continue
            if cached.pop(h, None) is None:
                fresh += 1
            held[h] = 1
            taken += 1
        if fresh:
            self._pop_free(fresh * self.unit)
        self.used += taken * self.unit

    def take_anonymous(self, count: int) -> None:
        """Allocate ``count`` blocks without a hash (the caller checked :attr:`free`)."""
        if count:
            self._pop_free(count)
            self.used += count

    def release(self, hashes: Sequence[int], anonymous: int) -> None:
        """A sequence lets go of its blocks: anonymous ones first, then its hashed ones tail first."""
        if anonymous:
            self._queue.append((None, anonymous))
            self.used -= anonymous
        held, cached, queue, tokens = self._held, self._cached, self._queue, self._tokens
        freed = 0
        for h in reversed(hashes):
            refs = held[h] - 1
            if refs:
                held[h] = refs
                continue
            del held[h]
            freed += 1
            token = next(tokens)
            cached[h] = token
            queue.append((h, token))
        self.used -= freed * self.unit

    def _pop_free(self, count: int) -> None:
        if count > self.capacity - self.used:
            raise RuntimeError(f"KV cache overcommitted: {count} blocks wanted, {self.free} free")
        queue, cached, unit = self._queue, self._cached, self.unit
        popleft = queue.popleft
        while count:
            key, n = popleft()
            if key is None:
                if n > count:
                    queue.appendleft((None, n - count))
                    return
                count -= n
            elif cached.get(key) == n:  # a live cached unit: evict its prefix-cache entry
                del cached[key]
                if unit > count:
                    queue.appendleft((None, unit - count))
                    return
                count -= unit
            # else: a stale entry of a block revived since it was freed
