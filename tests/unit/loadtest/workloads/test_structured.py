"""The structured workload: the same extraction requests, the answer's shape asked for in
different ways (request bodies checked as the client builds them)."""

from __future__ import annotations

import jsonschema
import pytest

from loadtest.client.openai_api import request_body
from loadtest.config import Endpoint, TargetConfig
from loadtest.errors import ConfigError
from loadtest.workloads import StructuredWorkload, parse_workload
from loadtest.workloads.structured import RECORD_SCHEMA
from tests.unit.loadtest.workloads.test_workloads import ctx


def bodies(output: str, count: int = 6, seed: int = 3) -> list[dict]:
    plan = parse_workload(f"structured:{output},output_len=96").build(count, ctx(seed=seed))
    target = TargetConfig(endpoint=Endpoint.CHAT, model="m")
    return [request_body(target, system=None, history=[], turn=s.turns[0], extra=s.extra_body)
            for s in plan.sessions]


def test_every_output_sends_the_same_notes_with_its_own_constraint():
    reference = bodies("text")
    assert all("response_format" not in b and "tools" not in b for b in reference)
    for output in ("json_object", "json_schema", "tool_named", "tool_required", "tool_auto"):
        constrained = bodies(output)
        assert [b["messages"] for b in constrained] == [b["messages"] for b in reference]
        assert all(b["max_tokens"] == 96 for b in constrained)
    assert bodies("json_schema")[0]["response_format"]["json_schema"]["schema"] == RECORD_SCHEMA
    assert bodies("tool_required")[0]["tool_choice"] == "required"
    assert bodies("tool_named")[0]["tool_choice"] == {"type": "function", "function": {"name": "record_patient"}}
    assert bodies("tool_auto")[0]["tools"][0]["function"]["parameters"] == RECORD_SCHEMA


def test_notes_vary_and_repeat_with_the_seed():
    notes = [b["messages"][-1]["content"] for b in bodies("text", count=30)]
    assert len(set(notes)) > 20
    assert notes == [b["messages"][-1]["content"] for b in bodies("text", count=30)]
    assert notes != [b["messages"][-1]["content"] for b in bodies("text", count=30, seed=4)]


def test_the_record_schema_is_a_valid_schema():
    jsonschema.Draft202012Validator.check_schema(RECORD_SCHEMA)
    jsonschema.validate({"name": "A B", "age": 3, "reason": "x", "allergies": [], "next_visit": "2027-01-02"},
                        RECORD_SCHEMA)


def test_an_unknown_output_is_an_error_naming_the_valid_ones():
    with pytest.raises(ConfigError, match="json_schema"):
        parse_workload("structured:yaml")
    assert StructuredWorkload().output == "json_schema"
