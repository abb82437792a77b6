"""Trace files: every format read by the real parser (the bundled Mooncake excerpt, and
the first lines of the public Azure and Qwen-Bailian traces as documented), windows,
speed, sessions, and prompts that share exactly the blocks the hashes share."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from loadtest.errors import ConfigError, WorkloadError
from loadtest.workloads import WorkloadContext, WorkloadPlan, parse_workload
from loadtest.workloads.replay import TraceSelection, infer_sessions, replay_plan
from loadtest.workloads.tokenizer import load_tokenizer
from loadtest.workloads.traces import TraceFormat, TraceRow, parse_trace
from tests.fixtures import TINY_TOKENIZER
from tests.paths import REPO

EXCERPT = REPO / "loadtest" / "data" / "traces" / "mooncake-conversation-400.jsonl"
AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.2224670,879,55
"""
BURSTGPT = """Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
5,ChatGPT,472,18,490,Conversation log
45,ChatGPT,1087,0,1087,Conversation log
118,GPT-4,417,276,693,API log
"""
BAILIAN = [
    {"chat_id": 159, "parent_chat_id": -1, "timestamp": 61.114, "input_length": 521, "output_length": 132,
     "type": "text", "turn": 1, "hash_ids": list(range(33))},
    {"chat_id": 160, "parent_chat_id": 159, "timestamp": 62.5, "input_length": 700, "output_length": 80,
     "type": "text", "turn": 2, "hash_ids": list(range(33)) + [90, 91, 92, 93, 94, 95, 96, 97, 98, 99, 100, 101]},
    {"chat_id": 161, "parent_chat_id": -1, "timestamp": 63.0, "input_length": 20, "output_length": 5,
     "type": "search", "turn": 1, "hash_ids": [500, 501]},
]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_bundled_mooncake_excerpt():
    plan = replay_plan(TraceSelection(path=EXCERPT, sessions="prefix"))
    assert len(plan.requests) == 400 and plan.block_size == 512
    assert plan.arrivals[0] == 0.0 and plan.span_s == 141.0 and (np.diff(plan.arrivals) >= 0).all()
    assert plan.sessions == 363 and sum(r.turn > 0 for r in plan.requests) == 37
    first = json.loads(EXCERPT.read_text().splitlines()[0])
    assert plan.requests[0].input_tokens == first["input_length"] and plan.requests[0].hash_ids == tuple(first["hash_ids"])


def test_window_and_speed():
    plan = replay_plan(TraceSelection(path=EXCERPT, start=30, end=60), speed=2.0)
    raw = [json.loads(line)["timestamp"] / 1000 for line in EXCERPT.read_text().splitlines()]
    inside = [t for t in raw if 30 <= t < 60]
    assert len(plan.requests) == len(inside)
    assert plan.arrivals.tolist() == pytest.approx([(t - 30) / 2 for t in inside])
    with pytest.raises(ConfigError, match="no request between 500 s"):
        replay_plan(TraceSelection(path=EXCERPT, start=500))


def test_azure_and_burstgpt_csv(tmp_path):
    azure = parse_trace(AZURE, "azure.csv")
    assert azure.format is TraceFormat.AZURE
    assert [r.t_s for r in azure.rows] == pytest.approx([0.0, 4.314579, 4.541877])
    assert [(r.input_tokens, r.output_tokens) for r in azure.rows] == [(374, 44), (396, 109), (879, 55)]
    burst = parse_trace(BURSTGPT, "burst.csv")
    assert burst.format is TraceFormat.BURSTGPT and burst.skipped == 1  # a failed request (0 response tokens)
    assert [(r.t_s, r.input_tokens, r.output_tokens) for r in burst.rows] == [(0.0, 472, 18), (113.0, 417, 276)]
    assert burst.ignored_fields == ("Log Type", "Model", "Total tokens")


def test_bailian_sessions_and_seconds(tmp_path):
    path = write(tmp_path, "bailian.jsonl", "\n".join(json.dumps(line) for line in BAILIAN))
    plan = replay_plan(TraceSelection(path=path))
    assert plan.block_size == 16 and plan.arrivals.tolist() == pytest.approx([0.0, 1.386, 1.886])
    assert [(r.session, r.turn) for r in plan.requests] == [(0, 0), (0, 1), (1, 0)]
    assert replay_plan(TraceSelection(path=path, sessions="none")).sessions == 3
    assert parse_trace(path.read_text(), "b").ignored_fields == ("type",)


