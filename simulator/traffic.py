"""The load test's requests as the simulator sends them: the same workload plan, arrival
schedule and session cycling as ``loadtest run``, with token ids instead of text.

Synthetic workloads (``random``, ``shared-prefix``, ``multi-turn``) ask for exact token
lengths, so the simulator builds them with :class:`WordTokenizer` (one token per word,
microseconds per prompt) instead of the model's tokenizer (whose exact-length prompt
building takes minutes for a large pool on these cores): same classes, seeds, lengths
and sharing, only the words differ. Its chat template adds
:data:`CHAT_TEMPLATE_TOKENS` (+ :data:`SYSTEM_TEMPLATE_TOKENS` with a system prompt), an
assumption near SmolLM2's and Llama 3's templates. Prompt files (``jsonl``,
``prompts``) are real text: they use the model's tokenizer (``--tokenizer``, else the
prepared model's, else SmolLM2's with a warning).

Token ids: each turn's content is tokenised with the run's tokenizer (so lengths are
what ``loadtest run`` would send); the chat template's tokens (their count from
:func:`loadtest.workloads.synthetic.prompt_overhead`) are one constant run at the
head, so every prompt shares them as on the real server; a system prompt follows it.
A later turn of a conversation extends the previous prompt with that turn's answer
(ids unique to the session and turn: generated text is never repeated) and the new
content, so the prefix cache sees the conversation grow as the engine does.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from loadtest.config import Endpoint, LoadTestConfig
from loadtest.profiles import StagePlan
from loadtest.run.orchestrator import pool_size
from loadtest.workloads.base import WorkloadContext, WorkloadPlan
from loadtest.workloads.synthetic import prompt_overhead
from loadtest.workloads.tokenizer import default_tokenizer_path, load_tokenizer

TURN_TEMPLATE_TOKENS = 5  # role markers around each later turn's messages
CHAT_TEMPLATE_TOKENS = 30
SYSTEM_TEMPLATE_TOKENS = 5
SYNTHETIC_WORKLOADS = frozenset({"random", "shared-prefix", "multi-turn"})
_HEAD_ID = 1
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


class WordTokenizer:
    """A tokenizer of ``vocab`` made-up words, one token each (see the module docstring);
    it speaks the part of the Hugging Face API the workloads use."""

    def __init__(self, vocab: int = 8192) -> None:
        if not 2 <= vocab <= 26**3:
            raise ValueError(f"vocab must be within 2..{26**3}")
        # Word i spells i in base 26 (three letters), so ids decode arithmetically; "hello"
        # (the workloads' probe word) is last.
        words = ["".join(_LETTERS[(i // 26**k) % 26] for k in range(3)) for i in range(vocab - 1)] + ["hello"]
        self.words = [" " + w for w in words]
        self._ids = {w: i for i, w in enumerate(words)}

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        data = (" " + text.lstrip()).encode()
        if len(data) % 4 == 0:  # the fast path: only three-letter words
            codes = np.frombuffer(data, dtype=np.uint8).reshape(-1, 4).astype(np.int64)
            if (codes[:, 0] == 32).all():
                ids = ((codes[:, 1] - 97) + 26 * (codes[:, 2] - 97) + 676 * (codes[:, 3] - 97)).tolist()
                return [0, *ids] if add_special_tokens else ids
        ids = list(map(self._ids.__getitem__, text.split()))
        return [0, *ids] if add_special_tokens else ids

    def __call__(self, texts: list[str], add_special_tokens: bool = False) -> dict[str, list[list[int]]]:
        return {"input_ids": [self.encode(t, add_special_tokens) for t in texts]}

    def batch_decode(self, ids: list[list[int]]) -> list[str]:
        return ["".join(self.words[i] for i in seq) for seq in ids]

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True,
                            tokenize: bool = True) -> list[int]:
        extra = sum(SYSTEM_TEMPLATE_TOKENS for m in messages if m["role"] == "system")
        content = [i for m in messages for i in self.encode(m["content"])]
        return [_HEAD_ID] * (CHAT_TEMPLATE_TOKENS + extra) + content


@dataclass(frozen=True, slots=True)
class SessionTokens:
    """One prepared session: token ids of each turn's new text and the output lengths."""

    head: tuple[int, ...]
    turns: tuple[tuple[int, ...], ...]
    max_tokens: tuple[int, ...]
    think_time_s: float


