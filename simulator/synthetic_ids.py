"""Token-id plans: a workload's sessions as token ids, and the synthetic workloads built
straight as ids (pure).

``loadtest run`` builds a synthetic prompt as text (:class:`loadtest.workloads.tokens.PromptFactory`
draws random single-token words and joins them) and the simulator then tokenises it
again: ~20M words joined and split for a 20,000-session pool, most of a simulation's
set-up. With :class:`simulator.traffic.WordTokenizer` every word is one token and every
text round-trips exactly, so :func:`synthetic_id_plan` draws the same words from the
same factory (its own random generator and word list, in the same order) and keeps
their ids: the plan is the one the text path gives, id for id
(``tests/unit/simulator/test_traffic.py`` holds each workload to it), without the text.

The draws mirror ``build`` of :class:`RandomWorkload`, :class:`SharedPrefixWorkload` and
:class:`MultiTurnWorkload` (lengths from the workload's own ``draw_lengths``); another
workload, or another tokenizer, takes the text path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from loadtest.workloads.base import WorkloadContext
from loadtest.workloads.synthetic import MultiTurnWorkload, RandomWorkload, SharedPrefixWorkload, prompt_overhead
from loadtest.workloads.tokens import PromptFactory


@dataclass(frozen=True, slots=True)
class IdSession:
    """One session as token ids: each turn's new content and output length."""

    turns: tuple[tuple[int, ...], ...]
    max_tokens: tuple[int, ...]
    system: int | None = None
    think_time_s: float = 0.0
    expected_prompt_tokens: int | None = None  # the first turn's, as the workload plan records it
    model: str | None = None  # the model the session names itself (a prompt file's ``model``)


@dataclass(frozen=True)
class IdPlan:
    """A :class:`~loadtest.workloads.base.WorkloadPlan` as token ids (the system prompts
    keep their text too: the chat-template overhead is counted on it)."""

    sessions: tuple[IdSession, ...]
    systems: tuple[tuple[int, ...], ...] = ()
    system_texts: tuple[str, ...] = ()


class WordDraws:
    """:class:`PromptFactory`'s draws, kept as token ids (``word_ids[i]`` is the id of the
    factory's word ``i``)."""

    def __init__(self, tokenizer, seed: int) -> None:
        self.factory = PromptFactory(tokenizer, seed)
        # Python ints held once: every prompt's tuple refers to them (20M ids of a pool would
        # otherwise be 20M int objects, ~600 MB).
        self.word_ids = np.array([tokenizer.encode(w)[0] for w in self.factory.words], dtype=object)

    def picks(self, n: int) -> np.ndarray:
        """The word indices of one text of ``n`` words (the factory's ``_draft`` draw)."""
        return self.factory.rng.integers(0, len(self.factory.words), size=max(n, 0))

    def ids(self, lengths: Sequence[int]) -> list[tuple[int, ...]]:
        """One id tuple per length, drawn in order."""
        word_ids = self.word_ids
        return [tuple(word_ids[self.picks(int(n))].tolist()) for n in lengths]

    def texts_and_ids(self, lengths: Sequence[int]) -> tuple[list[str], list[tuple[int, ...]]]:
        """As :meth:`ids`, with the texts too (for the few system prompts)."""
        words, texts, ids = self.factory.words, [], []
        for n in lengths:
            picks = self.picks(int(n))
            texts.append("".join(words[i] for i in picks.tolist()).lstrip())
            ids.append(tuple(self.word_ids[picks].tolist()))
        return texts, ids


def synthetic_id_plan(workload, count: int, ctx: WorkloadContext) -> IdPlan | None:
    """``workload.build(count, ctx)`` as token ids, or ``None`` when this path does not
    apply (another workload, or a tokenizer whose words do not round-trip one to one).
    Invalid settings are left to the workload's own ``build`` to report."""
    tokenizer = ctx.tokenizer()
    if not getattr(tokenizer, "one_token_words", False):
        return None
    if isinstance(workload, RandomWorkload):
        return _random(workload, count, ctx, tokenizer)
    if isinstance(workload, SharedPrefixWorkload):
        return _shared_prefix(workload, count, ctx, tokenizer)
    if isinstance(workload, MultiTurnWorkload):
        return _multi_turn(workload, count, ctx, tokenizer)
    return None


def _random(w: RandomWorkload, count: int, ctx: WorkloadContext, tokenizer) -> IdPlan:
    overhead = prompt_overhead(tokenizer, chat=ctx.chat)
    inputs, outputs = w.draw_lengths(count, ctx.seed, overhead)
    ids = WordDraws(tokenizer, ctx.seed + 1).ids(inputs.tolist())
    return IdPlan(tuple(
        IdSession((t,), (o,), expected_prompt_tokens=n + overhead)
        for t, n, o in zip(ids, inputs.tolist(), outputs.tolist())
    ))


def _shared_prefix(w: SharedPrefixWorkload, count: int, ctx: WorkloadContext, tokenizer) -> IdPlan:
    draws = WordDraws(tokenizer, ctx.seed + 1)
    texts, systems = draws.texts_and_ids([w.prefix_len] * w.num_prefixes)
    overhead = prompt_overhead(tokenizer, chat=ctx.chat, system=texts[0])
    picks, questions, outputs = w.draw_lengths(count, ctx.seed)
    ids = draws.ids(questions.tolist())
    sessions = tuple(
        IdSession((t,), (o,), system=p, expected_prompt_tokens=w.prefix_len + q + overhead)
        for t, p, q, o in zip(ids, picks.tolist(), questions.tolist(), outputs.tolist())
    )
    return IdPlan(sessions, tuple(systems), tuple(texts))


def _multi_turn(w: MultiTurnWorkload, count: int, ctx: WorkloadContext, tokenizer) -> IdPlan:
    draws = WordDraws(tokenizer, ctx.seed + 1)
    texts, systems = draws.texts_and_ids([w.system_len]) if w.system_len else ([], [])
    overhead = prompt_overhead(tokenizer, chat=ctx.chat, system=texts[0] if texts else None)
    inputs, outputs = (a.tolist() for a in w.draw_lengths(count, ctx.seed))
    ids = draws.ids(inputs)
    system = 0 if systems else None
    sessions = []
    for i in range(count):
        first = i * w.turns
        turns = slice(first, first + w.turns)
        sessions.append(IdSession(tuple(ids[turns]), tuple(outputs[turns]), system=system,
                                  think_time_s=float(w.think_time_s),
                                  expected_prompt_tokens=inputs[first] + w.system_len + overhead))
    return IdPlan(tuple(sessions), tuple(systems), tuple(texts))
