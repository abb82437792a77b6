import pytest

from serving.config.stack import RoutingPolicyName, RoutingSpec
from serving.errors import ConfigError
from serving.routing import POLICIES, build_policy, parse_policy_name, policy_names
from serving.routing.policy import RoutingPolicy
from serving.routing.prefix_affinity import PrefixAffinityPolicy
from serving.routing.registry import parse_routing_spec, policy_class


def test_every_policy_name_has_a_policy_that_carries_that_name():
    assert set(POLICIES) == set(RoutingPolicyName)
    for name, cls in POLICIES.items():
        assert issubclass(cls, RoutingPolicy)
        assert cls.name is name


@pytest.mark.parametrize("name", list(RoutingPolicyName))
def test_build_policy_picks_the_class_named_in_the_spec(name):
    policy = build_policy(RoutingSpec(policy=name))
    assert type(policy) is POLICIES[name]
    assert policy_class(str(name)) is POLICIES[name]


def test_build_policy_passes_the_spec_settings_on():
    policy = build_policy(RoutingSpec(policy="prefix-affinity", max_prefix_blocks=7))
    assert isinstance(policy, PrefixAffinityPolicy)
    policy.index.record(list(range(8)), "r1")
    assert len(policy.index) == 7  # the spec's bound evicts the eighth block


@pytest.mark.parametrize("lookup", [parse_policy_name, policy_class])
def test_an_unknown_name_is_an_error_listing_the_valid_ones(lookup):
    with pytest.raises(ConfigError) as error:
        lookup("fastest")
    assert "'fastest'" in str(error.value)
    for name in ("least-loaded", "prefix-affinity", "session", "round-robin"):
        assert name in str(error.value)
    assert set(policy_names()) == {str(n) for n in RoutingPolicyName}


def test_routing_spec_round_trips_through_plain_data():
    spec = RoutingSpec(policy="session", imbalance_threshold=9, stats_period_s=0.5)
    assert parse_routing_spec(spec.model_dump(mode="json")) == spec


def test_bad_routing_spec_data_is_a_config_error():
    with pytest.raises(ConfigError, match="least-loaded"):
        parse_routing_spec({"policy": "fastest"})
    with pytest.raises(ConfigError):
        parse_routing_spec({"policy": "session", "prefix_block_tokens": 0})
