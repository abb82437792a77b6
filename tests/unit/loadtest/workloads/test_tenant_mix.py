"""Tenants (``--tenant``, ``--tenants FILE``): parsing and its errors, keys from the
environment and never written out, and the weighted, seeded spread of sessions."""

import json
from collections import Counter

import pytest

from loadtest.config import LoadTestConfig
from loadtest.errors import ConfigError
from loadtest.profiles import parse_profile
from loadtest.workloads import parse_workload
from loadtest.workloads.base import Session, Turn, WorkloadPlan
from loadtest.workloads.tenant_mix import (
    HIDDEN,
    PRIORITY_HEADER,
    assign_tenants,
    parse_tenant,
    parse_tenants,
    tenant_headers,
)

SECRET = "sk-fake-literal-key-123"


def plan_of(n: int) -> WorkloadPlan:
    return WorkloadPlan(sessions=tuple(Session(id=i, turns=(Turn(content=f"q{i}"),)) for i in range(n)))


def test_a_tenant_on_the_command_line_with_class_weight_and_its_own_slo():
    mix = parse_tenants(["name=chat,key=env:CHAT_KEY,class=interactive,weight=3,ttft_p95=500ms,error_rate=1%",
                         f"name=batch,key={SECRET}"])
    chat, batch = mix.tenants
    assert (chat.name, chat.key, chat.priority_class, chat.weight) == ("chat", "env:CHAT_KEY", "interactive", 3.0)
    assert [o.key for o in chat.slos] == ["ttft_p95", "error_rate"]
    assert (batch.priority_class, batch.weight, batch.slos) == (None, 1.0, ())
    assert mix.shares() == {"chat": 0.75, "batch": 0.25}
    assert mix.describe() == "chat=3 (interactive), batch=1"
    assert SECRET not in repr(mix)


def test_tenants_from_a_yaml_file_and_from_json(tmp_path):
    yaml_file = tmp_path / "tenants.yaml"
    yaml_file.write_text("tenants:\n  - {name: chat, key: 'env:A', class: interactive, weight: 2, slo: 'e2e_p95=5s'}\n"
                         "  - {name: bulk, key: 'env:B', class: batch}\n")
    json_file = tmp_path / "tenants.json"
    json_file.write_text(json.dumps([{"name": "chat", "key": "env:A", "class": "interactive", "weight": 2,
                                      "slo": "e2e_p95=5s"}, {"name": "bulk", "key": "env:B", "class": "batch"}]))
    assert parse_tenants(path=yaml_file) == parse_tenants(path=json_file)
    both = parse_tenants(["name=extra,key=env:C"], yaml_file)
    assert [t.name for t in both.tenants] == ["chat", "bulk", "extra"]
    assert parse_tenants() is None


@pytest.mark.parametrize(("items", "says"), [
    (["name=a,key=k,colour=red"], "unknown field 'colour'"),
    (["name=a,key=k,weight=0"], "weight must be a finite number > 0"),
    (["name=a,key=k,weight=-2"], "weight must be a finite number > 0"),
    (["name=a,key=k", "name=a,key=j"], "tenant 'a' given twice"),
    (["name=a,key="], "tenant 'a': the key is empty"),
    (["name=a"], "tenant 'a': key is missing"),
    (["name=a,key=env:"], "env:VAR"),
    (["name=a,key=k,name=b"], "'name' is given twice"),
    ([f"name=a,{SECRET}"], "item 2 is not FIELD=VALUE"),
    (["name=a,key=k,ttft_p95=fast"], "ttft_p95"),
])
def test_bad_tenants_are_config_errors_that_never_show_a_key(items, says):
    with pytest.raises(ConfigError, match=says) as caught:
        parse_tenants(items)
    assert SECRET not in str(caught.value)


def test_bad_tenant_files(tmp_path):
    extra = tmp_path / "t.yaml"
    extra.write_text("- {name: a, key: k, colour: red}\n")
    with pytest.raises(ConfigError, match="unknown field 'colour'"):
        parse_tenants(path=extra)
    zero = tmp_path / "z.yaml"
    zero.write_text("- {name: a, key: k, weight: 0}\n")
    with pytest.raises(ConfigError, match="tenant 'a': weight"):
        parse_tenants(path=zero)
    for text in ("name: a\n", "- [1, 2\n"):
        bad = tmp_path / "bad.yaml"
        bad.write_text(text)
        with pytest.raises(ConfigError, match="--tenants"):
            parse_tenants(path=bad)
    with pytest.raises(ConfigError, match="cannot read"):
        parse_tenants(path=tmp_path / "missing.yaml")


