"""HostCacheWatch: the adapters an engine caches in host memory, and the evictions seen
between polls of its cache (pure: the polls are given)."""

from serving.engine.adapter_residency import HostCacheWatch

SERVED = {1: "clinic", 2: "pharmacy", 3: "admin"}


def test_cached_adapters_are_named_and_sorted():
    watch = HostCacheWatch()
    watch.observe({3, 1}, SERVED)
    assert watch.cached == ("admin", "clinic")
    assert watch.evictions == 0


def test_an_adapter_that_leaves_the_cache_while_served_is_an_eviction():
    watch = HostCacheWatch()
    watch.observe({1, 2}, SERVED)
    watch.observe({2, 3}, SERVED)  # clinic evicted for admin
    assert (watch.cached, watch.evictions) == (("admin", "pharmacy"), 1)
    watch.observe({1, 3}, SERVED)  # clinic read back from disk, pharmacy out
    assert (watch.cached, watch.evictions) == (("admin", "clinic"), 2)


def test_a_removed_adapter_is_no_eviction_and_unknown_ids_are_ignored():
    watch = HostCacheWatch()
    watch.observe({1, 2}, SERVED)
    watch.observe({2, 99}, {2: "pharmacy"})  # clinic removed by the operator; 99 is not ours
    assert (watch.cached, watch.evictions) == (("pharmacy",), 0)


def test_a_reloaded_adapter_under_a_new_id_is_no_eviction():
    watch = HostCacheWatch()
    watch.observe({1}, SERVED)
    watch.observe({4}, {4: "clinic"})  # clinic changed and reloaded: a new engine id
    assert (watch.cached, watch.evictions) == (("clinic",), 0)
