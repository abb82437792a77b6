"""An offline upper bound on the engine prefix-cache hit rate of a request set (pure).

**The model.** Requests arrive in order; each is served by one of ``N`` replicas, no
replica serving more than ``L = floor(load_cap x R / N)`` of the ``R`` requests (at least
``ceil(R / N)``). A replica's prefix cache holds at most ``C`` blocks (the simulator's
128-token prefix units); a request hits the longest run of its leading blocks its
replica holds, at most ``(prompt - 1) // block`` of them (the engine recomputes at
least the last token), and afterwards its replica holds all the full blocks of its
prompt and of the tokens it generated, if given (evicting any others): vLLM caches
generated tokens too, which a multi-turn conversation resends in its next prompt. Placement and eviction are free: the bound is above the best any router
and any eviction policy can do, and the simulated engines (FIFO per replica, LRU
eviction, blocks taken only once computed) do no better than the model.

The bound is the smaller of two, each provably above the model's optimum:

- **Load-capped, unlimited cache** (:attr:`PrefixBound.load_capped_hits`). Take a block
  ``b`` (a prefix: block hashes chain) held by ``n_b`` requests, ``H_b`` of which could
  hit it. Whatever the placement, those requests land on at least ``k_b =
  ceil(n_b / L)`` replicas, and on each the first of them cannot hit ``b`` (nothing
  there computed it before); at most ``n_b - H_b`` of those firsts are requests that
  could not hit it anyway, and the very first request holding ``b`` misses it on any
  replica. So ``b`` is hit at most ``H_b - max(k_b - (n_b - H_b), first can hit)`` times;
  the bound sums that over every block.
- **Pooled cache** (:attr:`PrefixBound.pooled_hits`). The union of the ``N`` caches
  holds at most ``N x C`` blocks, and a block enters it only when a request computes
  it: the union is a demand-paged cache of ``N x C`` blocks over the sequence of every
  request's blocks, and a hit on any replica is a hit of the union. Belady's MIN
  (evict the block used again furthest in the future, or bypass a block used again
  later than every resident one) maximises the hits of such a cache; its count of
  hits is the bound. It counts every hit, those on blocks a request may not hit (its
  last token's) too: MIN maximises the unweighted count, and a cache that gave up
  such hits for hittable ones could beat MIN's hittable count (``A B C B C A+``
  with two blocks: MIN keeps B and C and misses A; keeping A hits it). It also
  ignores that a hit must be a prefix; both only raise it.

It is tight when one of the two binds and the prefixes pack into replicas without
splitting a prefix's requests over more replicas than its count needs; the unit tests
compare it with an exhaustive search over placements and evictions on small cases.
Where both bind, or a prefix's requests cannot be packed whole, it stays above the
optimum by the slack it leaves (see docs/simulator.md, "Oracles").
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

from serving.routing.prefix_index import block_hashes


@dataclass(frozen=True, slots=True)
class BlockedRequest:
    """A request as the bound sees it: the block hashes it leaves on its replica (its
    prompt's, then its output's) and how many of the leading ones it can hit."""

    hashes: tuple[int, ...]
    hittable: int
    prompt_tokens: int

    @classmethod
    def of(cls, prompt: Sequence[int], block_tokens: int, output: Sequence[int] = ()) -> BlockedRequest:
        """``output``: the tokens the engine generated after ``prompt`` (their full blocks
        stay cached; this request can hit none of them)."""
        hashes = block_hashes((*prompt, *output), block_tokens)
        return cls(hashes, min(len(prompt) // block_tokens, max(len(prompt) - 1, 0) // block_tokens), len(prompt))


@dataclass(frozen=True)
class PrefixBound:
    """The bound and its two parts, in blocks and as a hit rate of prompt tokens."""

    requests: int
    replicas: int
    capacity_blocks: int
    load_cap: int  # requests per replica at most
    block_tokens: int
    prompt_tokens: int
    load_capped_hits: int  # blocks
    pooled_hits: int  # blocks

    @property
    def hit_blocks(self) -> int:
        return min(self.load_capped_hits, self.pooled_hits)

    @property
    def hit_rate(self) -> float:
        """Bound on hit tokens / prompt tokens (the engines' own prefix-cache hit rate)."""
        return self.hit_blocks * self.block_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def binding(self) -> str:
        """Which part binds: ``load`` (the load cap and first sightings) or ``capacity``."""
        return "load" if self.load_capped_hits <= self.pooled_hits else "capacity"


def load_cap_requests(requests: int, replicas: int, load_cap: float) -> int:
    """Requests one replica may serve: ``floor(load_cap x mean)``, at least ``ceil(mean)``."""
    if replicas < 1 or load_cap < 1:
        raise ValueError("replicas must be >= 1 and load_cap >= 1")
    return max(math.floor(load_cap * requests / replicas + 1e-9), -(-requests // replicas), 1)


def load_capped_hits(requests: Sequence[BlockedRequest], cap: int) -> int:
    """The first bound (see the module docstring), in blocks."""
    count: dict[int, int] = {}
    hittable: dict[int, int] = {}
    first_hits: dict[int, bool] = {}
    for r in requests:
        for depth, h in enumerate(r.hashes):
            can = depth < r.hittable
            if h not in count:
                count[h], hittable[h], first_hits[h] = 0, 0, can
            count[h] += 1
            hittable[h] += can
    total = 0
    for h, n in count.items():
        can = hittable[h]
        lost = max(-(-n // cap) - (n - can), 1 if first_hits[h] else 0, 0)
        total += max(can - lost, 0)
    return total


def pooled_hits(requests: Sequence[BlockedRequest], capacity: int) -> int:
    """The second bound: Belady's MIN on one cache of ``capacity`` blocks, in blocks hit
    (every hit: see the module docstring)."""
    refs = [h for r in requests for h in r.hashes]
    if capacity <= 0:
        return 0
    never = len(refs)
    next_use = [never] * len(refs)
    seen: dict[int, int] = {}
    for i in range(len(refs) - 1, -1, -1):
        h = refs[i]
        next_use[i] = seen.get(h, never)
        seen[h] = i
    resident: dict[int, int] = {}  # block -> its next use
    heap: list[tuple[int, int]] = []  # (-next use, block), lazily cleaned
    hits = 0
    for i, h in enumerate(refs):
        if h in resident:
            hits += 1
        elif len(resident) >= capacity:
            far, victim = heap[0]
            while resident.get(victim) != -far:  # drop stale entries
                heapq.heappop(heap)
                far, victim = heap[0]
            if -far <= next_use[i]:
                continue  # the new block is used again no sooner than any resident one: bypass it
            heapq.heappop(heap)
            del resident[victim]
        resident[h] = next_use[i]
        heapq.heappush(heap, (-next_use[i], h))
    return hits


def prefix_bound(prompts: Sequence[Sequence[int]], *, replicas: int, capacity_blocks: int,
                 block_tokens: int, load_cap: float = 1.2,
                 outputs: Sequence[Sequence[int]] | None = None) -> PrefixBound:
    """The bound for ``prompts`` (token ids, in arrival order) on ``replicas`` replicas of
    ``capacity_blocks`` blocks of ``block_tokens`` tokens, each serving at most
    ``load_cap`` x the mean request count. ``outputs`` (one per prompt): the tokens each
    request generated, for engines that cache them (vLLM does; the simulator's do not)."""
    if outputs is not None and len(outputs) != len(prompts):
        raise ValueError(f"{len(outputs)} outputs for {len(prompts)} prompts")
    outs = outputs if outputs is not None else [()] * len(prompts)
    blocked = [BlockedRequest.of(p, block_tokens, o) for p, o in zip(prompts, outs, strict=True)]
    cap = load_cap_requests(len(blocked), replicas, load_cap)
    return PrefixBound(len(blocked), replicas, capacity_blocks, cap, block_tokens,
                       sum(r.prompt_tokens for r in blocked), load_capped_hits(blocked, cap),
                       pooled_hits(blocked, replicas * capacity_blocks))
