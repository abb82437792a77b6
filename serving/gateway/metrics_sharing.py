"""Every gateway replica's metrics on each one's ``/metrics`` (several gateway replicas).

Each replica publishes a snapshot of its registry to the app's
:class:`~serving.gateway.metrics_board.MetricsBoard` every ``period_s``, and a scrape
publishes a fresh one and renders the whole board, each replica's series labelled
``gateway_replica`` (:class:`FleetMetrics`). The board is a named Ray actor per app
(:class:`RayBoardChannel`): no CPU, created by the first replica that calls it, not
detached, so it dies with the replica that created it (then the next call of any
replica creates it again, and the others' series are back within a publish period)
and never outlives the app. A board that does not answer within ``timeout_s`` leaves
the scrape with this replica's own series only (labelled too).

With a single gateway replica none of this runs: ``/metrics`` is the registry as it
is (see :attr:`serving.config.stack.StackConfig.gateway_processes_at_most`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

from serving.gateway.metrics import REPLICAS_FAMILY
from serving.gateway.metrics_board import MetricsBoard, Snapshot, merged_families, render, split_shared
from serving.routing.metrics import ENGINE_VIEW_FAMILIES

log = logging.getLogger("serveout.gateway")

PUBLISH_PERIOD_S = 1.0
BOARD_TIMEOUT_S = 2.0
"""How long a publish or a scrape waits for the board."""


def shared_views(direct: bool) -> frozenset[str]:
    """Families every gateway replica computes alike, shown once from the answering
    replica: Serve's replica counts and, with separate gateways, the engines' stats
    (each gateway's router polls the same engines). In the direct mode every engine
    replica reports its own engine: those are published like its counters."""
    return frozenset({REPLICAS_FAMILY}) if direct else frozenset({REPLICAS_FAMILY}) | ENGINE_VIEW_FAMILIES


class BoardChannel(Protocol):
    """Where the replicas of one app meet: a :class:`MetricsBoard` somewhere."""

    async def publish(self, snapshot: Snapshot, *, create: bool = True) -> None:
        """Put ``snapshot`` on the board; ``create`` False: only if the board is known
        (a stopping replica must not start a board the app may be deleting)."""

    async def exchange(self, snapshot: Snapshot) -> list[Snapshot]: ...


class FleetMetrics:
    """One gateway replica's side: publishes its ``registry`` as ``replica`` every
    ``period_s`` (once :meth:`start` ed, on the running loop) and :meth:`render` s the
    app's exposition for ``/metrics``; ``shared`` names the shared-view families."""

    def __init__(self, registry: CollectorRegistry, replica: str, channel: BoardChannel, *,
                 shared: frozenset[str], period_s: float = PUBLISH_PERIOD_S,
                 timeout_s: float = BOARD_TIMEOUT_S) -> None:
        self._registry, self._replica, self._channel = registry, replica, channel
        self._shared, self._period_s, self._timeout_s = shared, period_s, timeout_s
        self._seq = itertools.count()
        self._collecting = threading.Lock()  # a snapshot's seq and its collect, together
        self._task: asyncio.Task | None = None
        self._closed = False
        self._failing = False

    def start(self) -> None:
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def render(self) -> bytes:
        """Every fresh snapshot on the board, this replica's taken now; this
        replica's alone if the board does not answer. Collecting and rendering run
        in a worker thread: the event loop keeps streaming meanwhile."""
        snapshot, views = await asyncio.to_thread(self._snapshot)
        try:
            async with asyncio.timeout(self._timeout_s):
                snapshots = await self._channel.exchange(snapshot)
            self._note(None)
        except Exception as exc:  # the board is down or being recreated: show what this replica knows
            self._note(exc)
            snapshots = [snapshot]
        return await asyncio.to_thread(lambda: render(merged_families(snapshots, shared=views)))

    async def close(self) -> None:
        """Stop publishing, after a last snapshot (the replica is stopping)."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._publish(create=False)

    def _snapshot(self) -> tuple[Snapshot, list[Metric]]:
        with self._collecting:
            seq, families = next(self._seq), list(self._registry.collect())
        own, views = split_shared(families, self._shared)
        return Snapshot.of(self._replica, seq, own), views

    async def _publish(self, *, create: bool = True) -> None:
        snapshot, _ = await asyncio.to_thread(self._snapshot)
        try:
            async with asyncio.timeout(self._timeout_s):
                await self._channel.publish(snapshot, create=create)
            self._note(None)
        except Exception as exc:
            self._note(exc)

    async def _run(self) -> None:
        while not self._closed:
            await self._publish()
            await asyncio.sleep(self._period_s)

    def _note(self, error: Exception | None) -> None:
        """Log when the board stops or starts answering (not every failed call)."""
        if error is not None and not self._failing:
            log.warning("metrics board unreachable, /metrics shows this gateway replica only: %r", error)
        elif error is None and self._failing:
            log.info("metrics board reachable again")
        self._failing = error is not None


def board_actor_name(app_name: str) -> str:
    return f"serveout-metrics-board:{app_name}"


class RayBoardChannel:
    """The app's board as a named Ray actor (see the module's docstring). Needs Ray."""

    def __init__(self, app_name: str) -> None:
        self._name = board_actor_name(app_name)
        self._handle = None

    async def publish(self, snapshot: Snapshot, *, create: bool = True) -> None:
        if create or self._handle is not None:
            await self._call("publish", snapshot)

    async def exchange(self, snapshot: Snapshot) -> list[Snapshot]:
        return await self._call("exchange", snapshot)

    async def _call(self, method: str, *args):
        if self._handle is None:
            self._handle = await asyncio.to_thread(self._get_or_create)
        try:
            return await getattr(self._handle, method).remote(*args)
        except BaseException:  # dead, or cancelled by a timeout: look the actor up again next time
            self._handle = None
            raise

    def _get_or_create(self):
        import ray

        return ray.remote(MetricsBoard).options(
            name=self._name, get_if_exists=True, num_cpus=0,
            scheduling_strategy="DEFAULT",  # not in an engine replica's placement group
        ).remote()
