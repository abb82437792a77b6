"""The ``trace`` workload: a trace's requests with prompts synthesised to their lengths.

Each hashed block of the trace becomes ``block_size`` words of the model's tokenizer,
drawn from the run's seed and the block's hash id, so two requests that share their
first ``k`` hash ids share their first ``k x block_size`` prompt tokens exactly, and no
other prompt tokens (a request's tokens past its blocks, and every token of a trace
without hashes, are its own). The words are whole single tokens (`` word``), so the
message is exactly ``input_length`` tokens (plus the chat template's, recorded as the
expected prompt tokens; ``include_template=true`` makes ``input_length`` the whole
prompt). Output lengths are asked with ``max_tokens``.

With ``--profile replay`` the plan holds the selected requests in arrival order, one
session each, labelled with the trace's session and turn (the profile sends each at its
time). With another profile the same requests are sent in that order, cycled.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from loadtest.errors import WorkloadError
from loadtest.workloads.base import Session, Turn, WorkloadContext, WorkloadPlan
from loadtest.workloads.blocks import BlockText, BlockWords, PromptRecipe
from loadtest.workloads.replay import ReplayPlan, TraceSelection, replay_plan
from loadtest.workloads.synthetic import prompt_overhead
from loadtest.workloads.tokens import count_tokens, single_token_words

CHECKED_PROMPTS = 4  # prompts re-encoded to check the words stay one token each


def trace_recipes(plan: ReplayPlan, lengths: list[int]) -> list[PromptRecipe]:
    """Each request's message of ``lengths[i]`` tokens: its blocks, then its own tokens."""
    block_size = plan.block_size
    too_many = next((i for i, r in enumerate(plan.requests)
                     if block_size and (len(r.hash_ids) - 1) * block_size >= r.input_tokens), None)
    if too_many is not None:
        r = plan.requests[too_many]
        raise WorkloadError(f"trace {plan.source}: request {too_many} has {len(r.hash_ids)} blocks for "
                            f"{r.input_tokens} tokens; is block_size={block_size} right?")  # fmt: skip
    return [PromptRecipe(blocks=r.hash_ids if block_size else (), key=i, tokens=n)
            for i, (r, n) in enumerate(zip(plan.requests, lengths))]  # fmt: skip


def trace_prompts(plan: ReplayPlan, tokenizer, *, seed: int,
                  lengths: list[int]) -> tuple[BlockWords, list[PromptRecipe], list[str]]:
    """Each request's message of ``lengths[i]`` tokens, blocks shared as the hashes are:
    what they are drawn from, their recipes (a plan travels as these) and their texts."""
    words = BlockWords(words=single_token_words(tokenizer), seed=seed, block_size=plan.block_size)
    text = BlockText(words)
    recipes = trace_recipes(plan, lengths)
    texts = [text.text(r) for r in recipes]
    for t, n in list(zip(texts, lengths))[:CHECKED_PROMPTS]:
        if (got := count_tokens(tokenizer, t)) != n:
            raise WorkloadError(f"a synthesised prompt of {n} words is {got} tokens with this tokenizer; "
                                "its words do not stay one token each")
    return words, recipes, texts


class TraceWorkload(TraceSelection):
    """The requests of a trace file (Mooncake-style JSONL, BurstGPT or Azure CSV) with
    prompts of their exact input lengths, sharing prefixes exactly where the trace's
    block hashes do; ``--profile replay`` sends them at their recorded times."""

    kind: Literal["trace"] = "trace"
    positional: ClassVar[str] = "path"
    needs_tokenizer: ClassVar[bool] = True
    include_template: bool = False

    @property
    def requests_per_session(self) -> int:
        return 1

    def plan(self) -> ReplayPlan:
        return replay_plan(self.selection())

    def build(self, count: int, ctx: WorkloadContext) -> WorkloadPlan:
        """Every selected request once, in arrival order (``count`` is not used: the
        trace decides)."""
        del count
        plan = self.plan()
        tokenizer = ctx.tokenizer()
        overhead = prompt_overhead(tokenizer, chat=ctx.chat)
        lengths = [r.input_tokens - overhead if self.include_template else r.input_tokens for r in plan.requests]
        if min(lengths) < 1:
            raise WorkloadError(f"include_template: a request of the trace is shorter than the template's {overhead} tokens")
        words, recipes, texts = trace_prompts(plan, tokenizer, seed=ctx.seed, lengths=lengths)
        sessions = tuple(
            Session(id=r.session, turn_offset=r.turn,
                    turns=(Turn(content=t, recipe=recipe, max_tokens=r.output_tokens,
                                expected_prompt_tokens=n + overhead),))
            for r, t, recipe, n in zip(plan.requests, texts, recipes, lengths)
        )  # fmt: skip
        return WorkloadPlan(sessions=sessions, words=words)
