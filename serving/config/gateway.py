"""The gateway's settings: its mode, port, admission bound, timeouts, API keys and
per-key limits, and its own replicas (part of :class:`serving.config.stack.StackConfig`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, PositiveFloat, field_validator, model_validator

from serving.config.model_spec import Strict
from serving.config.priority import PrioritySpec


class KeyLimits(Strict):
    """Limits of one API key (None = unlimited); see docs/serving.md, "API keys"."""

    rpm: int | None = Field(
        None, ge=1, description="requests per minute: a budget of rpm that refills at rpm/60 per second"
    )
    tpm: int | None = Field(
        None, ge=1, description="tokens per minute, same refill; a request reserves prompt + n * "
        "max_tokens when admitted and gets back what it did not use when it ends",
    )
    concurrency: int | None = Field(None, ge=1, description="requests of the key in flight at once")


class GatewayAutoscalingSpec(Strict):
    """Autoscaling of the gateway deployment on its own in-flight requests (off = the
    fixed ``gateway.replicas``)."""

    enabled: bool = False
    min_replicas: int = Field(1, ge=1)
    max_replicas: int = Field(1, ge=1)
    target_in_flight: int = Field(
        64, ge=1, description="requests in flight each gateway replica should carry"
    )

    @model_validator(mode="after")
    def _bounds(self) -> "GatewayAutoscalingSpec":
        if self.min_replicas > self.max_replicas:
            raise ValueError("gateway autoscaling min_replicas must be <= max_replicas")
        return self


class GatewaySpec(Strict):
    """The HTTP front door."""

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    mode: Literal["direct", "separate"] = Field(
        "direct", description="direct: every engine replica serves HTTP itself and a router "
        "(one per node, consulted once per request by Serve's HAProxy ingress) picks it, so the "
        "token stream crosses no other Python process; separate: gateway replicas in front of "
        "the engine replicas, every token through the gateway (for a cluster without HAProxy)"
    )
    replicas: int = Field(
        1, ge=1, description="gateway replicas when gateway autoscaling is off; each admits "
        "its share of max_in_flight"
    )
    autoscaling: GatewayAutoscalingSpec = GatewayAutoscalingSpec()
    ray_resources: dict[str, PositiveFloat] = Field(
        {}, description="custom Ray resources each gateway replica requests, e.g. {serveout_gateway: 1} "
        "to place gateways only on the nodes (pods) that offer that resource"
    )
    max_in_flight: int = Field(
        256, ge=1, description="admission bound per model for the whole app (every gateway "
        "replica together); beyond it requests get 429"
    )
    retry_after_s: int = Field(1, ge=1)
    max_body_bytes: int = Field(1_048_576, ge=1024)
    request_timeout_s: float = Field(
        300.0, gt=0, description="per-request deadline; past it the engine request is aborted"
    )
    log_prompts: bool = Field(False, description="log prompt and completion text (off by default)")
    api_keys_file: Path | None = Field(
        None, description="API keys, one per line (`name:key rpm=60 ...`); None = NO authentication: "
        "anyone who reaches the port may use it",
    )
    key_limits: KeyLimits = Field(
        KeyLimits(), description="limits of every key whose line in the keys file does not set its own"
    )
    metrics_public: bool = Field(
        False, description="serve /metrics and /status without a key even when keys are configured"
    )
    fair_share_window_s: float = Field(
        5.0, gt=0, description="a key is active (shares its class's part of max_in_flight by tokens "
        "served) while it has requests in flight and for this long after its last one",
    )
    priority: PrioritySpec = Field(
        PrioritySpec(), description="priority classes (highest first, each with the share of "
        "max_in_flight it may fill), the default class, and the token costs of fair sharing")

    @property
    def direct(self) -> bool:
        """Whether the engine replicas serve HTTP themselves (``mode: direct``)."""
        return self.mode == "direct"

    @field_validator("mode", mode="before")
    @classmethod
    def _old_mode(cls, value):
        if value == "in-engine":
            raise ValueError("gateway.mode in-engine was replaced by direct (the gateway runs in "
                             "every engine replica, and a router picks the replica with any policy)")
        return value

    @property
    def max_replica_count(self) -> int:
        """The most gateway replicas this config can run at once."""
        return self.autoscaling.max_replicas if self.autoscaling.enabled else self.replicas

    @model_validator(mode="after")
    def _limits_need_keys(self) -> "GatewaySpec":
        if self.api_keys_file is None and self.key_limits != KeyLimits():
            raise ValueError("gateway.key_limits needs gateway.api_keys_file (limits apply per key)")
        return self
