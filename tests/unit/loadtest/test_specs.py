"""Spec strings, registries and the profile/workload parsers."""

import pytest

from loadtest.errors import ConfigError, UnknownNameError
from loadtest.profiles import (
    ConstantRate,
    FixedConcurrency,
    LinearRamp,
    Poisson,
    RateSweep,
    parse_profile,
    profile_registry,
)
from loadtest.registry import Registry
from loadtest.specs import describe, split_spec
from loadtest.workloads import RandomWorkload, parse_workload, workload_registry


def test_split_spec():
    assert split_spec("poisson") == ("poisson", {})
    assert split_spec(" poisson : rate=4 , burstiness=0.5") == ("poisson", {"rate": "4", "burstiness": "0.5"})
    assert split_spec("sweep:rates=1,2,4,refine=1") == ("sweep", {"rates": ["1", "2", "4"], "refine": "1"})
    assert split_spec("x:max-concurrency=3") == ("x", {"max_concurrency": "3"})


@pytest.mark.parametrize("text", ["", ":a=1", "x:a=1,a=2", "x:=3"])
def test_split_spec_errors(text):
    with pytest.raises(ConfigError):
        split_spec(text)


def test_a_leading_value_is_the_positional_parameter_or_refused():
    assert split_spec("replay:t.jsonl,speed=2") == ("replay", {"": "t.jsonl", "speed": "2"})
    replay = parse_profile("replay:t.jsonl,speed=2")
    assert str(replay.path) == "t.jsonl" and replay.speed == 2.0
    with pytest.raises(ConfigError, match="without a key"):
        parse_profile("poisson:4")
    with pytest.raises(ConfigError, match="twice"):
        parse_profile("replay:a.jsonl,path=b.jsonl")


def test_unknown_profile_lists_valid_names():
    with pytest.raises(UnknownNameError) as info:
        parse_profile("gatling:rate=3")
    message = str(info.value)
    for name in ("concurrency", "constant", "poisson", "ramp", "sweep"):
        assert name in message
    assert info.value.valid == tuple(sorted(profile_registry().names()))


def test_unknown_workload_lists_valid_names():
    with pytest.raises(UnknownNameError, match="shared-prefix"):
        parse_workload("sharegpt")


def test_profiles_parse_to_typed_objects():
    assert parse_profile("concurrency:users=16,ramp_up_s=2s") == FixedConcurrency(users=16, ramp_up_s=2.0)
    assert parse_profile("constant:rate=2.5") == ConstantRate(rate=2.5)
    assert parse_profile("poisson:rate=4,burstiness=0.5") == Poisson(rate=4, burstiness=0.5)
    assert parse_profile("ramp:start_rate=1,end_rate=8") == LinearRamp(start_rate=1, end_rate=8)
    sweep = parse_profile("sweep:rates=1,2,4,max_error_rate=2%")
    assert sweep == RateSweep(rates=(1.0, 2.0, 4.0), max_error_rate=0.02)
    assert parse_profile("sweep:rates=3").rates == (3.0,)


def test_the_old_sweep_name_reads_as_rate_sweep():
    old, new = parse_profile("sweep:rates=1,2"), parse_profile("rate-sweep:rates=1,2")
    assert old == new and old.kind == new.kind == "rate-sweep"
    assert "sweep" not in profile_registry().names() and "rate-sweep" in profile_registry().names()


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("concurrency:users=0", "users"),
        ("concurrency:users=many", "users"),
        ("poisson", "rate"),
        ("poisson:rate=2,speed=3", "speed"),
        ("sweep:growth=1", "growth"),
        ("sweep:rates=1,-2", "rates"),
    ],
)
def test_invalid_parameters_name_the_field(text, fragment):
    with pytest.raises(ConfigError, match=fragment):
        parse_profile(text)


def test_workload_parse():
    assert parse_workload("random:input_len=64,output_len=128") == RandomWorkload(input_len=64, output_len=128)
    with pytest.raises(ConfigError, match="input_len"):
        parse_workload("random:input_len=0")


def test_registry_is_immutable_and_rejects_duplicates():
    registry = profile_registry()
    assert "poisson" in registry and list(registry) == list(registry.names())
    with pytest.raises(TypeError):
        registry._table["x"] = Poisson  # type: ignore[index]
    with pytest.raises(ConfigError, match="duplicate"):
        Registry("profile", [Poisson, Poisson])


def test_describe_lists_parameters():
    rows = {name: params for name, params, _ in describe(workload_registry())}
    assert "input_len=256" in rows["random"] and "path" in rows["jsonl"]
