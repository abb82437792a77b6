"""Several real Ray nodes on one machine: a head and worker nodes, each a ``ray start
--block`` process on its own loopback address (127.0.0.2, 127.0.0.3, ...), as Ray's own
tests build clusters.

Each node has its own raylet, workers, CPUs, memory and ``slots`` of
:data:`SLOT_RESOURCE`, the resource that stands for a node's GPUs: an engine replica
takes one per tensor-parallel rank, in one node, as on a GPU cluster. The head holds
none by default (it runs Serve's controller, like the CPU head of the H200 stack), so
engines run on the worker nodes. Every node runs Serve's ingress (HAProxy + routers) on
the stack's port at its own address.

What one machine forces, and how it is met:

- Ray's gRPC servers bind all interfaces, so nodes share one port space: every port a
  node would take by default (the dashboard agent's, the client server's, the worker
  port range, HAProxy's stats and metrics ports) is chosen free and distinct per node.
- HAProxy binds Serve's ``http_options.host``; the launcher binds it to the node's own
  address instead (``SERVEOUT_NODE_IP``, :mod:`serving.cluster.haproxy_launch`), so each
  node's ingress has the same port, as on a real cluster.
- No node is on 127.0.0.1: Serve's HAProxy writes a target on its own node as
  127.0.0.1 and prefers the routers it finds there, so a node at 127.0.0.1 would have
  every node's ingress use its routers (and lose them all when it dies).
- Ray turns token authentication on by itself when ``~/.ray/auth_token`` exists; the
  nodes and the driver get an explicit mode and a token of their own.
- ``ray start`` refuses to start a head whose GCS address a raylet on the machine names
  (every worker node's does): a restarted head first forgets the address it recorded.

The head's GCS keeps its tables in RocksDB on disk (Ray's GCS fault tolerance, the role
of the external Redis on KubeRay): when the head dies (its ``ray start --block`` takes
the whole node down when its GCS process dies), :meth:`LocalNodes.restart` starts it
again on the same port from that store, in the same Ray session. Worker nodes, their
actors and Serve's replicas keep running meanwhile (a raylet waits up to 60 s for its
GCS), and Serve's controller is restarted on the new head from its checkpoint.

Stopping: SIGTERM to each ``ray start`` (it stops its node's processes), then SIGKILL of
whatever of the node's processes is left. Each ``ray start`` gets SIGTERM from the kernel
when the process that started it dies (the parent-death signal), and a process guard
(:class:`~serving.engine.process_guard.ProcessGuard`, in a session of its own) that has
noted every process below the starting process twice a second kills what a SIGTERMed
``ray start`` leaves (a node agent, or a node still starting): a killed ``serving up``
leaves no node behind.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from serving.engine.process_guard import ProcessGuard, descendants, die_with_parent, kill_noted, start_time
from serving.errors import ClusterError

SLOT_RESOURCE = "accelerator_slot"
"""The Ray resource standing for one accelerator (one tensor-parallel rank) of a node."""

WORKER_PORTS_PER_NODE = 400
FIRST_WORKER_PORT = 20000
"""Node k's Ray workers take ports [20000 + 400k, 20399 + 400k]: outside the default
range (10002-19999) of any single-node Ray on the machine, disjoint between nodes."""

OBJECT_STORE_BYTES = 150 * 1024 * 1024


@dataclass(frozen=True)
class NodesOptions:
    """The shape of a local multi-node cluster."""

    count: int = 3
    cpus_per_node: int | None = None  # None = the cores this process may run on
    slots_per_node: int = 1  # of SLOT_RESOURCE, on each worker node
    head_slots: int = 0

    def __post_init__(self) -> None:
        if not 2 <= self.count <= 8:
            raise ClusterError(f"a local cluster has 2 to 8 nodes, not {self.count}")


def node_ip(index: int) -> str:
    """Node ``index``'s loopback address: the head (0) is 127.0.0.2."""
    return f"127.0.0.{index + 2}"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port no process listens on now."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


@dataclass
class Node:
    """One started node: its index, address and ``ray start --block`` process."""

    index: int
    ip: str
    process: subprocess.Popen
    log: Path

    @property
    def head(self) -> bool:
        return self.index == 0


