"""Reading a stack's ``/metrics`` in benchmarks (prometheus_client's own parser)."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families


def samples(url: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """``{sorted label items: value}`` for every sample called ``name`` at ``url``'s ``/metrics``."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {tuple(sorted(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples if s.name == name}
