"""A local Ray cluster owned by this process, with Serve and one serveout app.

Used by ``serving up``, the integration tests and the sweep. It starts Ray on
loopback in its own temp dir (one node, or several real nodes on loopback addresses:
:mod:`serving.cluster.nodes`), deploys with :func:`serving.app_builder.build_app`,
waits until the gateway answers ``/health``, and on shutdown removes everything it
started (``serve.shutdown`` + ``ray.shutdown``; never ``ray stop``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from serving import ray_internals
from serving.config.stack import StackConfig
from serving.errors import ClusterError
from serving.cluster.haproxy_launch import NODE_IP_ENV
from serving.cluster.ingress_env import DEFAULT_HARD_STOP_AFTER_S, apply_direct_ingress_env, haproxy_launcher
from serving.cluster.nodes import LocalNodes, NodesOptions, node_ip
from serving.cluster.pickle_by_value import count_by_value_registrations

logger = logging.getLogger("serveout")

WILDCARD_HOSTS = ("0.0.0.0", "::", "")


@dataclass(frozen=True)
class ClusterOptions:
    num_cpus: int | None = None  # None = the cores this process may run on (per node)
    log_to_driver: bool = False
    http_host: str = "127.0.0.1"
    http_port: int = 8000
    hard_stop_after_s: int = DEFAULT_HARD_STOP_AFTER_S
    nodes: int = 1  # > 1: a head and nodes - 1 worker nodes (serving.cluster.nodes)
    slots_per_node: int = 1  # accelerator slots of each worker node (nodes > 1)


class LocalCluster:
    """Owns one local Ray cluster and Serve instance (use as a context manager)."""

    def __init__(self, options: ClusterOptions = ClusterOptions()) -> None:
        self.options = options
        self._temp_dir: Path | None = None
        self._started = False
        self._deployed: dict[str, StackConfig] = {}
        self.nodes: LocalNodes | None = None
        self._saved_env: dict[str, str | None] = {}

    @property
    def url(self) -> str:
        host = node_ip(0) if self.nodes is not None else self.options.http_host
        return f"http://{host}:{self.options.http_port}"

    @property
    def ingress_urls(self) -> list[str]:
        """Every node's ingress (one node: :attr:`url`)."""
        if self.nodes is None:
            return [self.url]
        return [f"http://{node.ip}:{self.options.http_port}" for node in self.nodes.nodes]

    def node_records(self) -> list[dict]:
        """Each node's address, ingress URL and ``ray start`` PID (one node: [])."""
        if self.nodes is None:
            return []
        return [{"ip": node.ip, "url": url, "pid": node.process.pid, "head": node.head}
                for node, url in zip(self.nodes.nodes, self.ingress_urls)]

    def _set_env(self, values: dict[str, str | None]) -> None:
        """Set (None: unset) environment variables, restored at :meth:`shutdown`."""
        for name, value in values.items():
            self._saved_env.setdefault(name, os.environ.get(name))
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    def start(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        num_cpus = self.options.num_cpus or len(os.sched_getaffinity(0))
        apply_direct_ingress_env(num_cpus, self.options.hard_stop_after_s)
        self._temp_dir = Path(tempfile.mkdtemp(prefix="serveout-ray-"))
        if self.options.nodes > 1:  # Ray reads its authentication settings once, at import
            self.nodes = LocalNodes(NodesOptions(count=self.options.nodes, cpus_per_node=num_cpus,
                                                 slots_per_node=self.options.slots_per_node), self._temp_dir / "nodes")
            self._set_env({NODE_IP_ENV: None, **self.nodes.driver_env()})

        import ray
        from ray import serve

        if (warning := ray_internals.version_warning()) is not None:
            logger.warning(warning)
        count_by_value_registrations()  # serve.run beside a handle in this process
        os.environ.setdefault("RAY_SERVE_HAPROXY_BINARY_PATH", str(haproxy_launcher()))
        if self.nodes is not None:
            http_options = self._start_nodes()
        else:
            host = self.options.http_host
            # HAProxy's stats and metrics listeners on the stack's own address too.
            self._set_env({NODE_IP_ENV: None if host in WILDCARD_HOSTS else host})
            ray.init(num_cpus=num_cpus, _node_ip_address="127.0.0.1", _temp_dir=str(self._temp_dir),
                     include_dashboard=False, log_to_driver=self.options.log_to_driver, namespace="serveout")
            http_options = {"host": host, "port": self.options.http_port}
        self._started = True
        serve.start(http_options=http_options, logging_config={"enable_access_log": False})

    def _start_nodes(self) -> dict:
        """Start the nodes and connect to them; Serve's HTTP options for them. Serve's
        host is every interface: each node's HAProxy binds its own address (the
        launcher), and the replicas, reached by the node address from other nodes'
        HAProxies, must listen on it."""
        import ray

        try:
            self.nodes.start(dict(os.environ))
            self._connect(timeout_s=180)
            self._started = True
            self.nodes.wait_joined(lambda: [n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]])
        except BaseException:
            self.shutdown()
            raise
        return {"host": "0.0.0.0", "port": self.options.http_port, "location": "EveryNode"}

    def _connect(self, timeout_s: float) -> None:
        """``ray.init`` to the head, retried while its raylet is not registered yet (the
        GCS answers first: Ray then finds no node at the head's address)."""
        import ray

        deadline = time.monotonic() + timeout_s
        while True:
            try:
                ray.init(address=self.nodes.address, _node_ip_address=node_ip(0),
                         log_to_driver=self.options.log_to_driver, namespace="serveout")
                return
            except ConnectionError as exc:
                ray.shutdown()
                if time.monotonic() > deadline or self.nodes.nodes[0].process.poll() is not None:
                    raise ClusterError(f"could not connect to the head node: {exc.__cause__ or exc}") from exc
                time.sleep(1.0)

    def restart_head(self, timeout_s: float = 180) -> None:
        """Start the head node again after it died (its GCS recovers the cluster from its
        store; worker nodes and replicas kept running) and reconnect this driver, which
        was attached to the dead head's raylet."""
        import ray

        if self.nodes is None:
            raise ClusterError("only a cluster of several nodes restarts its head")
        with _quiet_expected_shutdown_errors():
            ray.shutdown()
        self.nodes.restart(0, timeout_s)
        self._connect(timeout_s)

    def replace_dead_nodes(self) -> list[str]:
        """Start again every node whose ``ray start`` has ended, as Kubernetes replaces a
        pod (the head from its GCS store: :meth:`restart_head`); the addresses of the
        nodes started."""
        if self.nodes is None:
            return []
        dead = [node for node in self.nodes.nodes if node.process.poll() is not None]
        for node in dead:
            if node.head:
                self.restart_head()
            else:
                self.nodes.restart(node.index)
        return [node.ip for node in dead]

    def deploy(self, config: StackConfig, *, timeout_s: float = 900,
               on_progress: Callable[[str], None] = lambda _: None) -> str:
        """Deploy ``config`` and wait until the gateway is healthy; returns its URL."""
        from ray import serve

        from serving.app_builder import build_app

        failure: list[BaseException] = []

        def run() -> None:
            try:
                # No access log line per request in the replicas (it costs CPU on the
                # request path; serveout logs one structured line per request itself).
                serve.run(build_app(config), name=config.app_name, route_prefix="/",
                          logging_config={"enable_access_log": False})
            except BaseException as exc:  # reported below, in the caller's thread
                failure.append(exc)

        runner = threading.Thread(target=run, name="serve-run", daemon=True)
        runner.start()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if failure:
                reason = self._failure_reason(config.app_name)
                raise ClusterError(f"deploying {config.app_name} failed: {failure[0]}"
                                   + (f" ({reason})" if reason else ""))
            on_progress(self._describe(config.app_name))
            if not runner.is_alive() and self._healthy(config):
                self._deployed[config.app_name] = config
                return self.url
            time.sleep(1.0)
        raise ClusterError(f"{config.app_name} was not healthy after {timeout_s:.0f} s")

    def undeploy(self, app_name: str) -> None:
        from ray import serve

        self._deployed.pop(app_name, None)
        serve.delete(app_name)

    def _healthy(self, config: StackConfig) -> bool:
        """On every node's ingress, ``/health`` answers 200, and in the direct mode a POST
        gets through the router to a replica (``/tokenize``: 200, or 401 when keys are on)."""
        try:
            for url in self.ingress_urls:
                if httpx.get(f"{url}/health", timeout=5).status_code != 200:
                    return False
                if not config.gateway.direct:
                    continue
                routed = httpx.post(f"{url}/tokenize", json={"model": config.model.name, "prompt": "ping"},
                                    timeout=5)
                if routed.status_code not in (200, 401):
                    return False
            return True
        except httpx.HTTPError:
            return False

    def _failure_reason(self, app_name: str) -> str:
        """The exception line of a failed replica's traceback, as Serve recorded it."""
        from ray import serve

        try:
            app = serve.status().applications.get(app_name)
        except Exception:
            return ""
        if app is None:
            return ""
        text = "\n".join(d.message for d in app.deployments.values() if d.message) or app.message
        return last_exception_line(text)

    def _describe(self, app_name: str) -> str:
        from ray import serve

        try:
            app = serve.status().applications.get(app_name)
        except Exception:
            return "starting Serve"
        if app is None:
            return "submitting the application"
        parts = []
        for name, dep in app.deployments.items():
            states = ", ".join(f"{n} {str(getattr(s, 'value', s)).lower()}"
                               for s, n in dep.replica_states.items())
            parts.append(f"{name}: {states or dep.status.value.lower()}")
        return "; ".join(parts) or app.status.value.lower()

    def shutdown(self) -> None:
        if self._started:
            import ray
            from ray import serve

            try:
                for config in self._deployed.values():
                    self._drain(config)
                with _quiet_expected_shutdown_errors():
                    serve.shutdown()
            finally:
                with _quiet_expected_shutdown_errors():
                    ray.shutdown()
                self._started = False
        if self.nodes is not None:
            self.nodes.stop()
            self.nodes = None
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_env.clear()
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

    def _drain(self, config: StackConfig) -> None:
        """Let the app's requests in flight finish (up to its drain timeout) before Serve
        stops: ``serve.shutdown`` would cut every open stream at once."""
        from serving.gateway.separate import drain_gateway

        try:
            report = drain_gateway(config)
            logger.info("drained %s: %s", config.app_name, report)
        except Exception as exc:  # noqa: BLE001 - shutting down regardless
            logger.warning("draining %s failed: %s", config.app_name, exc)

    def __enter__(self) -> "LocalCluster":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


