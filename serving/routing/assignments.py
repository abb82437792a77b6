"""The router's live count of requests it has assigned to each replica.

A request is assigned when a policy ranks it (before Serve even sends it: that
window is where the cold-start herd forms), moved if Serve sends it elsewhere,
and released when it completes or is abandoned while still queued. Engine
stats are a stats period old; this count is not.

Entries are bounded (oldest dropped first) so that a lifecycle event Serve never
delivers cannot make a replica look busier forever.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Collection
from dataclasses import dataclass, replace

from serving.config.stack import RoutingPolicyName
from serving.routing.policy import RoutingDecision

DEFAULT_MAX_TRACKED = 65_536


@dataclass(frozen=True)
class Assignment:
    """Where one request was sent, and why (kept for the metrics counted once it is routed)."""

    replica_id: str
    policy: RoutingPolicyName
    decision: RoutingDecision
    generation: bool = True
    adapter: str | None = None  # the LoRA adapter it runs under (None: the base model)


class AssignmentTracker:
    """Requests in flight per replica, keyed by the request's unique id."""

    def __init__(self, max_tracked: int = DEFAULT_MAX_TRACKED) -> None:
        if max_tracked < 1:
            raise ValueError(f"max_tracked must be >= 1, got {max_tracked}")
        self._max_tracked = max_tracked
        self._by_request: OrderedDict[str, Assignment] = OrderedDict()
        self._per_replica: Counter[str] = Counter()
        self._adapters: dict[str, Counter[str]] = {}  # replica -> LoRA adapter -> requests

    def __len__(self) -> int:
        return len(self._by_request)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._by_request

    def count(self, replica_id: str) -> int:
        """Requests assigned to ``replica_id`` and not released."""
        return self._per_replica[replica_id]

    def adapters(self, replica_id: str) -> Counter[str]:
        """LoRA adapters with requests assigned to ``replica_id``, with how many (do not mutate)."""
        return self._adapters.get(replica_id) or Counter()

    def assign(self, request_id: str, assignment: Assignment) -> None:
        """Assign (or re-assign, on a routing retry) a request."""
        self.release(request_id)
        self._by_request[request_id] = assignment
        self._increment(assignment)
        while len(self._by_request) > self._max_tracked:
            _, oldest = self._by_request.popitem(last=False)
            self._decrement(oldest)

    def move(self, request_id: str, replica_id: str) -> Assignment | None:
        """Serve sent the request to ``replica_id``: count it there. Returns its assignment."""
        current = self._by_request.get(request_id)
        if current is None:
            return None
        if current.replica_id != replica_id:
            self._decrement(current)
            moved = self._by_request[request_id] = replace(current, replica_id=replica_id)
            self._increment(moved)
        return current

    def release(self, request_id: str) -> None:
        """The request finished, failed or was abandoned (unknown ids are ignored)."""
        assignment = self._by_request.pop(request_id, None)
        if assignment is not None:
            self._decrement(assignment)

    def retain(self, replica_ids: Collection[str]) -> None:
        """Drop requests assigned to replicas that left."""
        for request_id, assignment in list(self._by_request.items()):
            if assignment.replica_id not in replica_ids:
                self.release(request_id)

    def _increment(self, assignment: Assignment) -> None:
        self._per_replica[assignment.replica_id] += 1
        if assignment.adapter is not None:
            self._adapters.setdefault(assignment.replica_id, Counter())[assignment.adapter] += 1

    def _decrement(self, assignment: Assignment) -> None:
        replica_id = assignment.replica_id
        self._per_replica[replica_id] -= 1
        if self._per_replica[replica_id] <= 0:
            del self._per_replica[replica_id]
        running = self._adapters.get(replica_id)
        if assignment.adapter is not None and running is not None:
            running[assignment.adapter] -= 1
            if running[assignment.adapter] <= 0:
                del running[assignment.adapter]
                if not running:
                    del self._adapters[replica_id]
