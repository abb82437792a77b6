"""Request bodies encoded before a stage starts (pure: no gevent, no I/O).

A session's first request depends only on the session and the target, so its JSON
body is encoded once, while the stage is prepared: when an arrival is due, the user
only writes bytes. (A replayed trace's requests are all first requests, of up to
hundreds of kilobytes each; encoding them at send time delayed every request behind
them in a burst.) Later turns carry the answers before them and are encoded when sent.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from loadtest.client.openai_api import request_body
from loadtest.config import TargetConfig
from loadtest.workloads.base import WorkloadPlan


def encode(body: dict) -> bytes:
    """A request body as sent."""
    return json.dumps(body).encode()


class FirstBodies:
    """The encoded first request of each session of ``plan`` (by index in
    ``plan.sessions``); ``None`` for a session that starts with an agent step (its
    branches' messages differ)."""

    def __init__(self, plan: WorkloadPlan, target: TargetConfig) -> None:
        self._bodies: Sequence[bytes | None] = [
            None if s.turns[0].fanout > 1 else encode(request_body(target, system=plan.system_text(s), history=(),
                                                                   turn=s.turns[0], extra=s.extra_body))
            for s in plan.sessions
        ]  # fmt: skip

    def __len__(self) -> int:
        return len(self._bodies)

    def first(self, index: int) -> bytes | None:
        return self._bodies[index]
