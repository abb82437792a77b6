"""The Ray Serve config file of a deployment: what ``serve deploy`` and KubeRay's
``serveConfigV2`` both take (Ray's ``ServeDeploySchema``).

One application, built on the cluster by ``serving.app_builder:app_from_args``
from the whole :class:`StackConfig` as plain JSON data, so the cluster runs
exactly the config that was rendered (no second set of options to keep in step).
"""

from __future__ import annotations

import ipaddress

from serving.config.stack import StackConfig
from serving.errors import ConfigError

IMPORT_PATH = "serving.app_builder:app_from_args"
ROUTE_PREFIX = "/"


def serve_application(config: StackConfig) -> dict:
    """The Serve application entry: import path, route and the StackConfig as ``args``."""
    return {
        "name": config.app_name,
        "route_prefix": ROUTE_PREFIX,
        "import_path": IMPORT_PATH,
        "args": config.model_dump(mode="json"),
    }


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
