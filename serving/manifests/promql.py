"""PromQL label selectors of one deployment, shared by alerts and dashboard.

The gateway labels its own metrics with ``model`` (the served model name) and the
routing/engine metrics with ``deployment`` (``<app_name>:engine``); Ray's node
metrics get a ``rayservice`` label from the scrape config's relabelling
(:mod:`serving.manifests.prometheus`).
"""

from __future__ import annotations

from dataclasses import dataclass

from serving.config.stack import StackConfig
from serving.manifests.naming import engine_deployment_label, resource_name

RAYSERVICE_LABEL = "rayservice"
"""Target label naming the RayService a Ray node belongs to (added by relabelling)."""


def matchers(**labels: str) -> str:
    """``{a="x",b="y"}`` with values escaped for PromQL string literals."""
    body = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return "{" + body + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


@dataclass(frozen=True)
class Selectors:
    """Label selectors for the series of one deployment."""

    model: str
    deployment: str
    rayservice: str

    @classmethod
    def of(cls, config: StackConfig) -> "Selectors":
        return cls(config.model.name, engine_deployment_label(config), resource_name(config))

    def gateway(self, **extra: str) -> str:
        """Gateway metrics (``serveout_requests_total`` and friends) of this model."""
        return matchers(model=self.model, **extra)

    def engine(self) -> str:
        """Routing and per-replica engine metrics of this deployment."""
        return matchers(deployment=self.deployment)

    def ray(self) -> str:
        """Ray's node metrics of this RayService's pods."""
        return matchers(**{RAYSERVICE_LABEL: self.rayservice})
