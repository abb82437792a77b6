"""A request in flight and an engine replica, as the simulated cluster sees them."""

from __future__ import annotations

from simulator.replica import Replica
from simulator.sequence import Seq


class Flight:
    """A request from its start to its end."""

    __slots__ = ("rid", "user", "session", "turn", "scheduled", "start", "prompt", "out_len", "adapter", "ticket",
                 "host")

    def __init__(self, rid, user, session, turn, scheduled, start, prompt, out_len, adapter=None) -> None:
        self.rid, self.user, self.session, self.turn = rid, user, session, turn
        self.scheduled, self.start, self.prompt, self.out_len = scheduled, start, prompt, out_len
        self.adapter = adapter  # the LoRA adapter the request names (None: the base model)
        self.ticket = self.host = None


class Host:
    """One engine replica as the cluster sees it."""

    __slots__ = ("id", "replica", "flights", "version", "busy", "live", "started", "stopped")

    def __init__(self, replica_id: str, replica: Replica, started: float) -> None:
        self.id, self.replica, self.started = replica_id, replica, started
        self.flights: dict[int, tuple[Flight, Seq]] = {}
        self.version = 0
        self.busy = False
        self.live = False
        self.stopped: float | None = None
