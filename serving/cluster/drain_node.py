"""Drain this node's part of a serveout app before its pod stops (the Kubernetes preStop).

    python -m serving.cluster.drain_node --app serveout --deployment engine --timeout-s 30

``serving down`` drains a whole app through a handle (:func:`serving.gateway.separate.
drain_gateway`); a pod that Kubernetes stops must drain only what runs on it, before
its SIGTERM, with the same effect for the clients. From inside a Ray pod this:

1. puts the node's Serve proxy (HAProxy, or Serve's Python proxy) into draining, as
   Serve's own controller does for a node that loses its replicas: its ``/-/healthz``
   answers 503, so the pod leaves the Service (KubeRay's readiness probe), and HAProxy
   reloads, so the old process soft-stops: it closes idle keep-alive connections and
   ends the busy ones after their current answer (clients reconnect through the Service);
2. calls ``drain`` on every running replica of ``--deployment`` (the gateway: the engine
   replicas in the direct mode, the gateway replicas in the separate mode) that lives on
   this node, all at once: each answers new completions 503 ``server_draining`` (HAProxy
   retries them on another replica), lets its requests finish for ``--timeout-s``, cuts
   the rest with an error the client sees, and reports (:class:`~serving.gateway.drain.
   DrainReport`);
3. waits until the proxy has carried its last stream (Serve's ``is_drained``: the draining
   period of ``RAY_SERVE_PROXY_MIN_DRAINING_PERIOD_S`` is over, no old HAProxy process is
   left, no request is open), at most until the drain deadline.

It prints one JSON line (``{"event": "node_drained", ...}``) and exits 0; 1 when Ray could
not be reached or a drain call failed (the pod stops anyway). The rendered pods run it
as their preStop hook with ``terminationGracePeriodSeconds`` from :func:`prestop_budget_s`
(``serving.manifests``, deploy/README.md).

Ray gives no public way to call one chosen replica, so :class:`RayNode` calls the
replica actor's ``handle_request`` as Serve's own router does (a pickled
``RequestMetadata`` naming the method), and the node's proxy actor by its Serve name
(both in :mod:`serving.ray_internals`).
Everything else here is pure and unit-tested with a fake :class:`Node`.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from serving import ray_internals
from serving.errors import ClusterError
from serving.gateway.drain import CUT_GRACE_S

ANSWER_MARGIN_S = 10.0
"""How long past the drain (and its cut grace) a drain call's answer may take."""
PROXY_MIN_DRAINING_ENV = "RAY_SERVE_PROXY_MIN_DRAINING_PERIOD_S"
SERVE_PROXY_MIN_DRAINING_S = 30.0
"""Serve's default for :data:`PROXY_MIN_DRAINING_ENV`: a draining proxy reports drained
only after it (load balancers deregister the node meanwhile)."""
PROXY_POLL_S = 1.0
CONNECT_MARGIN_S = 10.0
"""Budget for joining the cluster and finding the replicas."""
RAY_STOP_S = 20.0
"""Budget for ``ray stop`` after the drain (the preStop's second command)."""
RUNNING = "RUNNING"
FAILED = object()
"""What a part of :func:`drain_node` that raised gives back."""

log = logging.getLogger("serveout.drain")


@dataclass(frozen=True)
class LocalReplica:
    """A running replica of the drained deployment on this node."""

    replica_id: str
    actor_name: str


class DrainCall(Protocol):
    def result(self, timeout_s: float) -> Mapping[str, Any]:
        """The replica's ``drain`` answer: ``{"replica", "report"}`` (report None when it
        was already draining)."""
        ...


class Node(Protocol):
    """What a node drain needs from Ray (:class:`RayNode`; a fake in unit tests)."""

    def node_id(self) -> str: ...

    def serve_details(self) -> Mapping[str, Any] | None:
        """Serve's instance details (``ServeInstanceDetails`` as plain data); None when
        no Serve instance runs."""
        ...

    def start_drain(self, app: str, replica: LocalReplica, timeout_s: float) -> DrainCall: ...

    def drain_proxy(self) -> bool:
        """Put this node's Serve proxy into draining; False when the node runs none."""
        ...

    def proxy_drained(self) -> bool: ...