EXPECTED_SHUTDOWN_NOISE = re.compile(r"Task ServeController\.\w+ failed\..*killed by `ray\.kill`")
"""What Ray prints when Serve's controller ends itself at ``serve.shutdown`` (its pending
calls see the actor die): expected, not a fault."""


class _ShutdownFilter(io.TextIOBase):
    """Forwards writes to ``target``, dropping the lines :data:`EXPECTED_SHUTDOWN_NOISE` matches."""

    def __init__(self, target) -> None:
        self._target = target

    def write(self, text: str) -> int:
        kept = "".join(line for line in text.splitlines(keepends=True) if not EXPECTED_SHUTDOWN_NOISE.search(line))
        if kept:
            self._target.write(kept)
        return len(text)

    def flush(self) -> None:
        self._target.flush()


@contextlib.contextmanager
def _quiet_expected_shutdown_errors():
    """Ray's driver prints error messages from the cluster on stdout (a listener thread);
    while Serve shuts down, drop the expected ones, pass everything else."""
    original = sys.stdout
    sys.stdout = _ShutdownFilter(original)
    try:
        yield
    finally:
        sys.stdout = original


def last_exception_line(text: str) -> str:
    """The last ``SomeError: message`` of a traceback with its detail lines (or the
    text's last line), shortened to one line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    starts = [i for i, line in enumerate(lines) if re.match(r"^[\w.]*(Error|Exception)\b", line)]
    if not starts:
        return lines[-1][:400] if lines else ""
    detail = lines[starts[-1]:starts[-1] + 3]  # pydantic puts the reason on the next lines
    detail = [re.sub(r"\s*\[type=.*$", "", d) for d in detail  # drop pydantic's input dump
              if not d.startswith(("File ", "For further information"))]
    return " ".join(detail)[:400]
