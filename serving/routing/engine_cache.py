"""What each engine replica actually holds in its prefix cache, from its KV cache events (pure).

vLLM (V1, CPU and GPU builds alike: the events come from the scheduler's block pool,
``vllm/v1/core/block_pool.py``) publishes, with ``kv_events_config`` on, a
``BlockStored`` event for every block that enters its prefix cache (the engine's block
hashes, the parent block's hash, the blocks' token ids and the block size; reused
blocks are reported again on every hit), ``BlockRemoved`` when a block is evicted and
``AllBlocksCleared`` when the cache is reset. :class:`EngineCacheIndex` replays those
events into the *router's* block hashes (:func:`~serving.routing.prefix_index.block_hashes`
of the same tokens), so a policy asks "how many leading blocks of this prompt does
replica X hold?" without knowing vLLM's hash function or seed. A block computed under
a LoRA adapter (the event's ``lora_name``) is keyed under that adapter's root, as the
router hashes that adapter's prompts, so one adapter's blocks never count as another's.

A router block is ``block_tokens`` tokens, a whole number of engine blocks (128 on
vLLM CPU and 128 here: one each; 16 on a GPU: eight each): it counts as held while
the engine holds the engine block that completes it (vLLM evicts a chain's tail
first, so its earlier blocks are then held too). A stored chain whose parent the index
never saw (it was stored before the router subscribed) cannot be re-keyed and is
counted in :attr:`EngineCacheIndex.unplaced`; the next hit on that prefix reports the
whole chain from block 0 again and fills it in.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias

from serving.routing.prefix_index import root_hash

EngineHash: TypeAlias = bytes | int
"""vLLM's block hash as published (``ExternalBlockHash``: sha256 bytes, or an int)."""


class CacheView(Protocol):
    """One replica's prefix cache as a routing policy reads it."""

    def cached_blocks(self, hashes: Sequence[int]) -> int:
        """How many leading blocks of ``hashes`` (router block hashes of a prompt) it holds."""
        ...


@dataclass(frozen=True, slots=True)
class BlocksStored:
    """Blocks entered the engine's prefix cache (``token_ids``: all of theirs, in order)."""

    hashes: tuple[EngineHash, ...]
    parent: EngineHash | None
    token_ids: tuple[int, ...]
    block_size: int
    adapter: str | None = None  # the LoRA adapter the blocks were computed under (vLLM's lora_name)


@dataclass(frozen=True, slots=True)
class BlocksRemoved:
    """Blocks were evicted from the engine's prefix cache."""

    hashes: tuple[EngineHash, ...]


@dataclass(frozen=True, slots=True)
class CacheCleared:
    """The engine's prefix cache was reset."""


CacheEvent: TypeAlias = BlocksStored | BlocksRemoved | CacheCleared


class EngineCacheIndex:
    """One replica's cached prefix blocks keyed by the router's block hashes
    (implements :class:`CacheView`)."""

    def __init__(self, block_tokens: int) -> None:
        if block_tokens < 1:
            raise ValueError(f"block_tokens must be >= 1, got {block_tokens}")
        self.block_tokens = block_tokens
        self.unplaced = 0  # stored blocks whose parent chain was unknown
        self.misaligned = 0  # stored events whose engine block does not divide block_tokens
        # engine hash -> (router parent hash, engine blocks since the last router block's
        # end, the tokens of those blocks): how to continue a chain from that block.
        self._chain: dict[EngineHash, tuple[int, tuple[int, ...]]] = {}
        self._completes: dict[EngineHash, int] = {}  # engine hash -> the router block it ends
        self._held: Counter[int] = Counter()  # router hash -> engine blocks ending it

    def __len__(self) -> int:
        """Router blocks held."""
        return len(self._held)

    def __contains__(self, router_hash: int) -> bool:
        return router_hash in self._held

    def cached_blocks(self, hashes: Sequence[int]) -> int:
        held = self._held
        n = 0
        for h in hashes:
            if h not in held:
                break
            n += 1
        return n

    def apply(self, events: Iterable[CacheEvent]) -> None:
        """Replay events in the order the engine published them."""
        for event in events:
            if isinstance(event, BlocksStored):
                self._stored(event)
            elif isinstance(event, BlocksRemoved):
                for h in event.hashes:
                    self._removed(h)
            else:
                self.clear()

    def clear(self) -> None:
        """Forget everything (a reset, or events were lost: the next hits refill it)."""
        self._chain.clear()
        self._completes.clear()
        self._held.clear()

    def _stored(self, event: BlocksStored) -> None:
        size = event.block_size
        if size < 1 or self.block_tokens % size or len(event.token_ids) < size * len(event.hashes):
            self.misaligned += 1
            return
        if event.parent is None:
            router_parent, pending = root_hash(event.adapter), ()
        else:
            state = self._chain.get(event.parent)
            if state is None:
                self.unplaced += len(event.hashes)
                return
            router_parent, pending = state
        tokens = event.token_ids
        for k, engine_hash in enumerate(event.hashes):
            pending = pending + tuple(tokens[k * size:(k + 1) * size])
            if len(pending) == self.block_tokens:
                router_parent = hash((router_parent, pending))
                pending = ()
                if engine_hash not in self._completes:
                    self._completes[engine_hash] = router_parent
                    self._held[router_parent] += 1
            self._chain[engine_hash] = (router_parent, pending)

    def _removed(self, engine_hash: EngineHash) -> None:
        self._chain.pop(engine_hash, None)
        router_hash = self._completes.pop(engine_hash, None)
        if router_hash is None:
            return
        self._held[router_hash] -= 1
        if self._held[router_hash] <= 0:
            del self._held[router_hash]
