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


def matchers(*, regex: dict[str, str] | None = None, **labels: str) -> str:
    """``{a="x",b="y",c=~"p|q"}`` with values escaped for PromQL string literals;
    ``regex`` holds the regular-expression matchers."""
    body = [f'{k}="{_escape(v)}"' for k, v in labels.items()]
    body += [f'{k}=~"{_escape(v)}"' for k, v in (regex or {}).items()]
    return "{" + ",".join(body) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


@dataclass(frozen=True)
class Selectors:
    """Label selectors for the series of one deployment."""

    models: tuple[str, ...]  # the served names: the base model, then its LoRA adapters
    deployment: str
    rayservice: str

    @classmethod
    def of(cls, config: StackConfig) -> "Selectors":
        return cls(config.served_names, engine_deployment_label(config), resource_name(config))

    def gateway(self, *, regex: dict[str, str] | None = None, **extra: str) -> str:
        """Gateway metrics (``serveout_requests_total`` and friends) of every served model."""
        if len(self.models) == 1:
            return matchers(model=self.models[0], regex=regex, **extra)
        names = "|".join(m.replace(".", "\\.") for m in self.models)  # ids are [A-Za-z0-9._:-]
        return matchers(regex={"model": names, **(regex or {})}, **extra)

    def engine(self) -> str:
        """Routing and per-replica engine metrics of this deployment."""
        return matchers(deployment=self.deployment)

    def ray(self) -> str:
        """Series scraped from this RayService's pods: Ray's node metrics, and the
        gateway's per-key metrics (which carry no ``model`` label)."""
        return matchers(**{RAYSERVICE_LABEL: self.rayservice})
