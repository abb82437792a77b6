"""OpenAI's rate-limit headers from a key's rpm and tpm budgets (pure; the clock is the
limiter's).

``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``, for each limit the key has:

- ``limit``: the budget this replica enforces (the key's limit divided among the N
  replicas that each enforce a share, :mod:`serving.admission.key_limits`; the key's
  own limit with one replica), rounded down;
- ``remaining``: what the budget holds now, rounded down (never below 0): the requests
  (tokens) that would be admitted right now;
- ``reset``: how long until the budget is full again, in OpenAI's format (``1s``,
  ``6m0s``, ``120ms``; rounded up to the millisecond, so a client that waits it is never
  early).
"""

from __future__ import annotations

import math

from serving.admission.api_keys import Caller
from serving.admission.key_limits import KeyRateLimiter

_KINDS = (("rpm", "requests"), ("tpm", "tokens"))


def format_reset(seconds: float) -> str:
    """A duration as OpenAI writes it (Go's ``time.Duration`` style): ``0s``, ``250ms``,
    ``1s``, ``1.5s``, ``6m0s``, ``1h2m3s``; rounded up to the millisecond."""
    ms = math.ceil(max(0.0, seconds) * 1000 - 1e-6)
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs = f"{rest // 1000}.{rest % 1000:03d}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{secs}"
    return f"{minutes}m{secs}" if minutes else secs


def rate_limit_headers(limiter: KeyRateLimiter, caller: Caller) -> dict[str, str]:
    """The headers for ``caller``'s budgets now; empty when its key has neither limit.
    O(1): two bucket reads."""
    headers: dict[str, str] = {}
    now = None
    for limit, word in _KINDS:
        if getattr(caller.limits, limit) is None:
            continue
        bucket = limiter.bucket(caller, limit)
        now = limiter.clock() if now is None else now
        level, to_full = bucket.remaining(now)
        headers[f"x-ratelimit-limit-{word}"] = str(max(1, math.floor(bucket.capacity + 1e-9)))
        headers[f"x-ratelimit-remaining-{word}"] = str(max(0, math.floor(level + 1e-9)))
        headers[f"x-ratelimit-reset-{word}"] = format_reset(to_full)
    return headers
