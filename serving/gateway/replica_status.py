"""How many engine (and gateway) replicas can serve: polled from Serve's controller.

The gateway's ``/health`` (ready only when a replica can serve), its 503 when no
replica can serve and none is starting, and the ``serveout_replicas`` gauge all
read the latest :class:`ReplicaCounts` of the engine deployment; the gateway's own
count sets each gateway replica's share of the app's limits.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("serveout.gateway")

_STARTING_STATES = {"STARTING", "UPDATING", "RECOVERING"}


@dataclass(frozen=True)
class ReplicaCounts:
    ready: int = 0
    starting: int = 0

    @property
    def desired(self) -> int:
        return self.ready + self.starting


def counts_from_states(replica_states: dict) -> ReplicaCounts:
    """``ReplicaCounts`` from Serve's ``{ReplicaState: count}`` map (pure)."""
    by_name = {str(getattr(k, "value", k)): v for k, v in replica_states.items()}
    return ReplicaCounts(
        ready=by_name.get("RUNNING", 0),
        starting=sum(by_name.get(s, 0) for s in _STARTING_STATES),
    )


class ServeReplicaWatcher:
    """Polls ``serve.status()`` in the background for the engine ``deployment``
    (:attr:`counts`) and, optionally, the ``gateway`` deployment (:attr:`gateway_counts`)."""

    def __init__(self, app_name: str, deployment: str, *, gateway: str | None = None,
                 period_s: float = 3.0,
                 on_update: Callable[[ReplicaCounts, ReplicaCounts], None] | None = None) -> None:
        self.app_name, self.deployment, self.gateway, self.period_s = app_name, deployment, gateway, period_s
        self.counts = ReplicaCounts()
        self.gateway_counts = ReplicaCounts()
        self._on_update = on_update
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        from ray import serve

        while True:
            try:
                status = await asyncio.to_thread(serve.status)
                deployments = status.applications[self.app_name].deployments
                self.counts = counts_from_states(deployments[self.deployment].replica_states)
                if self.gateway is not None:
                    self.gateway_counts = counts_from_states(deployments[self.gateway].replica_states)
                if self._on_update is not None:
                    self._on_update(self.counts, self.gateway_counts)
            except KeyError:  # the app is being deployed or deleted
                self.counts = ReplicaCounts()
            except Exception as exc:  # keep watching; the controller may be restarting
                log.warning("replica status poll failed: %s", exc)
            await asyncio.sleep(self.period_s)
