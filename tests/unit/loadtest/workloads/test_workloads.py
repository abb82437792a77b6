"""Workloads: exact token lengths (with the committed tiny tokenizer, a real Hugging Face
tokenizer), prompt files, bundled sets, seeds."""

import json
from pathlib import Path

import pytest

from loadtest.errors import ConfigError, WorkloadError
from loadtest.workloads import (
    BundledPrompts,
    JsonlWorkload,
    MultiTurnWorkload,
    RandomWorkload,
    SharedPrefixWorkload,
    WorkloadContext,
    bundled_sets,
    parse_workload,
)
from loadtest.workloads.tokenizer import load_tokenizer
from tests.fixtures import TINY_TOKENIZER


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(TINY_TOKENIZER)


def ctx(tokenizer=None, *, chat=True, seed=0):
    def loader():
        if tokenizer is None:
            raise AssertionError("this workload must not need a tokenizer")
        return tokenizer

    return WorkloadContext(seed=seed, chat=chat, tokenizer_loader=loader)


def chat_len(tokenizer, system, user):
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return len(out["input_ids"] if not isinstance(out, list) else out)


def test_random_prompts_have_exact_lengths(tokenizer):
    plan = RandomWorkload(input_len=64, output_len=128).build(40, ctx(tokenizer))
    assert len(plan.sessions) == 40
    for session in plan.sessions:
        (turn,) = session.turns
        assert len(tokenizer.encode(turn.content, add_special_tokens=False)) == 64
        assert turn.max_tokens == 128
        # what the server will count: the content inside the chat template
        assert turn.expected_prompt_tokens == chat_len(tokenizer, None, turn.content)


def test_random_lengths_with_spread_and_template_included(tokenizer):
    plan = RandomWorkload(input_len=200, output_len=50, spread=0.5, include_template=True).build(
        30, ctx(tokenizer)
    )
    lengths = [chat_len(tokenizer, None, s.turns[0].content) for s in plan.sessions]
    assert lengths == [s.turns[0].expected_prompt_tokens for s in plan.sessions]
    assert min(lengths) >= 100 and max(lengths) <= 300 and len(set(lengths)) > 5
    assert all(25 <= s.turns[0].max_tokens <= 75 for s in plan.sessions)


def test_completions_lengths(tokenizer):
    plan = RandomWorkload(input_len=33, output_len=8).build(10, ctx(tokenizer, chat=False))
    for s in plan.sessions:
        assert len(tokenizer.encode(s.turns[0].content)) == s.turns[0].expected_prompt_tokens == 33


def test_same_seed_same_prompts(tokenizer):
    a = RandomWorkload(input_len=16).build(5, ctx(tokenizer, seed=3))
    b = RandomWorkload(input_len=16).build(5, ctx(tokenizer, seed=3))
    c = RandomWorkload(input_len=16).build(5, ctx(tokenizer, seed=4))
    assert a == b and a != c


def test_shared_prefix(tokenizer):
    plan = SharedPrefixWorkload(num_prefixes=3, prefix_len=300, question_len=20, output_len=16).build(
        60, ctx(tokenizer)
    )
    assert len(plan.systems) == 3
    assert all(len(tokenizer.encode(p, add_special_tokens=False)) == 300 for p in plan.systems)
    used = {s.system for s in plan.sessions}
    assert used == {0, 1, 2}
    for s in plan.sessions[:10]:
        expected = chat_len(tokenizer, plan.systems[s.system], s.turns[0].content)
        assert s.turns[0].expected_prompt_tokens == expected


def test_multi_turn(tokenizer):
    workload = MultiTurnWorkload(turns=3, input_len=12, output_len=5, think_time_s="250ms", system_len=40)
    plan = workload.build(4, ctx(tokenizer))
    assert workload.requests_per_session == 3
    assert all(len(s.turns) == 3 and s.think_time_s == 0.25 and s.system == 0 for s in plan.sessions)
    first = plan.sessions[0].turns[0]
    assert first.expected_prompt_tokens == chat_len(tokenizer, plan.systems[0], first.content)
    assert plan.sessions[0].turns[1].expected_prompt_tokens is None


def test_jsonl_file(tmp_path: Path):
    path = tmp_path / "prompts.jsonl"
    lines = [
        {"prompt": "one"},
        {"prompt": "two", "max_tokens": 7, "system": "be brief"},
        {"turns": ["hi", "and then?"], "system": "be brief"},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    workload = parse_workload(f"jsonl:path={path},output_len=20")
    assert isinstance(workload, JsonlWorkload)
    plan = workload.build(7, ctx())
    assert len(plan.sessions) == 7 and plan.systems == ("be brief",)
    contents = [tuple(t.content for t in s.turns) for s in plan.sessions]
    # a seeded permutation, cycled: the first three are each line once
    assert sorted(contents[:3]) == sorted([("one",), ("two",), ("hi", "and then?")])
    by_content = {s.turns[0].content: s for s in plan.sessions}
    assert by_content["two"].turns[0].max_tokens == 7 and by_content["one"].turns[0].max_tokens == 20


@pytest.mark.parametrize(
    "text, fragment",
    [("", "no prompts"), ('{"nothing": 1}\n', ":1:"), ('{"prompt": "a", "turns": ["b"]}\n', ":1:"),
     ('{"prompt": "a"}\nnot json\n', ":2:")],
)
def test_jsonl_errors(tmp_path, text, fragment):
    path = tmp_path / "p.jsonl"
    path.write_text(text)
    with pytest.raises(WorkloadError, match=fragment):
        JsonlWorkload(path=path).build(1, ctx())


def test_missing_jsonl_file(tmp_path):
    with pytest.raises(WorkloadError, match="cannot read"):
        JsonlWorkload(path=tmp_path / "absent.jsonl").build(1, ctx())


def test_bundled_sets_cover_both_languages_and_all_kinds():
    names = set(bundled_sets())
    for lang in ("en", "vi"):
        for kind in ("questions", "summarise", "health-admin"):
            assert f"{lang}-{kind}" in names
    for name in names:
        plan = BundledPrompts(sets=name).build(24, ctx())
        prompts = {s.turns[0].content for s in plan.sessions}
        assert len(prompts) >= 20, name  # a few dozen distinct prompts each


def test_vietnamese_sets_are_vietnamese():
    plan = BundledPrompts(sets=("vi-questions", "vi-summarise", "vi-health-admin")).build(50, ctx())
    marks = set("ăâđêôơưàảãáạằẳẵắặầẩẫấậèẻẽéẹềểễếệìỉĩíịòỏõóọồổỗốộờởỡớợùủũúụừửữứựỳỷỹýỵ")
    assert all(any(c in marks for c in s.turns[0].content.lower()) for s in plan.sessions)


def test_bundled_sampling_repeats_with_the_seed():
    workload = parse_workload("prompts:sets=en-questions,vi-health-admin,output_len=64")
    assert workload.build(30, ctx(seed=1)) == workload.build(30, ctx(seed=1))
    assert workload.build(30, ctx(seed=1)) != workload.build(30, ctx(seed=2))
    assert BundledPrompts(sets="all").sets == bundled_sets()


def test_unknown_bundled_set():
    with pytest.raises(ConfigError, match="vi-questions"):
        parse_workload("prompts:sets=fr-questions")


def test_missing_tokenizer_folder(tmp_path):
    with pytest.raises(WorkloadError, match="--tokenizer"):
        load_tokenizer(tmp_path)
