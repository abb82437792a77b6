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

Speed: with :class:`WordTokenizer` the synthetic workloads are drawn straight as ids,
never as text (:mod:`simulator.synthetic_ids`, the same ids); a :class:`TrafficCache`
keeps the prepared plans for the next simulations of the same traffic (a sweep's
candidates at one rate and seed).
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from loadtest.config import Endpoint, LoadTestConfig
from loadtest.profiles import StagePlan
from loadtest.run.orchestrator import pool_size
from loadtest.workloads.base import WorkloadContext, WorkloadPlan
from loadtest.workloads.model_mix import named_model, session_models
from loadtest.workloads.synthetic import prompt_overhead
from loadtest.workloads.tokenizer import default_tokenizer_path, load_tokenizer
from simulator.synthetic_ids import IdPlan, IdSession, synthetic_id_plan

TURN_TEMPLATE_TOKENS = 5  # role markers around each later turn's messages
CHAT_TEMPLATE_TOKENS = 30
SYSTEM_TEMPLATE_TOKENS = 5
DEFAULT_MAX_TOKENS = 128  # assumed output length of a turn without max_tokens (prompt files)
SYNTHETIC_WORKLOADS = frozenset({"random", "shared-prefix", "multi-turn"})
_HEAD_ID = 1
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


class WordTokenizer:
    """A tokenizer of ``vocab`` made-up words, one token each (see the module docstring);
    it speaks the part of the Hugging Face API the workloads use."""

    one_token_words = True  # every word is one token and every text round-trips (simulator.synthetic_ids)

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
        if len(data) % 4 == 0 and len(data) > 64:  # the fast path for long texts: only three-letter words
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
    """One prepared session: token ids of its head (chat template, system prompt) and of
    each turn's new text, the output lengths, and the first turn's expected prompt tokens."""

    head: tuple[int, ...]
    turns: tuple[tuple[int, ...], ...]
    max_tokens: tuple[int, ...]
    think_time_s: float
    expected_prompt_tokens: int | None = None
    model: str | None = None  # the model its requests name (None: the target's)


def plan_ids(plan: WorkloadPlan, tokenizer, *, default_max_tokens: int) -> IdPlan:
    """A text plan as token ids, each turn's content tokenised with the run's tokenizer."""
    contents = [t.content for s in plan.sessions for t in s.turns]
    encoded = tokenizer(contents, add_special_tokens=False)["input_ids"]
    systems = tuple(tuple(ids) for ids in tokenizer(list(plan.systems), add_special_tokens=False)["input_ids"]) \
        if plan.systems else ()
    sessions = []
    k = 0
    for s in plan.sessions:
        turns = tuple(tuple(encoded[k + j]) for j in range(len(s.turns)))
        k += len(s.turns)
        sessions.append(IdSession(turns, tuple(t.max_tokens or default_max_tokens for t in s.turns), s.system,
                                  s.think_time_s, s.turns[0].expected_prompt_tokens, named_model(s)))
    return IdPlan(tuple(sessions), systems, plan.systems)


class StageTraffic:
    """The sessions of one stage, cycled as ``loadtest run`` cycles its prompt pool."""

    def __init__(self, plan: IdPlan, tokenizer, *, chat: bool, shares: dict[str, float] | None = None,
                 seed: int = 0) -> None:
        """``shares``: the model mix's (:func:`loadtest.workloads.model_mix.session_models`,
        with the stage's ``seed``, as ``loadtest run`` assigns them)."""
        self.wraps = 0
        self._next = 0
        heads = {}
        for system in {s.system for s in plan.sessions}:
            text = None if system is None else plan.system_texts[system]
            overhead = max(prompt_overhead(tokenizer, chat=chat, system=text), 0)
            heads[system] = (_HEAD_ID,) * overhead + (() if system is None else plan.systems[system])
        models = session_models([s.model for s in plan.sessions], shares, seed)
        self.sessions = [SessionTokens(heads[s.system], s.turns, s.max_tokens, s.think_time_s,
                                       s.expected_prompt_tokens, model) for s, model in zip(plan.sessions, models)]

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


