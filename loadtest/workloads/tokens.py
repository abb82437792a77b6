"""Text of an exact token length, and chat-template overhead, for a given tokenizer.

Prompts are built from the tokenizer's own whole-word tokens (`` word``), which
encode back to exactly one token each with byte-level BPE tokenizers; every prompt
is re-encoded and corrected, so the length is exact for any tokenizer whose words
round-trip. The tokenizer is passed in (no loading here), so a fake tokenizer can
stand in for tests.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from loadtest.errors import WorkloadError

_WORD = re.compile(r"^ ?[a-z]{2,12}$")


class TokenizerLike(Protocol):
    """The part of a Hugging Face tokenizer the workloads use."""

    def __call__(self, text: list[str], add_special_tokens: bool = ...) -> Any: ...

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def batch_decode(self, ids: list[list[int]]) -> list[str]: ...

    def __len__(self) -> int: ...


def count_tokens(tokenizer: TokenizerLike, text: str) -> int:
    """Tokens of ``text`` without special tokens."""
    return len(tokenizer.encode(text, add_special_tokens=False))


def chat_overhead(tokenizer: Any, system: str | None = None) -> int | None:
    """Tokens the chat template adds around one user message (``None`` without a template)."""
    probe = "hello"
    messages = [] if system is None else [{"role": "system", "content": system}]
    messages.append({"role": "user", "content": probe})
    try:
        rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    except Exception:  # noqa: BLE001 - tokenizers without a template raise various errors
        return None
    ids = rendered["input_ids"] if not isinstance(rendered, list) else rendered
    return len(ids) - count_tokens(tokenizer, probe)


class PromptFactory:
    """Random word texts of exact token lengths (deterministic for a given seed)."""

    def __init__(self, tokenizer: TokenizerLike, seed: int) -> None:
        self.tokenizer = tokenizer
        self.rng = np.random.default_rng(seed)
        self.words = list(single_token_words(tokenizer))
        if len(self.words) < 100:
            raise WorkloadError(
                f"tokenizer has only {len(self.words)} single-token words; cannot build exact prompts"
            )

    def texts(self, lengths: Sequence[int]) -> list[str]:
        """One text per requested length, each encoding to exactly that many tokens."""
        drafts = [self._draft(int(n)) for n in lengths]
        if not drafts:
            return []
        encoded = self.tokenizer(drafts, add_special_tokens=False)["input_ids"]
        return [
            text if len(ids) == n else self._fix(text, int(n))
            for text, ids, n in zip(drafts, encoded, lengths)
        ]

    def _draft(self, n: int) -> str:
        picks = self.rng.integers(0, len(self.words), size=max(n, 0))
        return "".join(self.words[i] for i in picks).lstrip()

    def _fix(self, text: str, n: int) -> str:
        for _ in range(20):
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            if len(ids) == n:
                return text
            if len(ids) > n:
                text = self.tokenizer.batch_decode([ids[:n]])[0]
            else:
                text = f"{text} {self._draft(n - len(ids))}"
        raise WorkloadError(f"could not build a prompt of exactly {n} tokens with this tokenizer")


@functools.lru_cache(maxsize=4)
def single_token_words(tokenizer: TokenizerLike) -> tuple[str, ...]:
    """The tokenizer's whole-word tokens (`` word``) that encode back to one token each."""
    size = len(tokenizer)
    decoded = tokenizer.batch_decode([[i] for i in range(size)])
    candidates = sorted({(" " + s.strip()) for s in decoded if _WORD.match(s)})
    if not candidates:
        return ()
    encoded = tokenizer(candidates, add_special_tokens=False)["input_ids"]
    return tuple(word for word, ids in zip(candidates, encoded) if len(ids) == 1)