class LocalNodes:
    """Starts and stops the nodes of one local multi-node Ray cluster."""

    def __init__(self, options: NodesOptions, run_dir: Path) -> None:
        self.options = options
        self.run_dir = run_dir
        self.nodes: list[Node] = []
        self.gcs_port = 0
        self._token = run_dir / "auth_token"
        self.gcs_store = run_dir / "gcs-store"
        self._env: dict[str, str] = {}
        self._guard: ProcessGuard | None = None

    @property
    def address(self) -> str:
        return f"{node_ip(0)}:{self.gcs_port}"

    def driver_env(self) -> dict[str, str]:
        """What a driver of this cluster needs in its environment (before ``ray.init``)."""
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self._token)}

    def start(self, env: dict[str, str], timeout_s: float = 180) -> None:
        """Start the head, then the worker nodes; returns once the head's GCS answers
        (the workers join on their own; :meth:`wait_joined` waits for them)."""
        self._env = env
        # However this process ends (SIGKILL included), every process started below it
        # goes with it: a SIGTERMed `ray start` may leave a node agent behind, and one
        # that was still starting, more.
        self._guard = ProcessGuard()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._token.write_text(secrets.token_hex(32))
        self._token.chmod(0o600)
        self.gcs_port = free_port()
        self._start_head(timeout_s)
        for index in range(1, self.options.count):
            self.nodes.append(self._start_node(index, env))

    def wait_joined(self, alive_nodes, timeout_s: float = 300, attempts: int = 3) -> None:
        """Wait until ``alive_nodes()`` (the addresses Ray lists alive) has every node. A
        worker node whose ``ray start`` gave up is started again, ``attempts`` times in
        all (Ray gives a raylet 30 s to register, which a busy machine can miss)."""
        deadline = time.monotonic() + timeout_s
        wanted = {node.ip for node in self.nodes}
        tries = {node.index: 1 for node in self.nodes}
        while not wanted <= set(alive_nodes()):
            for node in list(self.nodes):
                if node.process.poll() is None:
                    continue
                if node.head or tries[node.index] >= attempts:
                    raise ClusterError(f"node {node.ip} stopped while starting: {_tail(node.log)}")
                tries[node.index] += 1
                self.nodes[node.index] = self._start_node(node.index, self._env)
            if time.monotonic() > deadline:
                raise ClusterError(f"nodes {sorted(wanted - set(alive_nodes()))} did not join in {timeout_s:.0f} s")
            time.sleep(0.5)

    def restart(self, index: int, timeout_s: float = 180) -> None:
        """Start node ``index`` again (after it died), with the same address: a replaced
        machine rejoining the cluster. The head comes back on the same GCS port from its
        store; this returns once its GCS answers. Call it from a thread that lives as
        long as the cluster: the node's parent-death signal follows the starting thread."""
        node = self.nodes[index]
        if node.process.poll() is None:
            raise ClusterError(f"node {node.ip} is still running")
        if node.head:
            (self.run_dir / "node0" / "ray_current_cluster").unlink(missing_ok=True)
            self._start_head(timeout_s)
        else:
            self.nodes[index] = self._start_node(index, self._env)

    def gcs_pid(self) -> int:
        """The PID of the head's GCS server process."""
        head = self.nodes[0]
        for pid in descendants(head.process.pid):
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(b"gcs_server"):
                    return pid
            except OSError:
                continue
        raise ClusterError("the head node runs no GCS server")

    def _start_head(self, timeout_s: float) -> None:
        head = self._start_node(0, {**self._env, "RAY_gcs_storage": "rocksdb",
                                    "RAY_gcs_storage_path": str(self.gcs_store)})
        if self.nodes:
            self.nodes[0] = head
        else:
            self.nodes.append(head)
        deadline = time.monotonic() + timeout_s
        while not _accepts(node_ip(0), self.gcs_port):
            if head.process.poll() is not None or time.monotonic() > deadline:
                raise ClusterError(f"the head node did not start: {_tail(head.log)}")
            time.sleep(0.2)

    def _command(self, index: int) -> list[str]:
        opts = self.options
        cpus = opts.cpus_per_node or len(os.sched_getaffinity(0))
        slots = opts.head_slots if index == 0 else opts.slots_per_node
        low = FIRST_WORKER_PORT + WORKER_PORTS_PER_NODE * index
        ray = Path(sys.executable).with_name("ray")
        command = [str(ray) if ray.is_file() else shutil.which("ray") or "ray", "start", "--block",
                   "--disable-usage-stats", f"--node-ip-address={node_ip(index)}", f"--num-cpus={cpus}",
                   f"--resources={json.dumps({SLOT_RESOURCE: slots} if slots else {})}",
                   f"--object-store-memory={OBJECT_STORE_BYTES}",
                   f"--dashboard-agent-listen-port={free_port()}",
                   f"--min-worker-port={low}", f"--max-worker-port={low + WORKER_PORTS_PER_NODE - 1}",
                   f"--temp-dir={self.run_dir / f'node{index}'}"]
        if index == 0:
            return command + ["--head", f"--port={self.gcs_port}", "--include-dashboard=false",
                              f"--ray-client-server-port={free_port()}"]
        return command + [f"--address={self.address}"]

    def _start_node(self, index: int, env: dict[str, str]) -> Node:
        node_env = {**env, **self.driver_env(),
                    "SERVEOUT_NODE_IP": node_ip(index),
                    "RAY_SERVE_HAPROXY_STATS_PORT": str(free_port()),
                    "RAY_SERVE_HAPROXY_METRICS_PORT": str(free_port())}
        log = self.run_dir / f"node{index}.log"
        with log.open("ab") as out:
            process = subprocess.Popen(self._command(index), env=node_env, stdout=out, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL,
                                       preexec_fn=functools.partial(die_with_parent, signal.SIGTERM))
        return Node(index, node_ip(index), process, log)

    def processes(self, node: Node) -> list[int]:
        """The PIDs of ``node``'s ``ray start`` and every process below it."""
        return [node.process.pid, *descendants(node.process.pid)]

    def stop(self, timeout_s: float = 30) -> None:
        """Stop every node (workers first) and whatever of their processes is left."""
        noted = {(pid, start_time(pid)) for node in self.nodes for pid in self.processes(node)}
        for node in reversed(self.nodes):
            if node.process.poll() is None:
                node.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for node in self.nodes:
            try:
                node.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait()
        kill_noted(noted)
        self.nodes.clear()
        if self._guard is not None:
            self._guard.close()
            self._guard = None


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
