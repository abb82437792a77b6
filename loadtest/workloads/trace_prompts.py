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

import numpy as np

from loadtest.errors import WorkloadError
from loadtest.workloads.base import Session, Turn, WorkloadContext, WorkloadPlan
from loadtest.workloads.replay import ReplayPlan, ReplayRequest, TraceSelection, replay_plan
from loadtest.workloads.synthetic import prompt_overhead
from loadtest.workloads.tokens import count_tokens, single_token_words

CHECKED_PROMPTS = 4  # prompts re-encoded to check the words stay one token each
_BLOCK, _TAIL = 0, 1


class BlockText:
    """Words for hashed blocks and for each request's own tokens (deterministic)."""

    def __init__(self, words: tuple[str, ...], seed: int, block_size: int | None) -> None:
        if len(words) < 100:
            raise WorkloadError(f"tokenizer has only {len(words)} single-token words; cannot build exact prompts")
        self.words = np.array(words, dtype=object)
        self.seed = seed
        self.block_size = block_size
        self._blocks: dict[int, np.ndarray] = {}

    def _draw(self, kind: int, key: int, n: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, kind, key & 0xFFFFFFFFFFFFFFFF])
        return rng.integers(0, len(self.words), size=n)

    def block(self, hash_id: int) -> np.ndarray:
        if (picks := self._blocks.get(hash_id)) is None:
            assert self.block_size is not None
            picks = self._blocks[hash_id] = self._draw(_BLOCK, hash_id, self.block_size)
        return picks

    def text(self, index: int, request: ReplayRequest, length: int) -> str:
        """The message of ``request`` (the ``index``-th of the trace): ``length`` tokens."""
        parts = [self.block(h) for h in request.hash_ids] if self.block_size else []
        have = sum(len(p) for p in parts)
        if have < length:
            parts.append(self._draw(_TAIL, index, length - have))
        picks = np.concatenate(parts)[:length] if parts else np.zeros(0, dtype=np.int64)
        return "".join(self.words[picks])


def trace_texts(plan: ReplayPlan, tokenizer, *, seed: int, lengths: list[int]) -> list[str]:
    """Each request's message of ``lengths[i]`` tokens, blocks shared as the hashes are."""
    text = BlockText(single_token_words(tokenizer), seed, plan.block_size)
    too_many = next((i for i, r in enumerate(plan.requests)
                     if plan.block_size and (len(r.hash_ids) - 1) * plan.block_size >= r.input_tokens), None)
    if too_many is not None:
        r = plan.requests[too_many]
        raise WorkloadError(f"trace {plan.source}: request {too_many} has {len(r.hash_ids)} blocks for "
                            f"{r.input_tokens} tokens; is block_size={plan.block_size} right?")  # fmt: skip
    texts = [text.text(i, r, n) for i, (r, n) in enumerate(zip(plan.requests, lengths))]
    for t, n in list(zip(texts, lengths))[:CHECKED_PROMPTS]:
        if (got := count_tokens(tokenizer, t)) != n:
            raise WorkloadError(f"a synthesised prompt of {n} words is {got} tokens with this tokenizer; "
                                "its words do not stay one token each")
    return texts


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
        texts = trace_texts(plan, tokenizer, seed=ctx.seed, lengths=lengths)
        sessions = tuple(
            Session(id=r.session, turn_offset=r.turn,
                    turns=(Turn(content=t, max_tokens=r.output_tokens, expected_prompt_tokens=n + overhead),))
            for r, t, n in zip(plan.requests, texts, lengths)
        )  # fmt: skip
        return WorkloadPlan(sessions=sessions)
