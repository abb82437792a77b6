"""What the router learns of an engine's prefix cache from vLLM's KV cache events:
batches encoded by vLLM's own classes (tests/fixtures/kv_events, written by
tests/fixtures/make_kv_events.py) re-keyed into the router's block hashes."""

from __future__ import annotations

from pathlib import Path

import pytest

from serving.routing.engine_cache import BlocksRemoved, BlocksStored, CacheCleared, EngineCacheIndex
from serving.routing.kv_event_wire import KvEventDecodeError, decode_message, decode_payload
from serving.routing.prefix_index import block_hashes

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "kv_events"


def batch(name: str):
    return decode_payload((FIXTURES / f"{name}.msgpack").read_bytes())


def test_vllms_stored_events_decode_with_their_tokens_and_parent():
    first, second = batch("stored_chain")
    assert isinstance(first, BlocksStored) and first.parent is None
    assert first.token_ids == tuple(range(8)) and first.block_size == 4 and len(first.hashes) == 2
    assert second.parent == first.hashes[1] and second.token_ids == tuple(range(8, 12))


def test_blocks_of_an_offload_tier_are_skipped():
    events = batch("removed_tail_and_offload")
    assert [type(e) for e in events] == [BlocksRemoved]


def test_the_index_answers_in_the_routers_own_block_hashes():
    index = EngineCacheIndex(block_tokens=4)
    index.apply(batch("stored_chain"))
    index.apply(batch("stored_shared_and_hit"))
    first = block_hashes(tuple(range(12)) + (99,), 4)
    other = block_hashes(tuple(range(4)) + tuple(range(20, 24)), 4)
    assert index.cached_blocks(first) == 3
    assert index.cached_blocks(other) == 2
    assert index.cached_blocks(block_hashes(tuple(range(30, 42)), 4)) == 0
    index.apply(batch("removed_tail_and_offload"))  # the first prompt's last block evicted
    assert index.cached_blocks(first) == 2
    assert len(index) == 3  # a re-reported hit did not count its blocks twice
    index.apply(batch("cleared"))
    assert index.cached_blocks(first) == 0 and len(index) == 0


def test_a_router_block_of_several_engine_blocks_is_held_while_its_last_one_is():
    index = EngineCacheIndex(block_tokens=8)
    index.apply(batch("stored_chain"))  # engine blocks of 4: router block 0 = engine blocks 0, 1
    router = block_hashes(tuple(range(16)), 8)
    assert index.cached_blocks(router) == 1  # engine block 2 alone does not complete router block 1
    index.apply([BlocksRemoved((batch("stored_chain")[0].hashes[1],))])
    assert index.cached_blocks(router) == 0


def test_a_chain_whose_parent_was_never_seen_is_counted_not_guessed():
    index = EngineCacheIndex(block_tokens=4)
    index.apply([BlocksStored((b"x",), b"unknown parent", (1, 2, 3, 4), 4)])
    assert len(index) == 0 and index.unplaced == 1
    index.apply([BlocksStored((b"y",), None, (1, 2, 3), 3)])  # 3 does not divide 4
    assert index.misaligned == 1


def test_frames_that_are_not_a_kv_event_batch_are_refused():
    payload = (FIXTURES / "cleared.msgpack").read_bytes()
    message = decode_message([b"", (7).to_bytes(8, "big"), payload])
    assert message.seq == 7 and message.events == (CacheCleared(),)
    with pytest.raises(KvEventDecodeError):
        decode_message([b"", b"short", payload])
    with pytest.raises(KvEventDecodeError):
        decode_payload(b"\x93not msgpack of a batch")
