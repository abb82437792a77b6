"""Prometheus alerting rules of a deployment, with thresholds taken from its config.

* overload: the share of requests the gateway refuses with 429 because the server
  is full (``serveout_rejected_requests_total`` with a reason in
  :data:`OVERLOAD_REASONS`, over ``serveout_requests_total``); refusals for a key's
  own ``rpm``, ``tpm`` or ``concurrency`` are that client's quota, not overload;
* saturation: engine queue depth per ready replica close to the most Serve sends
  one replica (``max_ongoing_per_replica``): every replica is full and new
  requests wait in the gateway;
* replicas: fewer ready than desired for longer than a replica takes to load,
  fewer than the fixed replica count, or none at all;
* the gateway's metrics disappearing (gateway down or not scraped).

Note: ``serveout_replicas{state="desired"}`` is ready + starting replicas as Serve
reports them, not Serve's target count, so "ready < desired" reads "replicas stuck
starting"; the fixed-count rule covers replicas Serve stopped retrying.
"""

from __future__ import annotations

from serving.config.model_spec import AcceleratorKind
from serving.config.stack import StackConfig
from serving.manifests.promql import Selectors

OVERLOAD_REASONS = ("overloaded", "fair_share")
"""Refusal reasons that mean the server is full: the admission bound, or a key's fair
share of it (``serving.admission.bound``). The gateway also counts ``rpm``, ``tpm``
and ``concurrency`` there (a key's own limits) and ``priority`` (a lower class held
back for the classes above it: the hold-back working, not a full server)."""
REJECTED_SHARE = 0.05
"""Alert when more than this share of requests is refused for :data:`OVERLOAD_FOR`."""
OVERLOAD_FOR = "5m"
SATURATION = 0.9
"""Queue depth per ready replica above this share of ``max_ongoing_per_replica``."""


def alert_rule_groups(config: StackConfig) -> list[dict]:
    """The rule groups (Prometheus ``groups:`` entries) for ``config``."""
    s = Selectors.of(config)
    ready = f'max(serveout_replicas{s.gateway(state="ready")})'
    desired = f'max(serveout_replicas{s.gateway(state="desired")})'
    labels = {"service": "serveout", "model": config.model.name}
    load_for = "20m" if config.model.accelerator is not AcceleratorKind.CPU else "10m"
    saturated = SATURATION * config.max_ongoing_per_replica
    overload = s.gateway(regex={"reason": "|".join(OVERLOAD_REASONS)})
    rules = [
        _rule(
            "ServeoutOverloaded",
            f"sum(rate(serveout_rejected_requests_total{overload}[5m]))"
            f" / sum(rate(serveout_requests_total{s.gateway()}[5m])) > {REJECTED_SHARE}",
            OVERLOAD_FOR, "warning", labels,
            "{{ $value | humanizePercentage }} of requests to " + config.model.name
            + " are refused with 429 because the server is full",
            f"The gateway's admission bound (gateway.max_in_flight={config.gateway.max_in_flight}) "
            "is full. Add replicas (or raise autoscaling.max_replicas) or raise the bound if "
            "the engines have headroom. Refusals for an API key's own rpm/tpm/concurrency "
            "limits are not counted here.",
        ),
        _rule(
            "ServeoutQueueSaturated",
            f"sum(serveout_queue_depth{s.engine()}) / clamp_min({ready}, 1) > {saturated:g}",
            "10m", "warning", labels,
            "engine queue depth per ready replica of " + config.model.name + " is {{ $value }}",
            f"Replicas carry more than {SATURATION:.0%} of max_ongoing_requests "
            f"({config.max_ongoing_per_replica}); requests queue in front of them.",
        ),
        _rule(
            "ServeoutReplicasNotReady",
            _replicas_missing(config, ready, desired),
            load_for, "warning", labels,
            "fewer ready replicas of " + config.model.name + " than desired",
            "Replicas stay in STARTING: look for pending placement groups (no free "
            "accelerators), engine start failures in the replica logs, or weights missing "
            "from the volume.",
        ),
        _rule(
            "ServeoutGatewayMetricsAbsent",
            f"absent(serveout_replicas{s.gateway()})",
            "5m", "critical", labels,
            "no metrics from the serveout gateway of " + config.model.name,
            "The gateway is down, Prometheus no longer scrapes it, or the scrape is refused "
            "(401: Prometheus' metrics-key missing from the keys file or the Secret).",
        ),
    ]
    if not (config.autoscaling.enabled and config.autoscaling.min_replicas == 0):
        rules.append(_rule(
            "ServeoutNoReplicaReady", f"{ready} == 0", load_for, "critical", labels,
            "no engine replica of " + config.model.name + " is ready",
            "Every request is answered 503; see ServeoutReplicasNotReady.",
        ))
    return [{"name": f"serveout-{s.rayservice}", "rules": rules}]


def _replicas_missing(config: StackConfig, ready: str, desired: str) -> str:
    expr = f"{ready} < {desired}"
    if not config.autoscaling.enabled:
        expr += f" or {ready} < {config.replicas.num_replicas}"
    return expr


def _rule(name: str, expr: str, for_: str, severity: str, labels: dict[str, str],
          summary: str, description: str) -> dict:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity, **labels},
        "annotations": {"summary": summary, "description": description},
    }
