"""Which request-body fields a user may add (``--extra-body``, a JSONL line's own fields)
and which the load tester sets itself (pure).

Nothing is dropped silently: a field is either sent as given or refused with the option
that sets it. ``stream_options`` is merged with the load tester's (``include_usage``
stays on unless given).
"""

from __future__ import annotations

from collections.abc import Mapping

OWNED = {
    "messages": "the workload's prompt",
    "prompt": "the workload's prompt",
    "stream": "--no-stream",
    "max_tokens": "the workload's output length (output_len, or max_tokens in a JSONL line)",
    "max_completion_tokens": "the workload's output length (output_len, or max_tokens in a JSONL line)",
    "ignore_eos": "--no-exact-output",
}
"""Fields the load tester sets, and what sets them."""

MODEL_OPTION = "--model"


def refused_fields(fields: Mapping[str, object], *, model_allowed: bool) -> list[str]:
    """One line per field of ``fields`` the load tester owns (empty: all may be sent).
    ``model_allowed``: a JSONL line may name its own model (a LoRA adapter)."""
    problems = [f"{key!r} is set by {OWNED[key]}" for key in fields if key in OWNED]
    if "model" in fields and not model_allowed:
        problems.append(f"'model' is set by {MODEL_OPTION}")
    if "stream_options" in fields and not isinstance(fields["stream_options"], dict):
        problems.append("'stream_options' must be an object")
    return problems
