"""Which version of a split model name serves one request (pure).

A request's sticky key (its session, else its API key's name, else its own id) hashes
to one of 10,000 buckets per model name; buckets below ``canary_percent`` x 100 go to
the canary. Raising the percentage only moves stable keys to the canary, never back:
a session that met the canary at 5% stays on it at 25% and 50%."""

from __future__ import annotations

from serving.config.rollout import TrafficSplit
from serving.routing.hash_ring import stable_hash

BUCKETS = 10_000


def bucket(name: str, sticky_key: str) -> int:
    """The bucket of ``sticky_key`` for model ``name`` (stable across processes)."""
    return stable_hash(f"{name}\0{sticky_key}") % BUCKETS


def choose_version(split: TrafficSplit, sticky_key: str) -> str:
    """The adapter that serves a request with ``sticky_key`` for ``split.name``."""
    if split.canary is None or split.canary_percent <= 0:
        return split.stable
    if split.canary_percent >= 100 or bucket(split.name, sticky_key) < split.canary_percent * (BUCKETS / 100):
        return split.canary
    return split.stable


def sticky_key(session_id: str | None, key_name: str | None, request_id: str) -> str:
    """What keeps a client on one version: its session, else its API key (not the
    anonymous one), else nothing (the request's own id: each request drawn anew)."""
    if session_id:
        return f"session:{session_id}"
    if key_name:
        return f"key:{key_name}"
    return f"request:{request_id}"
