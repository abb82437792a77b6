"""The local multi-node cluster's plan: addresses, ports and resources per node (pure;
the real nodes run in tests/integration/test_cli.py)."""

import json
from pathlib import Path

import pytest

from serving.cluster.nodes import (FIRST_WORKER_PORT, SLOT_RESOURCE, WORKER_PORTS_PER_NODE, LocalNodes,
                                   NodesOptions, node_ip)
from serving.errors import ClusterError


def _flags(command: list[str]) -> dict[str, str]:
    return dict(arg[2:].split("=", 1) for arg in command if arg.startswith("--") and "=" in arg)


@pytest.fixture
def nodes(tmp_path) -> LocalNodes:
    nodes = LocalNodes(NodesOptions(count=3, cpus_per_node=2, slots_per_node=4), tmp_path)
    nodes.gcs_port = 50123
    return nodes


def test_each_node_has_its_own_loopback_address_the_head_first_and_none_is_localhost():
    assert [node_ip(i) for i in range(3)] == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]


@pytest.mark.parametrize("count", [0, 1, 9])
def test_a_cluster_has_two_to_eight_nodes(count):
    with pytest.raises(ClusterError, match="2 to 8 nodes"):
        NodesOptions(count=count)


def test_the_head_holds_no_accelerator_slot_and_the_workers_join_it(nodes, tmp_path):
    head, worker = _flags(nodes._command(0)), _flags(nodes._command(1))
    assert "--head" in nodes._command(0) and head["port"] == "50123"
    assert json.loads(head["resources"]) == {} and json.loads(worker["resources"]) == {SLOT_RESOURCE: 4}
    assert worker["address"] == "127.0.0.2:50123" and worker["node-ip-address"] == "127.0.0.3"
    assert head["num-cpus"] == worker["num-cpus"] == "2"
    assert Path(worker["temp-dir"]) == tmp_path / "node1"


def test_no_two_nodes_share_a_port_or_a_worker_port(nodes):
    flags = [_flags(nodes._command(i)) for i in range(3)]
    agents = {f["dashboard-agent-listen-port"] for f in flags}
    assert len(agents) == 3
    ranges = [range(int(f["min-worker-port"]), int(f["max-worker-port"]) + 1) for f in flags]
    assert ranges[0].start == FIRST_WORKER_PORT and all(len(r) == WORKER_PORTS_PER_NODE for r in ranges)
    assert all(a.stop <= b.start for a, b in zip(ranges, ranges[1:]))  # disjoint, above Ray's 10002-19999


def test_the_driver_uses_the_clusters_own_token(nodes, tmp_path):
    assert nodes.driver_env() == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(tmp_path / "auth_token")}


def test_a_running_node_is_not_restarted(nodes):
    class FakeProcess:  # a fake Popen: still running
        pid = 1

        def poll(self):
            return None

    from serving.cluster.nodes import Node

    nodes.nodes = [Node(0, node_ip(0), FakeProcess(), Path("x")), Node(1, node_ip(1), FakeProcess(), Path("y"))]
    for index in (0, 1):
        with pytest.raises(ClusterError, match="still running"):
            nodes.restart(index)


def test_the_head_keeps_its_gcs_tables_on_disk_and_a_restart_forgets_the_address_ray_recorded(nodes, monkeypatch):
    class FakeProcess:  # a fake Popen: ended
        pid = 1

        def poll(self):
            return 0

    from serving.cluster.nodes import Node

    started: list[tuple[int, dict]] = []
    monkeypatch.setattr(nodes, "_start_node", lambda index, env: started.append((index, env)) or
                        Node(index, node_ip(index), FakeProcess(), Path("x")))
    monkeypatch.setattr("serving.cluster.nodes._accepts", lambda host, port: (host, port) == ("127.0.0.2", 50123))
    recorded = nodes.run_dir / "node0" / "ray_current_cluster"
    recorded.parent.mkdir(parents=True)
    recorded.write_text("127.0.0.2:50123")
    nodes.nodes = [Node(0, node_ip(0), FakeProcess(), Path("x")), Node(1, node_ip(1), FakeProcess(), Path("y"))]
    nodes.restart(0)
    assert not recorded.exists()  # else `ray start` refuses: a worker's raylet names this GCS address
    (index, env), = started
    assert index == 0 and env["RAY_gcs_storage"] == "rocksdb"
    assert env["RAY_gcs_storage_path"] == str(nodes.run_dir / "gcs-store")
    nodes.restart(1)
    assert started[-1][0] == 1 and "RAY_gcs_storage" not in started[-1][1]