class StageTraffic:
    """The sessions of one stage, cycled as ``loadtest run`` cycles its prompt pool."""

    def __init__(self, plan: WorkloadPlan, tokenizer, *, chat: bool, default_max_tokens: int) -> None:
        self.plan = plan
        self.wraps = 0
        self._next = 0
        contents = [t.content for s in plan.sessions for t in s.turns]
        encoded = tokenizer(contents, add_special_tokens=False)["input_ids"]
        systems = [tuple(ids) for ids in tokenizer(list(plan.systems), add_special_tokens=False)["input_ids"]] \
            if plan.systems else []
        overhead = {}
        sessions = []
        k = 0
        for s in plan.sessions:
            system = plan.system_text(s)
            if system not in overhead:
                overhead[system] = max(prompt_overhead(tokenizer, chat=chat, system=system), 0)
            head = (_HEAD_ID,) * overhead[system] + (systems[s.system] if s.system is not None else ())
            turns = tuple(tuple(encoded[k + j]) for j in range(len(s.turns)))
            k += len(s.turns)
            sessions.append(SessionTokens(head, turns, tuple(t.max_tokens or default_max_tokens for t in s.turns),
                                          s.think_time_s))
        self.sessions = sessions

    def next_session(self) -> int:
        """The next session's index in the pool (cycling, counting wraps)."""
        if self._next >= len(self.sessions):
            self._next = 0
            self.wraps += 1
        index = self._next
        self._next += 1
        return index

    @functools.lru_cache(maxsize=65_536)  # noqa: B019 - one cache per stage object, dropped with it
    def prompt(self, session: int, turn: int) -> tuple[int, ...]:
        """The prompt token ids of ``turn`` of pool session ``session``."""
        s = self.sessions[session]
        if turn == 0:
            return s.head + s.turns[0]
        answer_base = -((session + 1) * 1_000_003 + turn * 65_537)
        answer = tuple(range(answer_base, answer_base - s.max_tokens[turn - 1], -1))
        return self.prompt(session, turn - 1) + answer + (_HEAD_ID,) * TURN_TEMPLATE_TOKENS + s.turns[turn]


def stage_traffic(config: LoadTestConfig, plan: StagePlan, tokenizer_loader: Callable[[], object]) -> StageTraffic:
    """The prepared sessions of one stage (same seed and pool size as ``loadtest run``)."""
    ctx = WorkloadContext(seed=config.seed + 1000 * plan.index, chat=config.target.endpoint is Endpoint.CHAT,
                          tokenizer_loader=tokenizer_loader)
    workload_plan = config.workload.build(pool_size(config, plan, config.workload.requests_per_session), ctx)
    default = 128
    return StageTraffic(workload_plan, tokenizer_loader(), chat=ctx.chat, default_max_tokens=default)


def tokenizer_loader(config: LoadTestConfig, fallback_model: str | None) -> tuple[Callable[[], object], str | None]:
    """The run's tokenizer loader (:class:`WordTokenizer` for synthetic workloads without
    ``--tokenizer``), and a warning when it falls back to ``fallback_model``'s (a model
    not prepared on this machine, such as the H200 models)."""
    if config.tokenizer is None and config.workload.kind in SYNTHETIC_WORKLOADS:
        return functools.cache(WordTokenizer), None
    path = config.tokenizer or default_tokenizer_path(config.target.model)
    warning = None
    if config.tokenizer is None and not path.exists() and fallback_model is not None:
        warning = (f"no tokenizer for {config.target.model} here: token ids come from {fallback_model}'s "
                   f"tokenizer (synthetic lengths are exact; text prompts are counted in its tokens)")
        path = default_tokenizer_path(fallback_model)
    return functools.cache(lambda: load_tokenizer(path)), warning
