"""Messages drawn from hashed blocks of words (pure): how a trace's prompts are made.

A :class:`PromptRecipe` says which hashed blocks a message starts with and how many
tokens it has in all; :class:`BlockText` draws the words, each block from the seed and
its hash id alone, the rest from the seed and the recipe's ``key``. The same recipe
gives the same text in any process, so a plan can travel as recipes (a few numbers per
request) and be drawn where it is sent, and two messages sharing their first ``k``
blocks share their first ``k x block_size`` words exactly.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from loadtest.errors import WorkloadError

MIN_WORDS = 100
_BLOCK, _TAIL = 0, 1


class BlockWords(BaseModel):
    """What messages are drawn from: single-token ``words``, the ``seed`` and the number of
    words of a hashed block (``None``: no blocks, a trace without hashes)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    words: tuple[str, ...]
    seed: int
    block_size: int | None = Field(None, ge=1)


class PromptRecipe(BaseModel):
    """A drawn message of ``tokens`` words: the blocks of ``blocks`` (hash ids), in order,
    then words of its own drawn by ``key`` (unique per message), cut to ``tokens``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    blocks: tuple[int, ...] = ()
    key: int
    tokens: int = Field(ge=1)


class BlockText:
    """Draws the text of recipes (deterministic; each block drawn once and kept)."""

    def __init__(self, source: BlockWords) -> None:
        if len(source.words) < MIN_WORDS:
            raise WorkloadError(f"tokenizer has only {len(source.words)} single-token words; cannot build exact prompts")
        self.words = np.array(source.words, dtype=object)
        self.seed = source.seed
        self.block_size = source.block_size
        self._blocks: dict[int, np.ndarray] = {}

    def _draw(self, kind: int, key: int, n: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, kind, key & 0xFFFFFFFFFFFFFFFF])
        return rng.integers(0, len(self.words), size=n)

    def block(self, hash_id: int) -> np.ndarray:
        if (picks := self._blocks.get(hash_id)) is None:
            assert self.block_size is not None
            picks = self._blocks[hash_id] = self._draw(_BLOCK, hash_id, self.block_size)
        return picks

    def text(self, recipe: PromptRecipe) -> str:
        """The message of ``recipe``: exactly ``recipe.tokens`` words."""
        parts = [self.block(h) for h in recipe.blocks] if self.block_size else []
        have = sum(len(p) for p in parts)
        if have < recipe.tokens:
            parts.append(self._draw(_TAIL, recipe.key, recipe.tokens - have))
        picks = np.concatenate(parts)[: recipe.tokens]
        return "".join(self.words[picks])
