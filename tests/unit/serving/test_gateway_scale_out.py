"""Several gateway replicas (the separate mode): from the CLI and config to Serve's
deployment options."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from serving.app_builder import gateway_deployment_options
from serving.config.gateway import GatewaySpec
from serving.errors import ConfigError
from tests.unit.serving.config.test_engine_backend import from_cli


def test_one_gateway_by_default():
    config = from_cli([])
    assert config.gateway.replicas == 1 and not config.gateway.autoscaling.enabled
    options = gateway_deployment_options(config)
    assert options["num_replicas"] == 1 and "autoscaling_config" not in options


def test_gateway_replicas_reach_the_deployment_and_size_its_serve_bounds_by_share():
    one = gateway_deployment_options(from_cli(["--gateway-mode", "separate", "--max-in-flight", "256"]))
    four = gateway_deployment_options(from_cli(["--gateway-mode", "separate", "--max-in-flight", "256", "--gateway-replicas", "4"]))
    assert four["num_replicas"] == 4
    assert four["max_ongoing_requests"] == 2 * 64 + 64 < one["max_ongoing_requests"]


def test_gateway_autoscaling_uses_serves_policy_on_in_flight_requests():
    config = from_cli(["--gateway-mode", "separate", "--gateway-autoscale", "2..6", "--gateway-target-in-flight", "32"])
    assert config.gateway.max_replica_count == 6
    options = gateway_deployment_options(config)
    assert "num_replicas" not in options
    assert options["autoscaling_config"] == {
        "min_replicas": 2, "max_replicas": 6, "target_ongoing_requests": 32}


@pytest.mark.parametrize("text", ["4", "a..b", "1..", "..3"])
def test_a_malformed_gateway_range_names_the_flag(text):
    with pytest.raises(ConfigError, match="--gateway-autoscale"):
        from_cli(["--gateway-autoscale", text])


def test_gateway_autoscaling_bounds_are_checked():
    with pytest.raises(ValidationError, match="min_replicas must be <= max_replicas"):
        GatewaySpec(autoscaling={"enabled": True, "min_replicas": 3, "max_replicas": 2})
    with pytest.raises(ValidationError):
        GatewaySpec(replicas=0)


def test_gateways_can_be_pinned_to_nodes_offering_a_custom_resource():
    assert gateway_deployment_options(from_cli([]))["ray_actor_options"]["resources"] == {}
    config = from_cli([])
    pinned = config.model_copy(update={"gateway": GatewaySpec(ray_resources={"serveout_gateway": 1})})
    assert gateway_deployment_options(pinned)["ray_actor_options"]["resources"] == {"serveout_gateway": 1}


def test_prefix_homes_are_on_exactly_when_several_routers_run():
    separate = ["--gateway-mode", "separate"]
    assert from_cli([*separate, "--routing", "prefix-affinity"]).resolved_routing.prefix_home is False
    assert from_cli([*separate, "--routing", "prefix-affinity", "--gateway-replicas", "2"]).resolved_routing.prefix_home
    assert from_cli([*separate, "--gateway-autoscale", "1..3"]).resolved_routing.prefix_home
    assert from_cli(["--routing", "prefix-affinity"]).resolved_routing.prefix_home  # direct: a router per node
    with pytest.raises(ValidationError):
        GatewaySpec(ray_resources={"serveout_gateway": 0})
