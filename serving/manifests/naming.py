"""Names, labels and ports shared by every rendered object.

Everything here derives from the :class:`StackConfig` alone, so the RayService,
the scrape configs, the alert rules and the dashboard agree on names without
passing strings around.
"""

from __future__ import annotations

import re

from serving.config.stack import ENGINE_DEPLOYMENT, StackConfig
from serving.errors import ConfigError

GATEWAY_DEPLOYMENT = "gateway"
"""Serve deployment name of the separate mode's gateways (``serving.app_builder.GATEWAY_DEPLOYMENT``)."""

METRICS_PORT = 8080
"""Ray's metrics export port on every node (KubeRay's default, port name ``metrics``)."""
GCS_PORT = 6379
DASHBOARD_PORT = 8265
CLIENT_PORT = 10001
SERVE_PORT_NAME = "serve"
"""KubeRay builds the Serve Service from the head container port with this name."""
METRICS_PORT_NAME = "metrics"

GATEWAY_RESOURCE = "serveout_gateway"
"""The custom Ray resource only the gateway pods offer: each gateway replica asks for one
(``gateway.ray_resources``, set by ``serving render`` for a target with ``gateways:``), so
Ray places gateway replicas on those pods alone, and a pending one makes KubeRay's
autoscaler add a gateway pod. ``deploy/bare-metal/launch.sh`` offers it too (``GATEWAYS=N``)."""

MAX_NAME_LENGTH = 40
"""KubeRay derives longer names from the RayService's (cluster, pods, services,
label values capped at 63 characters), so the base name stays short."""

PART_OF = "serveout"


def dns_label(text: str) -> str:
    """``text`` in lower case with every run of other characters than ``a-z0-9`` one ``-``."""
    return re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9-]", "-", text.lower())).strip("-")


def resource_name(config: StackConfig) -> str:
    """The RayService name: ``<app_name>-<model name>`` as a DNS-1035 label.

    ``serveout`` + ``llama-3.3-70b-instruct`` -> ``serveout-llama-3-3-70b-instruct``.
    """
    name = dns_label(f"{config.app_name}-{config.model.name}")
    if not name or not name[0].isalpha():
        name = f"so-{name}"
    if len(name) > MAX_NAME_LENGTH:
        raise ConfigError(
            f"resource name {name!r} is longer than {MAX_NAME_LENGTH} characters; "
            f"use a shorter app_name"
        )
    return name


def gateway_service_name(config: StackConfig) -> str:
    """The Kubernetes Service in front of the Serve proxies (the gateway's HTTP port)."""
    return f"{resource_name(config)}-gateway"


def drained_deployment(config: StackConfig) -> str:
    """The deployment whose replicas hold the gateway (and have ``drain``): the engines in
    the direct mode, the gateways in the separate mode."""
    return ENGINE_DEPLOYMENT if config.gateway.direct else GATEWAY_DEPLOYMENT


def engine_deployment_label(config: StackConfig) -> str:
    """The ``deployment`` label of the routing and engine metrics (set by the app builder)."""
    return f"{config.app_name}:{ENGINE_DEPLOYMENT}"


def common_labels(config: StackConfig, component: str | None = None) -> dict[str, str]:
    """Kubernetes recommended labels for an object of this deployment."""
    labels = {
        "app.kubernetes.io/name": PART_OF,
        "app.kubernetes.io/instance": resource_name(config),
        "app.kubernetes.io/part-of": PART_OF,
    }
    if component:
        labels["app.kubernetes.io/component"] = component
    return labels


def selector_labels(config: StackConfig, component: str | None = None) -> dict[str, str]:
    """The labels a monitor selects pods by (a stable subset of :func:`common_labels`)."""
    labels = {"app.kubernetes.io/instance": resource_name(config)}
    if component:
        labels["app.kubernetes.io/component"] = component
    return labels


HEAD_COMPONENT = "ray-head"
WORKER_COMPONENT = "engine-worker"
GATEWAY_COMPONENT = "gateway"
GATEWAY_WORKER_COMPONENT = "gateway-worker"
