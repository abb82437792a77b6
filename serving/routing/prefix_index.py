"""Prefix hashing in KV blocks and the bounded index of which replica holds which block.

Hashing mirrors vLLM's prefix cache (``vllm/v1/core/kv_cache_utils.py``,
``hash_block_tokens``): the prompt is cut into full blocks of ``block_tokens``
tokens from the start, and block *i*'s hash covers block *i*'s tokens and block
*i-1*'s hash, so equal hashes mean equal prefixes. A trailing partial block is
not hashed (vLLM does not cache it either). With ``block_tokens`` equal to the
engine's KV block size, a match here is a match the engine can hit.

The index is an LRU of at most ``max_blocks`` block hashes, each with the
replicas it was routed to: no prefix tree, memory bounded whatever the traffic.
"""

from __future__ import annotations

import functools
import hashlib
from collections import OrderedDict
from collections.abc import Collection, Sequence
from dataclasses import dataclass

_ROOT_HASH = 0x5E7E_0C7  # parent of the first block
ROOT_HASH = _ROOT_HASH
"""The parent hash of a prompt's first block (to continue a chain elsewhere: engine cache events)."""


@functools.lru_cache(maxsize=4096)
def root_hash(adapter: str | None = None) -> int:
    """The parent hash of a prompt's first block under a LoRA ``adapter`` (None: the
    base model). vLLM keys every cached block with its adapter, so prompts of different
    adapters never share blocks, and here neither do their hashes. Stable across
    processes (blake2b, not ``hash`` of a str, which ``PYTHONHASHSEED`` salts)."""
    if adapter is None:
        return _ROOT_HASH
    return int.from_bytes(hashlib.blake2b(adapter.encode(), digest_size=8).digest(), "big") >> 1


def block_hashes(token_ids: Sequence[int], block_tokens: int, adapter: str | None = None) -> tuple[int, ...]:
    """Chained hashes of the full ``block_tokens``-token blocks of ``token_ids``
    (under ``adapter``: :func:`root_hash`).

    Uses Python's tuple hash, which is deterministic for ints (``PYTHONHASHSEED``
    only salts str and bytes) and fast; a collision costs a cache miss, never a
    wrong answer, so a cryptographic hash is not needed here.
    """
    if block_tokens < 1:
        raise ValueError(f"block_tokens must be >= 1, got {block_tokens}")
    tokens = tuple(token_ids)
    hashes: list[int] = []
    parent = root_hash(adapter)
    for end in range(block_tokens, len(tokens) + 1, block_tokens):
        parent = hash((parent, tokens[end - block_tokens : end]))
        hashes.append(parent)
    return tuple(hashes)


@dataclass(frozen=True)
class PrefixMatch:
    """The longest indexed prefix of a prompt: how many blocks, and who holds all of them."""

    blocks: int
    holders: frozenset[str]


NO_MATCH = PrefixMatch(0, frozenset())


class PrefixIndex:
    """An LRU map from block hash to the replicas holding that block."""

    def __init__(self, max_blocks: int) -> None:
        if max_blocks < 1:
            raise ValueError(f"max_blocks must be >= 1, got {max_blocks}")
        self._max_blocks = max_blocks
        self._holders: OrderedDict[int, tuple[str, ...]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._holders)

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self._holders

    def holders(self, block_hash: int) -> tuple[str, ...]:
        """Replicas recorded for one block (``()`` if the block is not indexed)."""
        return self._holders.get(block_hash, ())

    def record(self, hashes: Sequence[int], replica_id: str) -> None:
        """Note that ``replica_id`` now holds the blocks ``hashes`` (a chain from block 0).

        Blocks are touched deepest first, so a chain's first block is the most
        recently used: eviction then trims chains from their tails, the way an
        engine's cache loses a prefix's last blocks before its first ones.
        """
        for block_hash in reversed(hashes):
            held = self._holders.get(block_hash)
            if held is None:
                self._holders[block_hash] = (replica_id,)
            else:
                if replica_id not in held:
                    self._holders[block_hash] = held + (replica_id,)
                self._holders.move_to_end(block_hash)
        while len(self._holders) > self._max_blocks:
            self._holders.popitem(last=False)

    def longest_match(self, hashes: Sequence[int], live: Collection[str]) -> PrefixMatch:
        """The most leading blocks of ``hashes`` that some ``live`` replica holds, and those replicas."""
        best = NO_MATCH
        candidates: frozenset[str] | None = None
        for depth, block_hash in enumerate(hashes, start=1):
            held = self._holders.get(block_hash)
            if held is None:
                break
            if candidates is None:
                candidates = frozenset(r for r in held if r in live)
            else:
                candidates = candidates.intersection(held)
            if not candidates:
                break
            best = PrefixMatch(depth, candidates)
        return best

    def retain(self, live: Collection[str]) -> None:
        """Forget replicas not in ``live``, and blocks no live replica holds."""
        for block_hash in list(self._holders):
            held = self._holders[block_hash]
            kept = tuple(r for r in held if r in live)
            if not kept:
                del self._holders[block_hash]
            elif len(kept) != len(held):
                self._holders[block_hash] = kept
