"""Multi-turn chat sessions that resend their whole history, with no session header.

Each session (English or Vietnamese, half each by default) starts with the assistant's
system prompt (one per language, shared by every session of that language) and a first
message drawn from the language's bundled prompts; every later turn is a short
question or request of the same language. Turn ``k``'s prompt is turn ``k-1``'s prompt,
its answer (made-up ids of the answer's length: generated text is never repeated
elsewhere) and the new message, token for token, as a chat client resends a
conversation. Sessions arrive as a Poisson process; a later turn is sent a think time
after the previous one (fixed in advance, so every policy gets the same requests at
the same times: a replay of the conversations).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.workloads.requests import FreshIds, RequestSet, TimedRequest
from simulator.workloads.texts import LANGUAGES, ChatFormat, LanguageTexts


@dataclass(frozen=True)
class ConversationMix:
    """How many sessions, how fast they arrive, how long they run."""

    sessions: int = 2000
    session_rate: float = 2.0  # sessions started per second
    turns: tuple[int, int] = (3, 8)  # inclusive range
    think_s: tuple[float, float] = (20.0, 60.0)  # between a turn's start and the next
    output_tokens: tuple[int, int] = (64, 512)
    vietnamese_share: float = 0.5
    seed: int = 0

    def __post_init__(self) -> None:
        if self.sessions < 1 or self.session_rate <= 0 or not 1 <= self.turns[0] <= self.turns[1]:
            raise ValueError("a conversation mix needs sessions >= 1, session_rate > 0 and 1 <= turns")
        if not 0 <= self.vietnamese_share <= 1:
            raise ValueError("vietnamese_share must be within 0..1")


def conversation_requests(mix: ConversationMix, tokenizer) -> RequestSet:
    """Every turn of every session, in arrival order."""
    rng = np.random.default_rng(mix.seed)
    chat = ChatFormat.of(tokenizer)
    texts = {lang: LanguageTexts.of(tokenizer, lang) for lang in LANGUAGES}
    fresh = FreshIds()
    starts = np.cumsum(rng.exponential(1.0 / mix.session_rate, mix.sessions))
    out: list[TimedRequest] = []
    for session, start in enumerate(starts.tolist()):
        lang = texts["vi" if rng.random() < mix.vietnamese_share else "en"]
        prompt = chat.system(lang.assistant_system)
        message = lang.requests[rng.integers(len(lang.requests))]
        t = start
        for turn in range(int(rng.integers(mix.turns[0], mix.turns[1] + 1))):
            if turn:
                t += float(rng.uniform(*mix.think_s))
                message = lang.questions[rng.integers(len(lang.questions))]
            prompt = prompt + chat.user_turn(message)
            output = int(rng.integers(mix.output_tokens[0], mix.output_tokens[1] + 1))
            out.append(TimedRequest(t, prompt, output, session, turn))
            prompt = prompt + chat.answer(fresh.take(output))
    out.sort(key=lambda r: r.t_s)
    return RequestSet("chat", tuple(out), f"{mix.sessions} generated sessions, "
                      f"{round(100 * mix.vietnamese_share)}% Vietnamese, turns {mix.turns[0]}-{mix.turns[1]}")
