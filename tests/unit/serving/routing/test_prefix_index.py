import pytest
from hypothesis import given
from hypothesis import strategies as st

from serving.routing.prefix_index import NO_MATCH, PrefixIndex, PrefixMatch, block_hashes
from tests.unit.serving.routing.routing_fakes import prompt

tokens = st.lists(st.integers(0, 50_000), max_size=40)
block_sizes = st.integers(1, 8)


@given(tokens, tokens, block_sizes)
def test_a_prompts_blocks_hash_the_same_whatever_follows(head, tail, block_tokens):
    whole = block_hashes(head + tail, block_tokens)
    assert len(whole) == len(head + tail) // block_tokens  # full blocks only
    assert whole[: len(head) // block_tokens] == block_hashes(head, block_tokens)


@given(st.lists(st.integers(0, 1000), min_size=8, max_size=40), st.data(), block_sizes)
def test_a_changed_token_changes_its_block_and_every_later_one(token_ids, data, block_tokens):
    position = data.draw(st.integers(0, len(token_ids) - 1))
    changed = list(token_ids)
    changed[position] += 1
    before, after = block_hashes(token_ids, block_tokens), block_hashes(changed, block_tokens)
    first_changed_block = position // block_tokens
    assert before[:first_changed_block] == after[:first_changed_block]
    assert all(b != a for b, a in zip(before[first_changed_block:], after[first_changed_block:]))


def test_block_size_must_be_positive():
    with pytest.raises(ValueError):
        block_hashes([1, 2, 3], 0)
    with pytest.raises(ValueError):
        PrefixIndex(0)


def test_longest_match_is_the_deepest_prefix_some_live_replica_holds_whole():
    index = PrefixIndex(100)
    three = block_hashes(prompt(1, 2, 3), 4)
    index.record(three, "r1")
    index.record(three[:2], "r2")
    assert index.longest_match(three, {"r1", "r2"}) == PrefixMatch(3, frozenset({"r1"}))
    assert index.longest_match(three[:2], {"r1", "r2"}) == PrefixMatch(2, frozenset({"r1", "r2"}))
    assert index.longest_match(three, {"r2"}) == PrefixMatch(2, frozenset({"r2"}))
    assert index.longest_match(three, {"r3"}) == NO_MATCH
    assert index.longest_match(block_hashes(prompt(9, 2, 3), 4), {"r1", "r2"}) == NO_MATCH


def test_evicts_least_recently_used_blocks_and_a_chains_tail_before_its_head():
    index = PrefixIndex(4)
    a, b, c = (block_hashes(prompt(x, x + 1), 4) for x in (10, 20, 30))
    index.record(a, "r1")
    index.record(b, "r2")
    index.record(c[:1], "r1")  # one over the bound: a's tail goes first
    assert a[1] not in index and a[0] in index
    assert len(index) == 4
    index.record(a[:1], "r2")  # touch a's head: now b is the oldest chain
    index.record(c, "r1")
    assert len(index) == 4
    assert b[1] not in index and a[0] in index and c[1] in index


@given(
    st.lists(
        st.tuples(st.lists(st.integers(0, 5), max_size=24), st.sampled_from(["r1", "r2", "r3"])),
        max_size=40,
    ),
    st.integers(1, 12),
)
def test_never_holds_more_than_its_bound(records, max_blocks):
    index = PrefixIndex(max_blocks)
    for token_ids, replica in records:
        hashes = block_hashes(token_ids, 2)
        index.record(hashes, replica)
        assert len(index) <= max_blocks
        if hashes:  # what was just routed is remembered, from its head
            assert replica in index.holders(hashes[0])


@given(
    st.lists(
        st.tuples(st.lists(st.integers(0, 3), max_size=12), st.sampled_from(["r1", "r2", "r3"])),
        max_size=30,
    ),
    st.lists(st.integers(0, 3), max_size=12),
    st.sets(st.sampled_from(["r1", "r2", "r3"])),
)
def test_longest_match_agrees_with_a_brute_force_model(records, query, live):
    index = PrefixIndex(10_000)
    held: dict[str, set[int]] = {"r1": set(), "r2": set(), "r3": set()}
    for token_ids, replica in records:
        hashes = block_hashes(token_ids, 2)
        index.record(hashes, replica)
        held[replica].update(hashes)
    query_hashes = block_hashes(query, 2)

    def depth(replica: str) -> int:
        n = 0
        while n < len(query_hashes) and query_hashes[n] in held[replica]:
            n += 1
        return n

    best = max((depth(r) for r in live), default=0)
    expected = PrefixMatch(best, frozenset(r for r in live if depth(r) == best)) if best else NO_MATCH
    assert index.longest_match(query_hashes, live) == expected


def test_retain_forgets_replicas_that_left_and_blocks_nobody_holds():
    index = PrefixIndex(100)
    shared, only_r1 = block_hashes(prompt(1), 4), block_hashes(prompt(2), 4)
    index.record(shared, "r1")
    index.record(shared, "r2")
    index.record(only_r1, "r1")
    index.retain({"r2"})
    assert index.holders(shared[0]) == ("r2",)
    assert only_r1[0] not in index
    assert len(index) == 1
