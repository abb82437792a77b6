"""The step-time benchmark's pure parts (benchmarks/step_time.py): a step's composition
from a fake ``SchedulerOutput`` (checked against the installed vLLM's field names), the
grid against the engine's limits, the JSON document's schema and the summary groups."""

from __future__ import annotations

import ast
import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from benchmarks.common.engine import Limits
from benchmarks.step_time import (
    Composition,
    Scenario,
    Step,
    composition,
    grid,
    prefill_rate,
    report,
    summary,
    warmup_scenarios,
)

CPU = Limits(max_num_seqs=64, max_num_batched_tokens=2048, max_model_len=2048, kv_tokens=46592)
GPU = Limits(max_num_seqs=256, max_num_batched_tokens=8192, max_model_len=32768, kv_tokens=840_000)


@dataclass
class FakeNewRequest:
    req_id: str
    prompt_len: int
    num_computed_tokens: int = 0


@dataclass
class FakeCachedRequests:
    req_ids: list[str] = field(default_factory=list)
    num_computed_tokens: list[int] = field(default_factory=list)


@dataclass
class FakeSchedulerOutput:
    """The fields of vLLM's ``SchedulerOutput`` that :func:`composition` reads."""

    scheduled_new_reqs: list[FakeNewRequest]
    scheduled_cached_reqs: FakeCachedRequests
    num_scheduled_tokens: dict[str, int]


def fake_output(new: list[tuple[str, int, int, int]] = (), cached: list[tuple[str, int, int]] = ()):
    """``new``: (id, prompt, computed, scheduled); ``cached``: (id, computed, scheduled)."""
    return FakeSchedulerOutput(
        [FakeNewRequest(r, p, c) for r, p, c, _ in new],
        FakeCachedRequests([r for r, _, _ in cached], [c for _, c, _ in cached]),
        {**{r: n for r, _, _, n in new}, **{r: n for r, _, n in cached}},
    )


def test_a_new_prompt_is_prefill_with_no_context():
    c = composition(fake_output(new=[("a", 300, 0, 300)]), {})
    assert c == Composition(prefill_tokens=300, decode_seqs=0, context_tokens=0, num_seqs=1)
    assert c.kind == "prefill"


def test_a_later_chunk_of_a_long_prompt_counts_its_chunk_and_the_cache_before_it():
    c = composition(fake_output(cached=[("a", 2048, 952)]), {"a": 3000})
    assert c == Composition(prefill_tokens=952, decode_seqs=0, context_tokens=2048, num_seqs=1)


def test_the_last_prompt_token_is_prefill_and_the_next_token_decode():
    last = composition(fake_output(cached=[("a", 99, 1)]), {"a": 100})
    after = composition(fake_output(cached=[("a", 100, 1)]), {"a": 100})
    assert (last.prefill_tokens, last.decode_seqs) == (1, 0)
    assert (after.prefill_tokens, after.decode_seqs, after.kind) == (0, 1, "decode")


def test_a_mixed_step_sums_context_over_every_scheduled_sequence():
    out = fake_output(new=[("n", 512, 0, 256)], cached=[("d1", 130, 1), ("d2", 200, 1), ("p", 1024, 976)])
    c = composition(out, {"d1": 128, "d2": 128, "p": 2000})
    assert c == Composition(prefill_tokens=256 + 976, decode_seqs=2, context_tokens=130 + 200 + 1024, num_seqs=4)
    assert c.kind == "mixed"


def test_recomputing_a_preempted_sequence_is_prefill_even_past_its_prompt():
    c = composition(fake_output(cached=[("a", 0, 140)]), {"a": 128})  # prompt 128 + 12 outputs again
    assert (c.prefill_tokens, c.decode_seqs) == (140, 0)


def _class_fields(tree: ast.Module, name: str) -> set[str]:
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    return {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)} | {
        n.name for n in cls.body if isinstance(n, ast.FunctionDef)}


def test_the_fakes_read_fields_the_installed_vllm_has():
    """Read from vLLM's source (importing vLLM takes seconds): a renamed field fails here."""
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.origin is not None, "vLLM is in every lock: the venv is broken"
    tree = ast.parse((Path(spec.origin).parent / "v1" / "core" / "sched" / "output.py").read_text())
    for fake, real in ((FakeNewRequest, "NewRequestData"), (FakeCachedRequests, "CachedRequestData"),
                       (FakeSchedulerOutput, "SchedulerOutput")):
        assert set(fake.__dataclass_fields__) <= _class_fields(tree, real), real


@pytest.mark.parametrize("limits", [CPU, GPU, Limits(48, 1024, 4096, 20_000)], ids=["cpu", "gpu", "odd"])
@pytest.mark.parametrize("quick", [False, True])
@pytest.mark.parametrize("prefill_tok_s", [None, 500.0, 1e6])
def test_every_scenario_fits_the_engine(limits: Limits, quick: bool, prefill_tok_s: float | None):
    for s in grid(limits, quick=quick, prefill_tok_s=prefill_tok_s) + warmup_scenarios(limits):
        assert s.batch <= limits.max_num_seqs and s.prompts <= limits.max_num_seqs, s
        assert all(n < limits.max_model_len for n in s.prompt_lens), s
        assert s.context < limits.max_model_len, s
        assert s.batch * (s.context + s.decode_steps) <= 0.8 * limits.kv_tokens, s
        if s.prompts > 1:  # several prompts arrive in one step
            assert all(s.prompts * n <= limits.max_num_batched_tokens for n in s.prompt_lens), s


