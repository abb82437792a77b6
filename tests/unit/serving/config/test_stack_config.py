from pathlib import Path

import pytest

from serving.config.loading import build_stack_config, merge
from serving.config.model_spec import Dtype, ModelCatalog
from serving.config.gateway import KeyLimits
from serving.config.stack import RoutingPolicyName
from serving.errors import ConfigError
from tests.paths import MODELS  # noqa: E402


def build(data):
    return build_stack_config(data, catalog=ModelCatalog(MODELS), resolve_path=lambda n: Path("/m") / n)


def test_defaults_come_from_the_model_spec():
    config = build({})
    assert config.model.name == "smollm2-135m-instruct"
    assert config.model_path == Path("/m/smollm2-135m-instruct")
    assert config.engine_settings == config.model.engine
    assert config.max_ongoing_per_replica == config.model.engine.max_num_seqs


def test_engine_keys_override_the_spec_and_keep_the_rest():
    config = build({"engine": {"max_num_seqs": 8}})
    assert config.engine_settings.max_num_seqs == 8
    assert config.engine_settings.enforce_eager is config.model.engine.enforce_eager


def test_dtype_overrides_the_spec_and_is_validated():
    assert build({}).model.dtype is Dtype.FLOAT32  # the CPU default: right answers on every x86 CPU
    config = build({"dtype": "bfloat16"})
    assert config.model.dtype is Dtype.BFLOAT16
    assert config.engine_replica_config().model.dtype is Dtype.BFLOAT16
    with pytest.raises(ConfigError, match="float32"):
        build({"dtype": "float8"})


def test_routing_policy_by_name_and_unknown_name_lists_valid_ones():
    assert build({"routing": {"policy": "prefix-affinity"}}).routing.policy is RoutingPolicyName.PREFIX_AFFINITY
    with pytest.raises(ConfigError) as err:
        build({"routing": {"policy": "fastest"}})
    for name in ("least-loaded", "prefix-affinity", "session", "round-robin"):
        assert name in str(err.value)


def test_autoscaling_bounds_are_checked():
    with pytest.raises(ConfigError, match="min_replicas"):
        build({"autoscaling": {"enabled": True, "min_replicas": 3, "max_replicas": 2}})


def test_max_replica_count_follows_autoscaling():
    assert build({"replicas": {"num_replicas": 2}}).max_replica_count == 2
    scaled = build({"autoscaling": {"enabled": True, "min_replicas": 1, "max_replicas": 3}})
    assert scaled.max_replica_count == 3


def test_merge_is_deep_and_ignores_none():
    assert merge({"a": {"b": 1, "c": 2}, "d": 3}, {"a": {"b": 5}, "d": None}) == {"a": {"b": 5, "c": 2}, "d": 3}


def test_merge_drops_none_inside_sections_missing_from_base():
    # `serving up` with no stack file and no flags: every override is None.
    assert merge({}, {"replicas": {"num_replicas": None, "cpus_per_rank": None}}) == {"replicas": {}}


def test_unknown_top_level_key_is_an_error():
    with pytest.raises(ConfigError, match="replica"):
        build({"replica": {"num_replicas": 2}})


def test_api_keys_are_off_by_default_and_key_limits_need_a_keys_file():
    gateway = build({}).gateway
    assert gateway.api_keys_file is None and not gateway.metrics_public
    config = build({"gateway": {"api_keys_file": "/etc/keys", "key_limits": {"rpm": 60}}})
    assert config.gateway.api_keys_file == Path("/etc/keys")
    assert config.gateway.key_limits == KeyLimits(rpm=60)
    with pytest.raises(ConfigError, match="api_keys_file"):
        build({"gateway": {"key_limits": {"rpm": 60}}})
    with pytest.raises(ConfigError, match="rpm"):
        build({"gateway": {"api_keys_file": "/etc/keys", "key_limits": {"rpm": 0}}})
