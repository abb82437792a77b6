"""Token counts the server did not report, counted with the model's tokenizer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from loadtest.analysis.records import RequestRecord, TokenSource
from loadtest.errors import WorkloadError


def needs_counting(record: RequestRecord) -> bool:
    return record.ok and record.output_tokens is None and record.output_text is not None


def fill_token_counts(
    records: Sequence[RequestRecord], tokenizer_loader: Callable[[], Any]
) -> tuple[list[RequestRecord], str | None]:
    """Records with missing output counts filled from their text (and missing prompt
    counts from the workload's expected count); returns them and a warning, if any."""
    missing = [r for r in records if needs_counting(r)]
    if not missing:
        return list(records), None
    try:
        tokenizer = tokenizer_loader()
    except WorkloadError as exc:
        return list(records), f"{len(missing)} answers had no usage and no tokenizer to count them: {exc}"
    out = []
    for r in records:
        if needs_counting(r):
            assert r.output_text is not None
            count = len(tokenizer.encode(r.output_text, add_special_tokens=False))
            prompt = r.prompt_tokens if r.prompt_tokens is not None else r.expected_prompt_tokens
            r = r.model_copy(
                update={"output_tokens": count, "prompt_tokens": prompt, "token_source": TokenSource.TOKENIZER}
            )
        out.append(r)
    return out, f"{len(missing)} answers had no usage; their tokens were counted with the tokenizer"
