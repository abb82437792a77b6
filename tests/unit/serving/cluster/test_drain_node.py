"""The node drain of a pod's preStop (serving/cluster/drain_node.py): which replicas it drains,
what it reports and how long it may take (no Ray started; what it assumes of Ray: test_ray_internals.py)."""

from __future__ import annotations

import argparse
import json

import pytest

from serving.cluster.drain_node import (
    ANSWER_MARGIN_S,
    CONNECT_MARGIN_S,
    CUT_GRACE_S,
    RAY_STOP_S,
    LocalReplica,
    add_drain_command,
    drain_node,
    local_replicas,
    prestop_budget_s,
    proxy_min_draining_s,
    proxy_wait_s,
    run,
)
from serving.errors import ClusterError
from tests.fakes import FakeClock

NODE = "node-a"
OTHER = "node-b"


class FakeCall:
    def __init__(self, clock: FakeClock, answer, takes_s: float = 0.0) -> None:
        self.clock, self.answer, self.takes_s = clock, answer, takes_s
        self.waited_for: float | None = None

    def result(self, timeout_s: float):
        self.waited_for = timeout_s
        self.clock.now += min(self.takes_s, timeout_s)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class FakeNode:
    """A fake of the Ray side: Serve's details, replicas that answer drain calls, a proxy
    that drains after ``proxy_drains_after`` polls (None: never; no proxy: ``has_proxy``)."""

    def __init__(self, clock: FakeClock, details, answers: dict[str, object], *, has_proxy: bool = True,
                 proxy_drains_after: int | None = 0, takes_s: float = 0.0) -> None:
        self.clock, self.details, self.answers = clock, details, answers
        self.has_proxy, self.proxy_drains_after, self.takes_s = has_proxy, proxy_drains_after, takes_s
        self.drained: list[tuple[str, str, float]] = []
        self.proxy_polls = 0
        self.proxy_draining = False

    def node_id(self) -> str:
        return NODE

    def serve_details(self):
        if isinstance(self.details, Exception):
            raise self.details
        return self.details

    def start_drain(self, app, replica: LocalReplica, timeout_s):
        self.drained.append((app, replica.actor_name, timeout_s))
        return FakeCall(self.clock, self.answers[replica.replica_id], self.takes_s)

    def drain_proxy(self) -> bool:
        self.proxy_draining = self.has_proxy
        return self.has_proxy

    def proxy_drained(self) -> bool:
        self.proxy_polls += 1
        return self.proxy_drains_after is not None and self.proxy_polls > self.proxy_drains_after


def _replica(replica_id: str, node: str, state: str = "RUNNING") -> dict:
    """One replica as Ray 2.60's own schema dumps it (``ReplicaDetails``)."""
    from ray.serve.schema import ReplicaDetails

    return ReplicaDetails(replica_id=replica_id, state=state, node_id=node, actor_name=f"SERVE_REPLICA::{replica_id}",
                          start_time_s=1.0).model_dump(mode="json")


def _details(**deployments: list[dict]) -> dict:
    """Serve instance details with the app ``serveout`` holding ``deployments``."""
    return {"applications": {"serveout": {"deployments": {
        name: {"replicas": replicas} for name, replicas in deployments.items()}}}}


def _report(in_flight: int, cut: int = 0, left: int = 0) -> dict:
    return {"in_flight": in_flight, "cut": cut, "left": left}


def test_only_running_replicas_of_the_deployment_on_this_node_are_drained():
    details = _details(engine=[_replica("e1", NODE), _replica("e2", OTHER), _replica("e3", NODE, "STOPPING"),
                               _replica("e4", NODE)],
                       router=[_replica("r1", NODE)])
    assert [r.replica_id for r in local_replicas(details, "serveout", "engine", NODE)] == ["e1", "e4"]
    assert local_replicas(details, "serveout", "gateway", NODE) == []
    assert local_replicas(details, "other-app", "engine", NODE) == []
    assert local_replicas({"applications": {}}, "serveout", "engine", NODE) == []


def test_the_schema_read_is_rays_own():
    """The field path local_replicas reads exists in Ray 2.60's Serve schema."""
    from ray.serve.schema import ApplicationDetails, DeploymentDetails, ReplicaDetails, ServeInstanceDetails

    assert "applications" in ServeInstanceDetails.model_fields
    assert "deployments" in ApplicationDetails.model_fields
    assert "replicas" in DeploymentDetails.model_fields
    assert {"replica_id", "state", "node_id", "actor_name"} <= ReplicaDetails.model_fields.keys()


def test_a_node_drain_drains_every_local_replica_and_the_proxy():
    clock = FakeClock(100.0)
    details = _details(engine=[_replica("e1", NODE), _replica("e2", NODE), _replica("e9", OTHER)])
    node = FakeNode(clock, details, {"e1": {"replica": "e1", "report": _report(5, cut=2)},
                                     "e2": {"replica": "e2", "report": _report(3, left=1)}}, proxy_drains_after=3)
    report = drain_node(node, "serveout", "engine", 30.0, clock=clock, sleep=clock.sleep)
    assert node.drained == [("serveout", "SERVE_REPLICA::e1", 30.0), ("serveout", "SERVE_REPLICA::e2", 30.0)]
    assert node.proxy_draining
    assert (report.replicas, report.failed, report.in_flight, report.cut, report.left) == (2, 0, 8, 2, 1)
    assert (report.proxy, node.proxy_polls) == ("drained", 4)
    line = json.loads(report.to_json())
    assert line["event"] == "node_drained" and line["in_flight"] == 8


