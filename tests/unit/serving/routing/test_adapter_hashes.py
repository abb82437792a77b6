"""Prefix hashes under LoRA adapters: the same prompt under two adapters shares no
block (vLLM keys cached blocks by adapter), the hashes are stable across processes, and
an engine's KV events carry the adapter into the router's index."""

import subprocess
import sys

import msgspec

from serving.routing.engine_cache import BlocksStored, EngineCacheIndex
from serving.routing.kv_event_wire import AllBlocksCleared, BlockStored, KVEventBatch, decode_payload
from serving.routing.prefix_index import ROOT_HASH, block_hashes, root_hash

TOKENS = tuple(range(12))


def test_the_base_model_keeps_the_plain_root_and_each_adapter_has_its_own():
    assert root_hash(None) == ROOT_HASH
    assert len({root_hash(None), root_hash("clinic"), root_hash("pharmacy")}) == 3
    assert block_hashes(TOKENS, 4) == block_hashes(TOKENS, 4, None)
    assert not set(block_hashes(TOKENS, 4, "clinic")) & set(block_hashes(TOKENS, 4, "pharmacy"))
    assert not set(block_hashes(TOKENS, 4, "clinic")) & set(block_hashes(TOKENS, 4))


def test_adapter_hashes_are_the_same_in_another_process_with_another_hash_seed():
    code = ("from serving.routing.prefix_index import block_hashes; "
            "print(block_hashes(tuple(range(12)), 4, 'clinic'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "12345", "PATH": ""}, cwd=".")
    assert out.stdout.strip() == str(block_hashes(TOKENS, 4, "clinic"))


def test_a_stored_event_under_an_adapter_is_a_hit_for_that_adapter_only():
    payload = msgspec.msgpack.encode(KVEventBatch(0.0, [
        BlockStored(block_hashes=[101, 102, 103], parent_block_hash=None, token_ids=list(TOKENS), block_size=4,
                    lora_name="clinic"),
    ]))
    (event,) = decode_payload(payload)
    assert event == BlocksStored((101, 102, 103), None, TOKENS, 4, "clinic")
    index = EngineCacheIndex(block_tokens=4)
    index.apply([event])
    assert index.cached_blocks(block_hashes(TOKENS, 4, "clinic")) == 3
    assert index.cached_blocks(block_hashes(TOKENS, 4)) == 0
    assert index.cached_blocks(block_hashes(TOKENS, 4, "pharmacy")) == 0
    index.apply(decode_payload(msgspec.msgpack.encode(KVEventBatch(1.0, [AllBlocksCleared()]))))
    assert index.cached_blocks(block_hashes(TOKENS, 4, "clinic")) == 0
