"""Builders of raw request records for the unit tests (no I/O, no server)."""

from loadtest.analysis.records import ErrorKind, RequestRecord, TokenSource

_next_id = iter(range(10**9))


def ok_record(start, ttft, gaps, *, output_tokens=None, prompt_tokens=10, scheduled=None, **extra):
    """A successful streamed request whose stream ends at its last chunk."""
    e2e = ttft + sum(gaps)
    return RequestRecord(
        id=next(_next_id),
        start_s=start,
        start_unix=1_700_000_000 + start,
        scheduled_s=scheduled,
        ok=True,
        status=200,
        ttft_s=ttft,
        e2e_s=e2e,
        itl_s=list(gaps),
        chunks=len(gaps) + 1,
        prompt_tokens=prompt_tokens,
        output_tokens=len(gaps) + 1 if output_tokens is None else output_tokens,
        token_source=TokenSource.USAGE,
        **extra,
    )


def failed_record(start, kind, elapsed=0.01, status=None):
    return RequestRecord(
        id=next(_next_id),
        start_s=start,
        start_unix=1_700_000_000 + start,
        ok=False,
        status=status,
        error_kind=kind,
        error="boom",
        e2e_s=elapsed,
    )


__all__ = ["ErrorKind", "failed_record", "ok_record"]