@dataclass(frozen=True)
class NodeDrainReport:
    """How a node drain went: the local replicas found, the calls to Ray that failed,
    the replicas' requests in flight, cut and left open (their
    :class:`~serving.gateway.drain.DrainReport` summed), and the proxy's end: ``drained``,
    ``deadline`` (streams still open when the wait ended), ``none`` (no proxy on this
    node) or ``error`` (it could not be put into draining)."""

    replicas: int
    failed: int
    in_flight: int
    cut: int
    left: int
    proxy: str
    elapsed_s: float

    def to_json(self) -> str:
        return json.dumps({"event": "node_drained", **asdict(self)})


def local_replicas(details: Mapping[str, Any], app: str, deployment: str, node_id: str) -> list[LocalReplica]:
    """The running replicas of ``app``'s ``deployment`` on ``node_id``, read from Serve's
    instance details (``applications.<app>.deployments.<deployment>.replicas``)."""
    application = (details.get("applications") or {}).get(app)
    if application is None:
        return []
    found = (application.get("deployments") or {}).get(deployment)
    if found is None:
        return []
    return [LocalReplica(r["replica_id"], r["actor_name"]) for r in found.get("replicas") or []
            if r.get("node_id") == node_id and r.get("state") == RUNNING and r.get("actor_name")]


def summed(answers: list[Mapping[str, Any]]) -> dict[str, int]:
    """The drain reports of ``answers`` added up (a replica already draining reports None)."""
    reports = [a["report"] for a in answers if a.get("report") is not None]
    return {key: sum(int(r[key]) for r in reports) for key in ("in_flight", "cut", "left")}


def proxy_min_draining_s(env: Mapping[str, str] = os.environ) -> float:
    """Serve's minimum proxy draining period as this pod's Ray processes read it."""
    value = env.get(PROXY_MIN_DRAINING_ENV)
    return float(value) if value else SERVE_PROXY_MIN_DRAINING_S


def proxy_wait_s(timeout_s: float, min_draining_s: float) -> float:
    """How long after the drain began the proxy may take to carry its last stream: the
    replicas' drain (and its cut grace), or the proxy's own minimum period, whichever is
    longer (Serve checks a draining proxy every 5 s: one more poll past it)."""
    return max(timeout_s + CUT_GRACE_S, min_draining_s + 5 * PROXY_POLL_S)


def prestop_budget_s(timeout_s: float, min_draining_s: float = SERVE_PROXY_MIN_DRAINING_S) -> int:
    """The ``terminationGracePeriodSeconds`` a pod running this drain, then ``ray stop``,
    needs (the kubelet kills the pod at the end of it, preStop or not)."""
    return math.ceil(CONNECT_MARGIN_S + proxy_wait_s(timeout_s, min_draining_s) + ANSWER_MARGIN_S + RAY_STOP_S)


def drain_node(node: Node, app: str, deployment: str, timeout_s: float, *,
               min_draining_s: float = SERVE_PROXY_MIN_DRAINING_S,
               clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep) -> NodeDrainReport:
    """Drain this node's proxy and replicas of ``app``'s ``deployment`` (module docstring)."""
    started = clock()
    failures = 0

    def attempt(what: str, call: Callable[..., Any], *args: Any) -> Any:
        """``call(*args)``, or :data:`FAILED` (logged and counted) when it raises: one
        failing part of the drain must not stop the others (the pod stops anyway)."""
        nonlocal failures
        try:
            return call(*args)
        except Exception as exc:  # noqa: BLE001 - see the docstring
            failures += 1
            log.warning("%s failed: %s: %s", what, type(exc).__name__, exc)
            return FAILED

    node_id = node.node_id()
    proxy = attempt("putting the proxy into draining", node.drain_proxy)
    details = attempt("reading Serve's replicas", node.serve_details)
    replicas = local_replicas(details, app, deployment, node_id) if isinstance(details, Mapping) else []
    calls = [(r, attempt(f"draining replica {r.replica_id}", node.start_drain, app, r, timeout_s))
             for r in replicas]
    answers = []
    for replica, call in calls:
        if call is FAILED:
            continue
        remaining = started + timeout_s + CUT_GRACE_S + ANSWER_MARGIN_S - clock()
        answer = attempt(f"draining replica {replica.replica_id}", call.result, max(1.0, remaining))
        if answer is not FAILED:
            answers.append(answer)
    ending = {True: "deadline", False: "none"}.get(proxy, "error")
    if proxy is True:
        deadline = started + proxy_wait_s(timeout_s, min_draining_s)
        while clock() < deadline:
            if attempt("asking the proxy whether it drained", node.proxy_drained) is True:
                ending = "drained"
                break
            sleep(PROXY_POLL_S)
    return NodeDrainReport(replicas=len(replicas), failed=failures, **summed(answers), proxy=ending,
                           elapsed_s=round(clock() - started, 3))


