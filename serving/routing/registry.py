"""Routing policies by name: :class:`RoutingPolicyName` -> policy class."""

from __future__ import annotations

import random
from collections.abc import Mapping
from types import MappingProxyType

from pydantic import ValidationError

from serving.config.stack import RoutingPolicyName, RoutingSpec
from serving.errors import ConfigError
from serving.routing.cache_aware import CacheAwarePolicy
from serving.routing.least_loaded import LeastLoadedPolicy
from serving.routing.policy import RoutingPolicy
from serving.routing.prefix_affinity import PrefixAffinityPolicy
from serving.routing.round_robin import RoundRobinPolicy
from serving.routing.session import SessionPolicy

POLICIES: Mapping[RoutingPolicyName, type[RoutingPolicy]] = MappingProxyType(
    {
        RoutingPolicyName.LEAST_LOADED: LeastLoadedPolicy,
        RoutingPolicyName.PREFIX_AFFINITY: PrefixAffinityPolicy,
        RoutingPolicyName.SESSION: SessionPolicy,
        RoutingPolicyName.ROUND_ROBIN: RoundRobinPolicy,
        RoutingPolicyName.CACHE_AWARE: CacheAwarePolicy,
    }
)


def policy_names() -> tuple[str, ...]:
    """The registered policy names, as the config and the CLI spell them."""
    return tuple(str(name) for name in POLICIES)


def parse_policy_name(text: str) -> RoutingPolicyName:
    """``"prefix-affinity"`` -> :attr:`RoutingPolicyName.PREFIX_AFFINITY`; unknown -> ConfigError."""
    try:
        name = RoutingPolicyName(text)
    except ValueError:
        name = None
    if name not in POLICIES:
        raise ConfigError(f"unknown routing policy {text!r}; valid: {', '.join(policy_names())}")
    return name


def policy_class(name: RoutingPolicyName | str) -> type[RoutingPolicy]:
    """The class registered under ``name``; ConfigError listing the valid names if none."""
    return POLICIES[parse_policy_name(str(name))]


def build_policy(spec: RoutingSpec, *, rng: random.Random | None = None) -> RoutingPolicy:
    """A fresh policy configured from ``spec`` (``rng`` seeds its random choices, for tests)."""
    return policy_class(spec.policy).from_spec(spec, rng=rng)


def parse_routing_spec(data: Mapping[str, object]) -> RoutingSpec:
    """A :class:`RoutingSpec` from plain data (``spec.model_dump(mode="json")``); ConfigError if invalid."""
    policy = data.get("policy")
    if isinstance(policy, str):
        parse_policy_name(policy)
    try:
        return RoutingSpec.model_validate(dict(data))
    except ValidationError as error:
        raise ConfigError(f"invalid routing spec: {error}") from error