class TrafficCache:
    """Prepared traffic kept across simulations: a sweep simulates every candidate with
    the same prompts at a given rate and seed, so each id plan is built once. Holds the
    last ``max_plans`` plans (immutable, shared) and one tokenizer loader per path."""

    def __init__(self, max_plans: int = 16) -> None:
        self.max_plans = max_plans
        self.built = 0  # plans built (the other requests reused one)
        self._plans: OrderedDict[tuple, IdPlan] = OrderedDict()
        self._loaders: dict[object, Callable[[], object]] = {}

    def id_plan(self, key: tuple, build: Callable[[], IdPlan]) -> IdPlan:
        """The plan of ``key`` (everything that decides it), built on first use."""
        plan = self._plans.get(key)
        if plan is not None:
            self._plans.move_to_end(key)
            return plan
        plan = self._plans[key] = build()
        self.built += 1
        while len(self._plans) > self.max_plans:
            self._plans.popitem(last=False)
        return plan

    def loader(self, key: object, load: Callable[[], object]) -> Callable[[], object]:
        """The loader of tokenizer ``key`` (a path, or ``None`` for :class:`WordTokenizer`):
        ``load`` called once, on first use."""
        if key not in self._loaders:
            self._loaders[key] = functools.cache(load)
        return self._loaders[key]


def stage_traffic(config: LoadTestConfig, plan: StagePlan, tokenizer_loader: Callable[[], object], *,
                  cache: TrafficCache | None = None, shares: dict[str, float] | None = None) -> StageTraffic:
    """The prepared sessions of one stage (same seed and pool size as ``loadtest run``):
    synthetic workloads drawn straight as ids (:mod:`simulator.synthetic_ids`), others
    built as text and tokenised; with ``cache``, a plan already built for the same
    workload, seed, pool size, endpoint and tokenizer is reused; ``shares``: the model
    mix's, each session given its model as ``loadtest run`` gives it."""
    ctx = WorkloadContext(seed=plan.seed(config.seed), chat=config.target.endpoint is Endpoint.CHAT,
                          tokenizer_loader=tokenizer_loader)
    count = pool_size(config, plan, config.workload.requests_per_session)

    def build() -> IdPlan:
        ids = synthetic_id_plan(config.workload, count, ctx)
        if ids is None:
            ids = plan_ids(config.workload.build(count, ctx), tokenizer_loader(),
                           default_max_tokens=DEFAULT_MAX_TOKENS)
        return ids

    key = (config.workload, ctx.seed, count, ctx.chat, config.tokenizer, config.target.model)
    ids = build() if cache is None else cache.id_plan(key, build)
    return StageTraffic(ids, tokenizer_loader(), chat=ctx.chat, shares=shares, seed=ctx.seed)


def tokenizer_loader(config: LoadTestConfig, fallback_model: str | None, *,
                     cache: TrafficCache | None = None) -> tuple[Callable[[], object], str | None]:
    """The run's tokenizer loader (:class:`WordTokenizer` for synthetic workloads without
    ``--tokenizer``), and a warning when it falls back to ``fallback_model``'s (a model
    not prepared on this machine, such as the H200 models); with ``cache``, one loader
    per tokenizer (each loaded once)."""
    warning = None
    if config.tokenizer is None and config.workload.kind in SYNTHETIC_WORKLOADS:
        key, load = None, WordTokenizer
    else:
        path = config.tokenizer or default_tokenizer_path(config.target.model)
        if config.tokenizer is None and not path.exists() and fallback_model is not None:
            warning = (f"no tokenizer for {config.target.model} here: token ids come from {fallback_model}'s "
                       f"tokenizer (synthetic lengths are exact; text prompts are counted in its tokens)")
            path = default_tokenizer_path(fallback_model)
        key, load = path, functools.partial(load_tokenizer, path)
    return (functools.cache(load) if cache is None else cache.loader(key, load)), warning