@pytest.mark.parametrize("limits", [CPU, GPU, Limits(48, 1024, 4096, 200_000)], ids=["cpu", "gpu", "odd"])
def test_the_grid_spans_prefill_decode_and_mixed(limits: Limits):
    scenarios = grid(limits)
    prefill_lens = {n for s in scenarios if not s.batch for n in s.prompt_lens}
    assert min(prefill_lens) <= 16
    assert max(prefill_lens) >= min(limits.max_num_batched_tokens, limits.max_model_len - 1)  # a full step
    assert any(s.prompts > 1 and not s.batch for s in scenarios), "several prompts in one prefill step"
    decode = [s for s in scenarios if s.batch and s.decode_steps >= 3]
    contexts = sorted({s.context for s in decode})
    assert len(contexts) >= 2 and contexts[-1] >= limits.max_model_len // 4, contexts
    short = {s.batch for s in decode if s.context == contexts[0]}
    assert {1, limits.max_num_seqs} <= short and len(short) >= 5, short
    assert {1, limits.max_num_seqs} <= {s.batch for s in scenarios if s.batch and s.prompt_lens}, "mixed"
    assert all(s.repeats >= 2 for s in scenarios if s.prompt_lens)
    assert all(s.repeats >= 3 for s in scenarios if s.prompt_lens and not s.batch and s.prompts == 1)


def test_long_context_batches_follow_the_measured_prefill_rate():
    def long_batches(rate):
        return {s.batch for s in grid(GPU, prefill_tok_s=rate) if s.context > 128}

    slow, fast = long_batches(500.0), long_batches(50_000.0)
    assert slow < fast and 1 in slow, (slow, fast)
    for s in grid(CPU, prefill_tok_s=500.0):
        if s.context > 128:
            assert s.batch * s.context <= 500.0 * 16, s  # under 16 s of prefill each


def test_the_prefill_rate_is_the_fastest_prefill_only_step():
    assert prefill_rate(fake_steps()) == pytest.approx(500 / 0.24)  # not 512 / 0.25, nor the mixed step
    assert prefill_rate([s for s in fake_steps() if s.composition.kind != "prefill"]) is None


def test_a_model_longer_than_the_step_budget_gets_a_chunked_prefill():
    assert max(n for s in grid(GPU) for n in s.prompt_lens) > GPU.max_num_batched_tokens
    assert max(n for s in grid(CPU) for n in s.prompt_lens) <= CPU.max_num_batched_tokens  # 2048 = budget


def test_quick_is_a_smaller_grid_of_the_same_kinds():
    full, quick = grid(CPU), grid(CPU, quick=True)
    cost = lambda g: sum(s.batch * s.context + s.repeats * s.prompts * sum(s.prompt_lens) for s in g)  # noqa: E731
    assert len(quick) < len(full) and cost(quick) < cost(full) / 2
    assert any(not s.batch for s in quick) and any(s.batch and s.prompt_lens for s in quick)
    assert any(s.batch and not s.prompt_lens for s in quick)


def fake_steps() -> list[Step]:
    return [Step(Composition(512, 0, 0, 1), 0.25), Step(Composition(500, 0, 0, 1), 0.24),
            Step(Composition(0, 8, 1024, 8), 0.03), Step(Composition(0, 8, 1032, 8), 0.031),
            Step(Composition(64, 8, 1100, 9), 0.06)]


def test_the_report_has_exactly_the_fitters_schema_plus_extras():
    doc = json.loads(json.dumps(report(
        hardware="cpu", model="smollm2-135m-instruct", tensor_parallel_size=1, dtype="float32",
        vllm_version="0.32.0", max_num_seqs=64, max_num_batched_tokens=2048, block_size=128,
        steps=fake_steps(), extra={"quick": True})))
    required = {"schema", "hardware", "cpu_model", "model", "tensor_parallel_size", "dtype", "vllm_version",
                "engine", "steps"}
    assert set(doc) == required | {"quick"}
    assert doc["schema"] == 1 and isinstance(doc["cpu_model"], str) and doc["cpu_model"]
    assert doc["engine"] == {"max_num_seqs": 64, "max_num_batched_tokens": 2048, "block_size": 128}
    assert len(doc["steps"]) == 5
    for step, fake in zip(doc["steps"], fake_steps()):
        for key in ("prefill_tokens", "decode_seqs", "context_tokens", "num_seqs"):
            assert isinstance(step[key], int) and step[key] == getattr(fake.composition, key)
        assert isinstance(step["step_s"], float) and step["step_s"] == fake.step_s
    assert [s["kind"] for s in doc["steps"]] == ["prefill", "prefill", "decode", "decode", "mixed"]


def test_the_summary_groups_by_kind_then_size():
    rows = summary(fake_steps())
    assert [(kind, len(times)) for kind, _, times in rows] == [("prefill", 2), ("decode", 2), ("mixed", 1)]
    assert [name for _, name, _ in rows] == ["~512 prompt tokens, ~0 cached", "8 seqs, ~128 ctx/seq",
                                             "~8 decoding + ~64 prompt"]
    assert sorted(rows[0][2]) == [0.24, 0.25]


def test_a_scenario_label_names_both_phases():
    assert Scenario(batch=8, context=128, decode_steps=5, prompt_lens=(64, 256)).label() == \
        "decode 8 x 128 + prefill 1 x 64/256"