def test_sessions_inferred_from_block_prefixes():
    rows = tuple(TraceRow(float(i), 100, 10, h) for i, h in enumerate([
        (0, 1, 2), (0, 5, 6), (0, 1, 2, 3, 4), (0, 1, 2, 3, 4, 7), (0, 1, 9), (0, 5, 6, 8), (0, 7, 8)]))
    # a request continues the latest one whose whole blocks (all but its last, maybe
    # partial) it starts with: (0, 1, 9) continues (0, 1, 2); a shared system block (0)
    # alone makes no session: (0, 7, 8) is a new one
    assert infer_sessions(rows) == [(0, 0), (1, 0), (0, 1), (0, 2), (0, 1), (1, 1), (2, 0)]


@pytest.mark.parametrize("text, fragment", [
    ('{"timestamp": 0, "input_length": 5}', "line 1: missing output_length"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": -1, "input_length": 5, '
     '"output_length": 1}', "line 2: timestamp must be a finite number >= 0"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": ["a"]}', "hash_ids must be a list"),
    ("time,rate\n0,1\n", "not a known trace format"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n", "line 2: TIMESTAMP must be a date"),
])  # fmt: skip
def test_bad_traces_name_the_line(text, fragment):
    with pytest.raises(ConfigError, match=fragment):
        parse_trace(text, "t")


def test_prompts_share_exactly_the_blocks_the_hashes_share(tmp_path):
    lines = [{"timestamp": 0, "input_length": 40, "output_length": 3, "hash_ids": [7, 8, 9]},
             {"timestamp": 500, "input_length": 30, "output_length": 4, "hash_ids": [7, 8]},
             {"timestamp": 900, "input_length": 35, "output_length": 5, "hash_ids": [7, 1, 2]},
             {"timestamp": 900, "input_length": 12, "output_length": 5, "hash_ids": []}]  # fmt: skip
    path = write(tmp_path, "t.jsonl", "\n".join(json.dumps(line) for line in lines))
    workload = parse_workload(f"trace:{path},block_size=16")
    tokenizer = load_tokenizer(TINY_TOKENIZER)
    ctx = WorkloadContext(seed=3, chat=True, tokenizer_loader=lambda: tokenizer)
    plan = workload.build(1, ctx)
    ids = [tokenizer.encode(s.turns[0].content, add_special_tokens=False) for s in plan.sessions]
    assert [len(i) for i in ids] == [40, 30, 35, 12]
    assert [s.turns[0].max_tokens for s in plan.sessions] == [3, 4, 5, 5]
    assert ids[0][:30] == ids[1][:30]  # blocks 7, 8 and 9's first 14 tokens
    assert ids[0][:16] == ids[2][:16] and ids[0][16:32] != ids[2][16:32]  # block 7 only
    assert ids[3][:4] != ids[0][:4]  # no hashes: its own tokens
    assert workload.build(1, ctx) == plan  # deterministic for a seed
    with pytest.raises(WorkloadError, match="is block_size=32 right"):
        parse_workload(f"trace:{path},block_size=32").build(1, ctx)


def test_a_trace_plan_travels_as_recipes_and_is_drawn_again_identically():
    tokenizer = load_tokenizer(TINY_TOKENIZER)
    ctx = WorkloadContext(seed=5, chat=True, tokenizer_loader=lambda: tokenizer)
    plan = parse_workload(f"trace:{EXCERPT},end=30,sessions=prefix").build(1, ctx)
    text = plan.model_dump_json()
    prompt_chars = sum(len(s.turns[0].content) for s in plan.sessions)
    assert all(s.turns[0].recipe is not None for s in plan.sessions) and '"content"' not in text
    assert len(text) < prompt_chars / 20  # 512-token blocks as hash ids, not as words
    assert WorkloadPlan.from_json(text) == plan  # every message drawn again, word for word
    forwarded = WorkloadPlan.from_json(text, draw_text=False)  # a master: nothing drawn, the same JSON out
    assert {t.content for s in forwarded.sessions for t in s.turns} == {""} and forwarded.model_dump_json() == text
