"""The block pool: exact free counts, prefix hits, LRU eviction of cached units."""

import pytest

from simulator.kv_cache import BlockPool


def test_blocks_are_counted_exactly_through_take_and_release():
    pool = BlockPool(100, unit=4)
    pool.take_hashed((1, 2))
    pool.take_anonymous(3)
    assert pool.free == 100 - 11
    pool.release((1, 2), 3)
    assert pool.free == 100
    with pytest.raises(RuntimeError):
        pool.take_anonymous(101)


def test_a_shared_unit_is_held_once_and_a_freed_one_stays_cached():
    pool = BlockPool(20, unit=4)
    pool.take_hashed((1, 2))
    pool.take_hashed((1, 2))  # a second sequence with the same prefix
    assert pool.free == 12
    pool.release((1, 2), 0)
    pool.release((1, 2), 0)
    assert pool.free == 20
    assert pool.cached_prefix((1, 2, 3)) == 2
    assert pool.revivals((1, 2)) == 8  # both sit in the free queue


def test_allocation_evicts_the_oldest_cached_units_first():
    pool = BlockPool(8, unit=4)
    pool.take_hashed((1,))
    pool.take_hashed((2,))
    pool.release((1,), 0)
    pool.release((2,), 0)
    pool.take_anonymous(4)  # takes unit 1's blocks, freed first
    assert pool.cached_prefix((1,)) == 0
    assert pool.cached_prefix((2,)) == 1
