"""Real-shaped traffic: the Mooncake excerpt shares tokens exactly as its block hashes,
a conversation's next prompt extends the last one, RAG prompts share their document."""

import pytest

from serving.routing.prefix_index import block_hashes
from tests.unit.simulator.fakes import FakeCharTokenizer
from simulator.workloads.conversations import ConversationMix, conversation_requests
from simulator.workloads.mooncake import mooncake_requests
from simulator.workloads.rag import RagMix, rag_requests
from simulator.workloads.requests import FixedTraffic, RequestSet, TimedRequest


def shared_prefix(a, b) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def test_mooncake_requests_share_exactly_their_common_hash_blocks():
    requests = mooncake_requests()
    assert len(requests) == 400 and requests.span_s == pytest.approx(141.0)
    a, b = requests.requests[0], requests.requests[1]  # hash ids [0, 1, ...] and [0, 14, ...]
    assert shared_prefix(a.prompt, b.prompt) == 512
    follow_ups = [r for r in requests.requests if r.turn > 0]
    assert len(follow_ups) == 37
    parent = next(r for r in requests.requests if r.session == follow_ups[0].session and r.turn == 0)
    assert shared_prefix(parent.prompt, follow_ups[0].prompt) >= 1024


def test_a_tiled_trace_keeps_its_common_blocks_shared_and_the_rest_apart():
    tiled = mooncake_requests(copies=2)
    assert len(tiled) == 800
    copies = [r for r in tiled.requests if r.prompt[:512] == tiled.requests[0].prompt[:512]]
    assert len(copies) == 800  # block 0 (every request's) stays shared
    first = [r for r in tiled.requests if r.t_s == 0.0]
    assert all(shared_prefix(first[0].prompt, r.prompt) <= 512 for r in first[1:])


def test_a_conversation_resends_its_whole_history():
    requests = conversation_requests(ConversationMix(sessions=20, seed=3), FakeCharTokenizer())
    by_session: dict[int, list[TimedRequest]] = {}
    for r in requests.requests:
        by_session.setdefault(r.session, []).append(r)
    for turns in by_session.values():
        turns.sort(key=lambda r: r.turn)
        for before, after in zip(turns, turns[1:]):
            assert after.prompt[:len(before.prompt)] == before.prompt
            assert len(after.prompt) > len(before.prompt) + before.output_tokens
    assert [r.t_s for r in requests.requests] == sorted(r.t_s for r in requests.requests)


def test_rag_prompts_about_one_document_share_it_and_the_system_prompt():
    requests = rag_requests(RagMix(requests=200, documents=5, document_tokens=(300, 300), seed=1), FakeCharTokenizer())
    hashes = [block_hashes(r.prompt, 64) for r in requests.requests]
    deep = sum(1 for i in range(1, len(hashes)) if any(shared_prefix(hashes[i], h) >= 4 for h in hashes[:i]))
    assert deep > 150  # 5 documents: nearly every request finds its document already asked about


def test_a_request_set_is_in_arrival_order_and_can_be_fitted_and_compressed():
    with pytest.raises(ValueError):
        RequestSet("x", (TimedRequest(2.0, (1,), 1), TimedRequest(1.0, (1,), 1)), "test")
    s = RequestSet("x", (TimedRequest(0.0, tuple(range(10)), 4), TimedRequest(4.0, (1, 2), 4)), "test")
    fitted = s.fit(8)
    assert len(fitted.requests[0].prompt) == 4 and fitted.notes
    assert s.compressed(2.0).span_s == 2.0
    traffic = FixedTraffic(s)
    assert traffic.prompt(traffic.next_session(), 0) == tuple(range(10))
