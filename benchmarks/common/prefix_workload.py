"""The routing benchmarks' shared-prefix workload and the engine counters they read."""

from __future__ import annotations

import random

import httpx
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.common.model import MODEL
from benchmarks.common.streaming_client import chat_body

WORDS = ("river market signal garden metal cloud paper orbit stone harbour lantern meadow "
         "copper violet summit canyon ember glacier willow falcon").split()


def shared_prefix_bodies(prefixes: int, prefix_words: int, repeats: int, seed: int) -> list[dict]:
    """Each of ``prefixes`` long shared prefixes asked ``repeats`` times, in random order."""
    rng = random.Random(seed)
    texts = [" ".join(rng.choice(WORDS) for _ in range(prefix_words)) for _ in range(prefixes)]
    order = [p for p in range(prefixes) for _ in range(repeats)]
    rng.shuffle(order)
    return [chat_body(MODEL, f"{texts[p]}\nQuestion {i}: name one word above.", 16) for i, p in enumerate(order)]


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
