"""vLLM's KV cache event messages, decoded without importing vLLM (pure).

vLLM's ``ZmqEventPublisher`` (``vllm/distributed/kv_events.py``) sends each batch as a
ZMQ multipart message ``(topic, seq, payload)``: ``seq`` an 8-byte big-endian counter,
``payload`` a msgpack ``KVEventBatch``, an array ``[ts, events, data_parallel_rank]``
whose events are maps tagged ``"type": "BlockStored" | "BlockRemoved" |
"AllBlocksCleared"``. Only the fields routing needs are read; unknown fields are
ignored, so a newer vLLM that adds fields still decodes. Blocks of a secondary tier
(``medium`` other than the engine's own, ``"GPU"`` on every platform, CPU included) and
of a KV cache group other than the first are skipped: routing is about the blocks a
prompt can hit in the engine's own cache. Tests decode messages that vLLM's own
classes encoded (``tests/fixtures/kv_events``).
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from serving.routing.engine_cache import BlocksRemoved, BlocksStored, CacheCleared, CacheEvent, EngineHash

PRIMARY_MEDIA = (None, "GPU")
"""``medium`` values of the engine's own block pool (vLLM labels it GPU on a CPU too)."""


class BlockStored(msgspec.Struct, tag=True):
    block_hashes: list[EngineHash]
    parent_block_hash: EngineHash | None
    token_ids: list[int]
    block_size: int
    medium: str | None = None
    group_idx: int | None = None
    lora_name: str | None = None


class BlockRemoved(msgspec.Struct, tag=True):
    block_hashes: list[EngineHash]
    medium: str | None = None
    group_idx: int | None = None


class AllBlocksCleared(msgspec.Struct, tag=True):
    pass


class KVEventBatch(msgspec.Struct, array_like=True):
    ts: float
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]
    data_parallel_rank: int | None = None


_decoder = msgspec.msgpack.Decoder(KVEventBatch)


class KvEventDecodeError(ValueError):
    """A message that is not a vLLM KV event batch."""


@dataclass(frozen=True)
class EventMessage:
    """One decoded publisher message: its sequence number and its events."""

    seq: int
    events: tuple[CacheEvent, ...]


def decode_message(frames: list[bytes]) -> EventMessage:
    """``(topic, seq, payload)`` frames -> :class:`EventMessage`; :class:`KvEventDecodeError` otherwise."""
    if len(frames) != 3 or len(frames[1]) != 8:
        raise KvEventDecodeError(f"expected (topic, 8-byte seq, payload) frames, got {len(frames)} frame(s)")
    return EventMessage(int.from_bytes(frames[1], "big", signed=True), decode_payload(frames[2]))


def decode_payload(payload: bytes) -> tuple[CacheEvent, ...]:
    """A msgpack ``KVEventBatch`` -> the events routing uses, in order."""
    try:
        batch = _decoder.decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise KvEventDecodeError(f"not a KV event batch: {exc}") from None
    out: list[CacheEvent] = []
    for event in batch.events:
        if isinstance(event, AllBlocksCleared):
            out.append(CacheCleared())
        elif event.medium not in PRIMARY_MEDIA or event.group_idx not in (None, 0):
            continue
        elif isinstance(event, BlockStored):
            out.append(BlocksStored(tuple(event.block_hashes), event.parent_block_hash, tuple(event.token_ids),
                                    event.block_size, event.lora_name))
        else:
            out.append(BlocksRemoved(tuple(event.block_hashes)))
    return tuple(out)
