"""What one answered request leaves behind for metering and the audit trail (pure).

A :class:`RequestRecord` is made once per request, when it ends (or is refused), on
the replica's event loop: a handful of fields, no formatting. Everything else (the
usage store's rows, the audit line, redaction) happens later in the ledger's thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(slots=True)  # not frozen: a frozen __init__ costs twice as much on the event loop
class RequestRecord:
    """One request: who (the key's name, never the key), which model, how it ended and
    what it used. ``engine_s``: from the hand-off to the engine until the request ended
    (its last chunk, a cut or a refusal: 0 when it never reached the engine).
    ``cached_tokens``: prompt tokens the engine found in its prefix cache (None: the
    engine does not say). ``prompt_ids`` and ``chunks`` only when the audit records
    content (decoded and redacted off the event loop)."""

    at: float  # time.time() when the request ended
    key: str
    model: str
    endpoint: str
    status: int
    prompt_tokens: int = 0
    cached_tokens: int | None = None
    output_tokens: int = 0
    engine_s: float = 0.0
    latency_s: float = 0.0
    request_id: str | None = None
    prompt_ids: Sequence[int] | None = None
    chunks: Sequence | None = None  # the GenerationChunks the client got (content capture)
    decode: object = None  # the tokenizer's decode, for prompt_ids

    @property
    def ok(self) -> bool:
        return self.status == 200


def output_text(chunks: Sequence) -> list[str]:
    """Each choice's text from captured chunks (``GenerationChunk``s), by choice index."""
    texts: dict[int, list[str]] = {}
    for chunk in chunks:
        for delta in chunk.deltas:
            texts.setdefault(delta.index, []).append(delta.text)
    return ["".join(texts[i]) for i in sorted(texts)]
