"""Per-key rate limits: requests and tokens per minute (pure; the clock is injected).

Each limit is a token bucket: a budget of ``limit`` that refills continuously at
``limit / 60`` per second, so a key may burst up to its per-minute limit and then
sustains exactly that rate. A request takes one from the request budget when it is
admitted. Tokens are reserved, then corrected: once tokenised, a request reserves
``prompt + n * max_tokens`` (the most it can use), and when it ends it gives back
what it did not use, so the budget ends up charged with the real usage. A refusal
says when the budget will hold enough again (Retry-After: whole seconds, >= 1).

With N gateway replicas each one enforces ``1/N`` of every limit (Serve's proxy
spreads a key's requests over them), so the app as a whole holds the key to its
limit; :meth:`KeyRateLimiter.set_sharers` rescales the budgets when N changes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from serving.errors import InvalidRequestError, RateLimitedError
from serving.admission.api_keys import Caller


class TokenBucket:
    """A per-minute budget that refills continuously (level may go below 0: a debt)."""

    def __init__(self, per_minute: int, now: float) -> None:
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self.level = self.capacity
        self._at = now

    def wait_s(self, amount: float, now: float) -> float:
        """Seconds until ``amount`` is available (0 when it is now)."""
        self._refill(now)
        return max(0.0, (amount - self.level) / self.rate)

    def scale(self, factor: float, now: float) -> None:
        """Multiply the budget, its refill rate and its level by ``factor``."""
        self._refill(now)
        self.capacity, self.rate, self.level = (
            self.capacity * factor, self.rate * factor, self.level * factor)

    def remaining(self, now: float) -> tuple[float, float]:
        """The level now and the seconds until the budget is full again."""
        self._refill(now)
        return self.level, max(0.0, (self.capacity - self.level) / self.rate)

    def add(self, amount: float, now: float) -> None:
        """Take (negative ``amount``) or give back, never above capacity."""
        self._refill(now)
        self.level = min(self.capacity, self.level + amount)

    def _refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + max(0.0, now - self._at) * self.rate)
        self._at = now


def retry_after(wait_s: float) -> int:
    return max(1, math.ceil(wait_s))


class KeyRateLimiter:
    """The rpm and tpm budgets of every key (one bucket per key name and limit)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, sharers: int = 1) -> None:
        self.clock = clock
        self.sharers = sharers
        self._buckets: dict[tuple[str, str, int], TokenBucket] = {}

    def set_sharers(self, sharers: int) -> None:
        """Enforce ``1/sharers`` of every limit from now on (budgets keep their fill)."""
        if sharers < 1 or sharers == self.sharers:
            return
        factor, now = self.sharers / sharers, self.clock()
        for bucket in self._buckets.values():
            bucket.scale(factor, now)
        self.sharers = sharers

    def bucket(self, caller: Caller, limit: str) -> TokenBucket | None:
        per_minute = getattr(caller.limits, limit)
        if per_minute is None:
            return None
        key = (caller.name, limit, per_minute)  # a changed limit (keys file reloaded) starts afresh
        if key not in self._buckets:
            self._buckets[key] = TokenBucket(per_minute / self.sharers, self.clock())
        return self._buckets[key]

    def admit(self, caller: Caller) -> "RequestBudget":
        """Take one request from ``caller``'s rpm budget, or :class:`RateLimitedError`."""
        rpm = self.bucket(caller, "rpm")
        if rpm is not None:
            now = self.clock()
            wait = rpm.wait_s(1, now)
            if wait > 0:
                raise RateLimitedError(
                    f"rate limit reached for API key `{caller.name}` on requests per minute "
                    f"(limit {caller.limits.rpm}); retry after {retry_after(wait)} s",
                    retry_after_s=retry_after(wait), reason="rpm")
            rpm.add(-1, now)
        return RequestBudget(self, caller)


class RequestBudget:
    """One admitted request's token reservation; :meth:`settle` corrects it once."""

    def __init__(self, limiter: KeyRateLimiter, caller: Caller) -> None:
        self._limiter, self._caller = limiter, caller
        self.reserved = 0
        self._settled = False

    def reserve_tokens(self, tokens: int) -> None:
        """Reserve the most this request can use, or raise: 429 when the budget is short
        now, 400 when it can never cover the request (retrying would not help)."""
        bucket = self._limiter.bucket(self._caller, "tpm")
        if bucket is None:
            return
        tpm = self._caller.limits.tpm
        if tokens > tpm:
            raise InvalidRequestError(
                f"this request may use {tokens} tokens (prompt + n * max_tokens), more than "
                f"API key `{self._caller.name}` may use per minute ({tpm}); lower max_tokens",
                param="max_tokens")
        now = self._limiter.clock()
        # This gateway's share may be below one request's tokens: a full budget then
        # lends the rest (the level goes negative and refills).
        wait = bucket.wait_s(min(tokens, bucket.capacity), now)
        if wait > 0:
            raise RateLimitedError(
                f"rate limit reached for API key `{self._caller.name}` on tokens per minute "
                f"(limit {tpm}, requested {tokens}); retry after {retry_after(wait)} s",
                retry_after_s=retry_after(wait), reason="tpm")
        bucket.add(-tokens, now)
        self.reserved = tokens

    def settle(self, used_tokens: int) -> None:
        """Charge the real usage instead of the reservation (idempotent)."""
        if self._settled:
            return
        self._settled = True
        bucket = self._limiter.bucket(self._caller, "tpm")
        if bucket is not None and self.reserved:
            bucket.add(self.reserved - used_tokens, self._limiter.clock())
