"""The routing benchmarks' shared-prefix workload and the engine counters they read."""

from __future__ import annotations

import random

import httpx
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.common.model import MODEL
from benchmarks.common.streaming_client import chat_body

WORDS = ("river market signal garden metal cloud paper orbit stone harbour lantern meadow "
         "copper violet summit canyon ember glacier willow falcon").split()


def shared_prefix_requests(prefixes: int, prefix_words: int, repeats: int, seed: int) -> list[tuple[int, dict]]:
    """Each of ``prefixes`` long shared prefixes asked ``repeats`` times, in random order:
    (the prefix's number, the chat body)."""
    rng = random.Random(seed)
    texts = [" ".join(rng.choice(WORDS) for _ in range(prefix_words)) for _ in range(prefixes)]
    order = [p for p in range(prefixes) for _ in range(repeats)]
    rng.shuffle(order)
    return [(p, chat_body(MODEL, f"{texts[p]}\nQuestion {i}: name one word above.", 16)) for i, p in enumerate(order)]


def shared_prefix_bodies(prefixes: int, prefix_words: int, repeats: int, seed: int) -> list[dict]:
    """The bodies of :func:`shared_prefix_requests`."""
    return [body for _, body in shared_prefix_requests(prefixes, prefix_words, repeats, seed)]


def engine_totals(url: str) -> dict[str, float]:
    """The engines' prefix-cache counters and the routing decisions, summed over replicas."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("serveout_engine_prefix_cache_") or s.name == "serveout_routing_decisions_total":
                key = s.name if "decision" not in s.labels else f"decision:{s.labels['decision']}"
                totals[key] = totals.get(key, 0.0) + s.value
    return totals


def routed_by_replica(url: str) -> dict[str, float]:
    """Generation requests each engine replica accepted so far (the routers' counter)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "serveout_routed_requests_total":
                counts[s.labels["replica"]] = counts.get(s.labels["replica"], 0.0) + s.value
    return counts


def engine_replica_ids(url: str) -> set[str]:
    """The engine replicas whose polled stats the gateway exports."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {s.labels["replica"] for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == "serveout_engine_kv_cache_usage" and "replica" in s.labels}