def test_a_replica_already_draining_adds_no_report():
    clock = FakeClock(100.0)
    node = FakeNode(clock, _details(gateway=[_replica("g1", NODE), _replica("g2", NODE)]),
                    {"g1": {"replica": "g1", "report": None}, "g2": {"replica": "g2", "report": _report(4)}})
    report = drain_node(node, "serveout", "gateway", 10.0, clock=clock, sleep=clock.sleep)
    assert (report.replicas, report.failed, report.in_flight) == (2, 0, 4)


def test_a_failing_replica_call_is_counted_and_the_others_still_drain():
    clock = FakeClock(100.0)
    node = FakeNode(clock, _details(engine=[_replica("e1", NODE), _replica("e2", NODE)]),
                    {"e1": RuntimeError("actor died"), "e2": {"replica": "e2", "report": _report(2)}})
    report = drain_node(node, "serveout", "engine", 30.0, clock=clock, sleep=clock.sleep)
    assert (report.replicas, report.failed, report.in_flight, report.proxy) == (2, 1, 2, "drained")


def test_the_proxy_wait_ends_at_its_deadline():
    clock = FakeClock(100.0)
    node = FakeNode(clock, _details(engine=[]), {}, proxy_drains_after=None)
    report = drain_node(node, "serveout", "engine", 60.0, min_draining_s=30.0, clock=clock, sleep=clock.sleep)
    assert report.proxy == "deadline"
    assert report.elapsed_s == pytest.approx(proxy_wait_s(60.0, 30.0)) == pytest.approx(60.0 + CUT_GRACE_S)


def test_without_a_proxy_or_serve_there_is_nothing_to_wait_for():
    clock = FakeClock(100.0)
    node = FakeNode(clock, None, {}, has_proxy=False)
    report = drain_node(node, "serveout", "engine", 30.0, clock=clock, sleep=clock.sleep)
    assert (report.replicas, report.failed, report.proxy, node.proxy_polls, report.elapsed_s) == (0, 0, "none", 0, 0)


def test_unreadable_serve_details_count_as_a_failure():
    clock = FakeClock(100.0)
    node = FakeNode(clock, RuntimeError("controller unreachable"), {})
    report = drain_node(node, "serveout", "engine", 30.0, clock=clock, sleep=clock.sleep)
    assert (report.replicas, report.failed, report.proxy) == (0, 1, "drained")


def test_the_proxy_waits_at_least_its_own_draining_period():
    """A short drain still waits for Serve's proxy draining period (it reports drained only after it)."""
    assert proxy_wait_s(5.0, 30.0) == 30.0 + 5.0
    assert proxy_wait_s(600.0, 30.0) == 600.0 + CUT_GRACE_S


@pytest.mark.parametrize("timeout_s", [5.0, 30.0, 600.0])
def test_the_grace_period_covers_the_slowest_drain(timeout_s):
    """Replicas that answer as late as allowed and a proxy that never drains still end
    within the preStop budget, with room to join the cluster and run `ray stop`."""
    clock = FakeClock(100.0)
    node = FakeNode(clock, _details(engine=[_replica("e1", NODE)]),
                    {"e1": {"replica": "e1", "report": _report(1, cut=1)}}, proxy_drains_after=None,
                    takes_s=timeout_s + CUT_GRACE_S + ANSWER_MARGIN_S)
    report = drain_node(node, "serveout", "engine", timeout_s, clock=clock, sleep=clock.sleep)
    assert report.cut == 1
    assert CONNECT_MARGIN_S + report.elapsed_s + RAY_STOP_S <= prestop_budget_s(timeout_s)


def test_the_draining_period_comes_from_the_pods_environment():
    assert proxy_min_draining_s({}) == 30.0
    assert proxy_min_draining_s({"RAY_SERVE_PROXY_MIN_DRAINING_PERIOD_S": "12.5"}) == 12.5


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_drain_command(parser.add_subparsers(dest="command"))
    return parser.parse_args(["drain", *argv])


def test_run_prints_the_report_and_fails_on_a_failed_call(capsys):
    clock = FakeClock(100.0)
    failing = FakeNode(clock, _details(engine=[_replica("e1", NODE)]), {"e1": RuntimeError("x")}, has_proxy=False)
    args = _args("--local", "--deployment", "engine", "--timeout-s", "30")
    assert args.func is run
    assert run(args, node_factory=lambda: failing) == 1
    assert json.loads(capsys.readouterr().out)["failed"] == 1
    fine = FakeNode(clock, _details(engine=[]), {}, has_proxy=False)
    assert run(args, node_factory=lambda: fine) == 0


def test_run_without_a_cluster_says_so_in_one_line(capsys):
    def unreachable():
        raise ConnectionError("no Ray cluster on this node")

    assert run(_args("--local", "--deployment", "engine", "--timeout-s", "30"), node_factory=unreachable) == 1
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and json.loads(out)["event"] == "node_drain_failed"


def test_bad_arguments_are_refused():
    with pytest.raises(ClusterError, match="positive"):
        run(_args("--local", "--deployment", "engine", "--timeout-s", "0"), node_factory=lambda: None)
    with pytest.raises(SystemExit):
        _args("--deployment", "engine", "--timeout-s", "30")  # --local is required
