"""The Ray Serve config file of a deployment: what ``serve deploy`` and KubeRay's
``serveConfigV2`` both take (Ray's ``ServeDeploySchema``).

One application, built on the cluster by ``serving.app_builder:app_from_args``
from the whole :class:`StackConfig` as plain JSON data, so the cluster runs
exactly the config that was rendered.

The engine deployment's replica options are also stated in the file
(``deployments:``), exactly as the app builder sets them: ``autoscaling_config``
with serveout's queue-depth policy (:mod:`serving.autoscaling.queue_depth`) when autoscaling is
on, else ``num_replicas``, so the scaling Serve applies is visible in the file
KubeRay posts, next to the worker group's bounds. A unit test pins them to the app
builder's. (Serve's code version hashes ``args`` and the policy, so re-rendering a
changed config restarts the engines either way.)
"""

from __future__ import annotations

import ipaddress

from serving.autoscaling.queue_depth import policy_kwargs
from serving.config.stack import StackConfig
from serving.errors import ConfigError
from serving.manifests.naming import ENGINE_DEPLOYMENT

IMPORT_PATH = "serving.app_builder:app_from_args"
ROUTE_PREFIX = "/"
QUEUE_DEPTH_POLICY = "serving.autoscaling.queue_depth.QueueDepthPolicy"
"""Import path of the Serve autoscaling policy, as Serve records it (``module.Class``)."""
TREND_POLICY = "serving.autoscaling.trend.TrendPolicy"
"""The same with ``trend_horizon_s`` set (it looks ahead along the queue's trend)."""


def serve_application(config: StackConfig) -> dict:
    """The Serve application entry: import path, route and the StackConfig as ``args``."""
    return {
        "name": config.app_name,
        "route_prefix": ROUTE_PREFIX,
        "import_path": IMPORT_PATH,
        "args": config.model_dump(mode="json"),
        "deployments": [engine_replica_options(config)],
    }


def engine_replica_options(config: StackConfig) -> dict:
    """The engine deployment's replica count or Serve ``autoscaling_config`` (plain data).

    Mirrors :func:`serving.autoscaling.queue_depth.autoscaling_config` without importing Ray.
    """
    scaling = config.autoscaling
    if not scaling.enabled:
        return {"name": ENGINE_DEPLOYMENT, "num_replicas": config.replicas.num_replicas}
    return {"name": ENGINE_DEPLOYMENT, "autoscaling_config": {
        "min_replicas": scaling.min_replicas,
        "initial_replicas": max(scaling.min_replicas, 1),
        "max_replicas": scaling.max_replicas,
        "target_ongoing_requests": scaling.target_queue_per_replica,
        "upscale_delay_s": scaling.upscale_delay_s,
        "downscale_delay_s": scaling.downscale_delay_s,
        "downscale_to_zero_delay_s": scaling.downscale_delay_s,
        "look_back_period_s": scaling.look_back_period_s,
        "metrics_interval_s": scaling.metrics_interval_s,
        "policy": _policy(scaling),
    }}


def _policy(scaling) -> dict:
    function = TREND_POLICY if scaling.trend_horizon_s > 0 else QUEUE_DEPTH_POLICY
    return {"policy_function": function, "policy_kwargs": policy_kwargs(scaling)}


def render_serve_config(config: StackConfig) -> dict:
    """A Serve config file (multi-application schema) with this deployment's one application.

    The proxies listen on ``config.gateway.host:port`` on every node that runs a
    replica (plus the head); on a cluster the host must not be loopback.
    """
    _require_reachable_host(config.gateway.host)
    return {
        "proxy_location": "EveryNode",
        "http_options": {"host": config.gateway.host, "port": config.gateway.port},
        "logging_config": {"enable_access_log": False},
        "applications": [serve_application(config)],
    }


def _require_reachable_host(host: str) -> None:
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if loopback:
        raise ConfigError(
            f"gateway.host is {host}: on a cluster the Serve proxies must listen on an "
            f"address other nodes and Kubernetes Services reach (use 0.0.0.0)"
        )
