"""Any request body: --extra-body and a JSONL line's own fields are sent as given, or
refused naming what sets them; nothing is dropped."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from loadtest.cli import EXIT_USAGE, main
from loadtest.client.openai_api import request_body
from loadtest.config import Endpoint, TargetConfig
from loadtest.errors import WorkloadError
from loadtest.workloads import Turn
from loadtest.workloads.files import plan_from_lines, read_prompt_lines

TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


def test_extra_fields_are_sent_and_stream_options_merged():
    target = TargetConfig(model="m", extra_body={"top_p": 0.9, "priority": 2, "stream_options": {"continuous_usage_stats": True}})
    body = request_body(target, system=None, history=[], turn=Turn(content="hi", max_tokens=4),
                        extra={"tools": TOOLS, "priority": 5, "model": "adapter-a"})
    assert body["top_p"] == 0.9 and body["tools"] == TOOLS
    assert body["priority"] == 5 and body["model"] == "adapter-a"  # a line's own fields win over --extra-body
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["messages"] == [{"role": "user", "content": "hi"}] and body["max_tokens"] == 4
    completions = request_body(TargetConfig(endpoint=Endpoint.COMPLETIONS, extra_body={"logprobs": 2}),
                               system=None, history=[], turn=Turn(content="x"))
    assert completions["logprobs"] == 2 and completions["prompt"] == "x"


@pytest.mark.parametrize("field, option", [("messages", "prompt"), ("stream", "--no-stream"),
                                           ("max_tokens", "output length"), ("ignore_eos", "--no-exact-output"),
                                           ("model", "--model")])  # fmt: skip
def test_fields_the_load_tester_sets_are_refused(field, option):
    with pytest.raises(ValidationError, match=option):
        TargetConfig(extra_body={field: 1})


def test_temperature_given_twice_is_refused():
    with pytest.raises(ValidationError, match="twice"):
        TargetConfig(temperature=0.5, extra_body={"temperature": 0.2})


def test_cli_extra_body_errors(tmp_path, capsys):
    for text, fragment in (("[1]", "expected a JSON object"), ("{oops", "not JSON"), ('{"stream": false}', "--no-stream")):
        assert main(["run", "--workload", "prompts", "--extra-body", text]) == EXIT_USAGE
        assert fragment in capsys.readouterr().err
    assert main(["run", "--workload", "prompts", "--extra-body", f"@{tmp_path / 'missing.json'}"]) == EXIT_USAGE


def test_jsonl_lines_carry_their_own_fields_and_fanout():
    text = "\n".join(json.dumps(line) for line in (
        {"prompt": "a", "response_format": {"type": "json_object"}, "priority": 1},
        {"turns": ["b", "c", "d"], "fanout": 3, "think_time_s": 0.5, "model": "lora-1"},
        {"turns": ["e", "f"], "fanout": [2, 1]},
    ))  # fmt: skip
    plan = plan_from_lines(read_prompt_lines(text, "p.jsonl"), 3, seed=0, default_max_tokens=8)
    by_first = {s.turns[0].content: s for s in plan.sessions}
    assert by_first["a"].extra_body == {"response_format": {"type": "json_object"}, "priority": 1}
    b = by_first["b"]
    assert b.extra_body == {"model": "lora-1"} and b.think_time_s == 0.5
    assert [t.fanout for t in b.turns] == [1, 3, 3] and [t.fanout for t in by_first["e"].turns] == [2, 1]


@pytest.mark.parametrize("line, fragment", [
    ({"prompt": "a", "messages": []}, "p.jsonl:1: 'messages' is set by the workload's prompt"),
    ({"prompt": "a", "stream": False}, "p.jsonl:1: 'stream' is set by --no-stream"),
    ({"turns": ["a", "b"], "fanout": [1]}, "fanout must be"),
])  # fmt: skip
def test_jsonl_fields_the_load_tester_sets_are_refused(line, fragment):
    with pytest.raises(WorkloadError, match=fragment):
        read_prompt_lines(json.dumps(line), "p.jsonl")
