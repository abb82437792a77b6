"""The Ray Serve settings every Ray process of a rendered cluster starts with.

Serve reads them once, at import, in every process (the controller, each node's proxy
manager, the replicas), so they go into the environment of every Ray container (head,
engine workers, gateway pods) and, for bare VMs, into ``ray-env.sh``, which
``deploy/bare-metal/launch.sh`` sources before ``ray start``. They are the local stack's
(:func:`serving.cluster.ingress_env.direct_ingress_env`: Serve's HAProxy ingress, the router
asked about every POST with its body, retries of a request a replica refused before its
first byte), with three values set for the cluster:

* ``RAY_SERVE_INGRESS_ROUTER_REPLICAS_PER_NODE`` and ``RAY_SERVE_HAPROXY_NBTHREAD`` from
  the target's peak (:func:`.sizing.plan_front_end`; without a peak, two routers per node
  and the local stack's threads for the pod's cores);
* ``RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S``: HAProxy reloads whenever a replica starts or
  stops, and a reloaded process that still carries streams is killed this long after the
  reload (Serve's default 120 s). Here it is the longest a request may run
  (``gateway.request_timeout_s``, or ``drain.timeout_s`` if longer) plus a margin, so a
  scale change never cuts a stream before its own deadline.

and one added: ``RAY_SERVE_HAPROXY_BINARY_PATH`` names ``serveout-haproxy``
(:mod:`serving.cluster.haproxy_launch`: HAProxy's own errors as OpenAI bodies, HAProxy
dying with the Serve actor that started it), where the images install it; ``ray-env.sh``
looks it up on the VM's ``PATH``.

The same settings serve both gateway modes: the separate mode runs behind HAProxy too
(its gateway replicas are the ingress), as ``serving up`` runs it.
"""

from __future__ import annotations

import shlex

from serving.config.stack import StackConfig
from serving.cluster.ingress_env import HARD_STOP_ENV, direct_ingress_env, hard_stop_after
from serving.manifests.sizing import FrontEndSizing

ROUTERS_ENV = "RAY_SERVE_INGRESS_ROUTER_REPLICAS_PER_NODE"
THREADS_ENV = "RAY_SERVE_HAPROXY_NBTHREAD"
LAUNCHER_ENV = "RAY_SERVE_HAPROXY_BINARY_PATH"
IMAGE_LAUNCHER = "/usr/local/bin/serveout-haproxy"
"""The launcher's command in serveout's images (pip installs console scripts there)."""


def ray_serve_env(config: StackConfig, plan: FrontEndSizing, pod_cpus: int) -> dict[str, str]:
    """The Serve settings of a Ray process on a pod (or VM) with ``pod_cpus`` cores."""
    env = direct_ingress_env(pod_cpus, hard_stop_after(config))
    env[ROUTERS_ENV] = str(plan.routers_per_node)
    if plan.haproxy_threads is not None:
        env[THREADS_ENV] = str(min(plan.haproxy_threads, pod_cpus))
    env[LAUNCHER_ENV] = IMAGE_LAUNCHER
    return env


def container_env(config: StackConfig, plan: FrontEndSizing, pod_cpus: int) -> list[dict]:
    """:func:`ray_serve_env` as a container's ``env`` entries."""
    return [{"name": name, "value": value} for name, value in ray_serve_env(config, plan, pod_cpus).items()]


def env_script(config: StackConfig, plan: FrontEndSizing, vm_cpus: int) -> str:
    """``ray-env.sh`` for bare VMs: the same settings as shell exports (``launch.sh``
    sources it with ``RAY_ENV=ray-env.sh`` before ``ray start`` on every VM)."""
    lines = [f"export {name}={shlex.quote(value)}" for name, value in ray_serve_env(config, plan, vm_cpus).items()
             if name != LAUNCHER_ENV]
    lines.append(f'export {LAUNCHER_ENV}="$(command -v serveout-haproxy)"  # empty: Serve\'s own HAProxy')
    return "\n".join(lines) + "\n"