class RayNode:
    """:class:`Node` on a live Ray cluster, from a driver on this node (``address="auto"``).

    Built on Ray internals (:mod:`serving.ray_internals`, checked against the installed Ray):
    ``ReplicaActor.handle_request(pickled RequestMetadata, *args)``, the proxy actor
    ``SERVE_PROXY_ACTOR-<node id>`` in the ``serve`` namespace with ``update_draining`` /
    ``is_drained``, and the controller client's ``get_serve_details``."""

    CALL_TIMEOUT_S = 30.0

    def __init__(self) -> None:
        import ray

        self._ray = ray
        if not ray.is_initialized():
            ray.init(address="auto", log_to_driver=False, logging_level=logging.WARNING)
        self._node_id = ray.get_runtime_context().get_node_id()
        self._proxy = None

    def node_id(self) -> str:
        return self._node_id

    def serve_details(self) -> Mapping[str, Any] | None:
        return ray_internals.serve_details()

    def start_drain(self, app: str, replica: LocalReplica, timeout_s: float) -> DrainCall:
        actor = self._ray.get_actor(replica.actor_name, namespace=ray_internals.serve_namespace())
        ref = actor.handle_request.remote(ray_internals.drain_request_metadata(app), timeout_s)
        return _RayCall(self._ray, ref)

    def drain_proxy(self) -> bool:
        try:
            self._proxy = self._ray.get_actor(ray_internals.proxy_actor_name(self._node_id),
                                              namespace=ray_internals.serve_namespace())
        except ValueError:  # no proxy on this node (no replica here, not the head)
            return False
        self._ray.get(self._proxy.update_draining.remote(True), timeout=self.CALL_TIMEOUT_S)
        return True

    def proxy_drained(self) -> bool:
        return bool(self._ray.get(self._proxy.is_drained.remote(), timeout=self.CALL_TIMEOUT_S))


class _RayCall:
    def __init__(self, ray, ref) -> None:
        self._ray, self._ref = ray, ref

    def result(self, timeout_s: float) -> Mapping[str, Any]:
        return self._ray.get(self._ref, timeout=timeout_s)


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The drain's options (``python -m serving.cluster.drain_node`` and ``serving drain --local``)."""
    parser.add_argument("--app", default="serveout", help="Serve application name (StackConfig app_name)")
    parser.add_argument("--deployment", required=True,
                        help="the deployment holding the gateway: engine (direct mode) or gateway (separate)")
    parser.add_argument("--timeout-s", type=float, required=True,
                        help="how long requests in flight may finish (the stack's drain.timeout_s)")
    return parser


def add_drain_command(subparsers) -> argparse.ArgumentParser:
    """Add ``drain --local`` to a CLI's subparsers (``serving drain --local ...``)."""
    drain = subparsers.add_parser(
        "drain", help="drain this node's replicas and Serve proxy (a pod's preStop hook)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    drain.add_argument("--local", action="store_true", required=True,
                       help="only what runs on this node (`serving down` drains a whole local stack)")
    add_arguments(drain)
    drain.set_defaults(func=run)
    return drain


def run(args: argparse.Namespace, node_factory: Callable[[], Node] = RayNode) -> int:
    """Drain this node as ``args`` say; prints the report's JSON line."""
    if args.timeout_s <= 0:
        raise ClusterError(f"--timeout-s must be positive, not {args.timeout_s:g}")
    try:
        node = node_factory()
    except Exception as exc:  # noqa: BLE001 - no cluster to drain: say so, let the pod stop
        print(json.dumps({"event": "node_drain_failed", "reason": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 1
    report = drain_node(node, args.app, args.deployment, args.timeout_s, min_draining_s=proxy_min_draining_s())
    print(report.to_json(), flush=True)
    return 1 if report.failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = add_arguments(argparse.ArgumentParser(
        prog="python -m serving.cluster.drain_node", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter))
    try:
        return run(parser.parse_args(argv))
    except ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