def test_keys_come_from_the_environment_and_literal_ones_are_never_written():
    mix = parse_tenants(["name=a,key=env:TENANT_A_KEY", f"name=b,key={SECRET}"])
    assert mix.keys({"TENANT_A_KEY": "from-env"}) == {"a": "from-env", "b": SECRET}
    with pytest.raises(ConfigError, match="TENANT_A_KEY"):
        mix.keys({})
    config = LoadTestConfig(profile=parse_profile("concurrency:users=1"), workload=parse_workload("random"),
                            tenants=mix)
    dumped = config.model_dump_json()
    assert SECRET not in dumped and HIDDEN in dumped and "env:TENANT_A_KEY" in dumped
    assert LoadTestConfig.model_validate_json(dumped).tenants.describe() == mix.describe()  # a summary reads back


def test_a_tenant_slo_the_run_cannot_measure_is_refused():
    with pytest.raises(ValueError, match="need streamed responses"):
        LoadTestConfig(profile=parse_profile("concurrency:users=1"), workload=parse_workload("random"),
                       target={"stream": False}, tenants=parse_tenants(["name=a,key=k,ttft_p95=1s"]))


def test_sessions_get_their_tenants_in_the_weights_shares_the_same_for_the_same_seed():
    mix = parse_tenants(["name=chat,key=k1,class=interactive,weight=3", "name=bulk,key=k2,class=batch,weight=1"])
    spread = assign_tenants(plan_of(1000), mix, seed=7)
    tenants = [s.tenant for s in spread.sessions]
    assert Counter(tenants) == {"chat": 750, "bulk": 250}
    assert all(s.priority_class == {"chat": "interactive", "bulk": "batch"}[s.tenant] for s in spread.sessions)
    assert [s.tenant for s in assign_tenants(plan_of(1000), mix, seed=7).sessions] == tenants
    other = [s.tenant for s in assign_tenants(plan_of(1000), mix, seed=8).sessions]
    assert other != tenants and Counter(other) == Counter(tenants)
    # a small pool: the shares as near as whole sessions allow, and a mix of both
    assert Counter(s.tenant for s in assign_tenants(plan_of(10), mix, seed=1).sessions) == {"chat": 8, "bulk": 2}
    assert assign_tenants(plan_of(3), None, seed=1) == plan_of(3)


def test_a_tenant_s_headers():
    assert tenant_headers("k", "batch") == {"Authorization": "Bearer k", PRIORITY_HEADER: "batch"}
    assert tenant_headers("k", None) == {"Authorization": "Bearer k"}
    assert parse_tenant("name=a,key=k,e2e_p95=2s") == {"name": "a", "key": "k", "slo": "e2e_p95=2s"}


def test_a_tenant_with_a_workload_of_its_own_from_the_command_line_and_from_a_file(tmp_path):
    mix = parse_tenants(["name=bulk,key=k2,class=batch,workload=random:input_len=900"])
    assert mix.tenants[0].workload == parse_workload("random:input_len=900")
    assert mix.describe() == "bulk=1 (batch) [random]"
    path = tmp_path / "tenants.yaml"
    path.write_text("- {name: chat, key: k1}\n"
                    "- {name: bulk, key: k2, workload: 'random:input_len=900,output_len=300'}\n")
    from_file = parse_tenants(path=path)
    assert from_file.workloads() == {"bulk": parse_workload("random:input_len=900,output_len=300")}
    with pytest.raises(ConfigError, match="tenant 'bulk': workload: .*nope"):
        parse_tenants(["name=bulk,key=k,workload=nope"])
    with pytest.raises(ConfigError, match="replayed as the run's workload"):
        parse_tenants(["name=bulk,key=k,workload=trace:path=x.jsonl"])
    with pytest.raises(ValueError, match="tenants cannot have workloads of their own"):
        LoadTestConfig(profile=parse_profile(f"replay:{tmp_path / 't.jsonl'}"), workload=parse_workload("random"),
                       tenants=mix)


def test_a_tenant_s_own_sessions_take_its_places_with_their_system_prompts():
    mix = parse_tenants(["name=chat,key=k1,weight=3", "name=bulk,key=k2,class=batch,weight=1"])
    own = WorkloadPlan(systems=("summarise this record",), sessions=tuple(
        Session(id=100 + i, system=0, turns=(Turn(content=f"record {i}", max_tokens=300),)) for i in range(2)))
    base = plan_of(40).model_copy(update={"systems": ("a run's system prompt",)})
    spread = assign_tenants(base, mix, seed=7, own={"bulk": own})
    assert [s.tenant for s in spread.sessions] == [s.tenant for s in assign_tenants(base, mix, seed=7).sessions]
    bulk = [s for s in spread.sessions if s.tenant == "bulk"]
    assert [s.turns[0].content for s in bulk] == ["record 0", "record 1"] * 5  # its own, in turn
    assert all(spread.system_text(s) == "summarise this record" and s.priority_class == "batch" for s in bulk)
    assert all(s.turns[0].content.startswith("q") for s in spread.sessions if s.tenant == "chat")
    assert [s.id for s in spread.sessions] == list(range(40))  # the places' ids: unique as before
