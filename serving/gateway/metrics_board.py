"""One ``/metrics`` for every gateway replica (pure: no Ray, no I/O).

Each gateway replica counts in its own process registry, and a scrape of
``/metrics`` reaches one replica. So each replica publishes a :class:`Snapshot` of
its registry to one :class:`MetricsBoard` per app (every second, and with each
scrape it answers), and the answering replica renders every fresh snapshot on the
board as one exposition (:func:`merged_families`): one family per name, each
replica's series labelled ``gateway_replica="<Serve replica id>"``, so
``sum by (...) (rate(...))`` is right whichever replica answers.

- A scrape renders the board only (the answering replica's own series as it
  published them with the scrape), and the board keeps each replica's newest
  snapshot: a replica's counters never go back from one scrape to the next,
  whichever replicas answer them (a decrease would read as a counter reset).
- The board forgets a replica whose last snapshot is older than ``stale_after_s``
  on the board's own clock (a stopped or stuck replica; no clock skew between
  hosts), or that withdrew.
- Shared views, families that every gateway computes alike from the same source
  (``serveout_replicas``; the engines' stats when the gateways are separate), are
  not published: they come from the answering replica's registry, unlabelled, as
  with a single gateway.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

GATEWAY_REPLICA_LABEL = "gateway_replica"
"""The label naming the gateway replica that owns a series."""
STALE_AFTER_S = 5.0
"""A replica's snapshot older than this leaves the board (five publish periods)."""


@dataclass(frozen=True)
class Snapshot:
    """One gateway replica's metric families at one instant, pickled as plain tuples
    (cheaper than the objects: ``benchmarks/gateway_metrics_sharing.py``; the board
    stores them as opaque bytes). ``seq`` grows with each snapshot of a replica, in the
    order they were taken."""

    replica: str
    seq: int
    families: bytes

    @classmethod
    def of(cls, replica: str, seq: int, families: Iterable[Metric]) -> Snapshot:
        plain = [(f.name, f.documentation, f.type, f.unit, [tuple(s) for s in f.samples]) for f in families]
        return cls(replica, seq, pickle.dumps(plain, protocol=pickle.HIGHEST_PROTOCOL))

    def decode(self) -> list[Metric]:
        families = []
        for name, documentation, kind, unit, samples in pickle.loads(self.families):
            family = Metric(name, documentation, kind, unit)
            family.samples = [Sample(*sample) for sample in samples]
            families.append(family)
        return families


class MetricsBoard:
    """The newest :class:`Snapshot` of each gateway replica of one app (the body of
    a Ray actor in the app: :mod:`serving.gateway.metrics_sharing`)."""

    def __init__(self, stale_after_s: float = STALE_AFTER_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._stale_after_s = stale_after_s
        self._clock = clock
        self._latest: dict[str, tuple[float, Snapshot]] = {}

    def publish(self, snapshot: Snapshot) -> None:
        """Keep ``snapshot`` unless the board holds a newer one of its replica."""
        held = self._latest.get(snapshot.replica)
        if held is None or held[1].seq < snapshot.seq:
            self._latest[snapshot.replica] = (self._clock(), snapshot)

    def withdraw(self, replica: str) -> None:
        self._latest.pop(replica, None)

    def snapshots(self) -> list[Snapshot]:
        """The fresh snapshots, by replica id; stale ones are dropped."""
        now = self._clock()
        for replica in [r for r, (at, _) in self._latest.items() if now - at > self._stale_after_s]:
            del self._latest[replica]
        return [snapshot for _, (_, snapshot) in sorted(self._latest.items())]

    def exchange(self, snapshot: Snapshot) -> list[Snapshot]:
        """:meth:`publish` then :meth:`snapshots` (one call per scrape)."""
        self.publish(snapshot)
        return self.snapshots()


def split_shared(families: Iterable[Metric], shared: frozenset[str]) -> tuple[list[Metric], list[Metric]]:
    """``(own, shared_views)``: the families to publish, and those named in ``shared``."""
    own, views = [], []
    for family in families:
        (views if family.name in shared else own).append(family)
    return own, views


def merged_families(snapshots: Iterable[Snapshot], *, shared: Sequence[Metric] = ()) -> list[Metric]:
    """One family per name: ``shared`` as they are, then every snapshot's families
    with :data:`GATEWAY_REPLICA_LABEL` added to their samples. A family whose type
    differs from the first one of its name (replicas of different versions) is
    left out for that replica; a snapshot's copy of a shared family too."""
    merged: dict[str, Metric] = {family.name: family for family in shared}
    views = set(merged)
    for snapshot in snapshots:
        for family in snapshot.decode():
            if family.name in views:
                continue
            into = merged.get(family.name)
            if into is None:
                into = merged[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
            elif into.type != family.type:
                continue
            into.samples.extend(
                sample._replace(labels={**sample.labels, GATEWAY_REPLICA_LABEL: snapshot.replica})
                for sample in family.samples
            )
    return list(merged.values())


class _Families:
    """A collector over fixed families (what :func:`generate_latest` reads)."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families


def render(families: list[Metric]) -> bytes:
    """The Prometheus text exposition of ``families``."""
    return generate_latest(_Families(families))
