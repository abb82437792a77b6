"""Admission control: a hard bound on the requests a gateway holds for one model.

Past the bound a request is refused at once with :class:`OverloadedError` (429 +
Retry-After) instead of queueing: queue length and memory stay bounded under any
load, and clients get a fast, explicit signal to back off.
"""

from __future__ import annotations

from serving.errors import OverloadedError


class AdmissionTicket:
    """Held while a request is in flight; releasing twice is harmless."""

    def __init__(self, controller: "AdmissionController") -> None:
        self._controller: AdmissionController | None = controller

    def release(self) -> None:
        if self._controller is not None:
            self._controller._release()
            self._controller = None


class AdmissionController:
    """Counts in-flight requests against ``limit``."""

    def __init__(self, limit: int, *, retry_after_s: int = 1) -> None:
        if limit < 1:
            raise ValueError("admission limit must be >= 1")
        self.limit = limit
        self.retry_after_s = retry_after_s
        self._in_flight = 0

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def admit(self) -> AdmissionTicket:
        """A ticket for one request, or :class:`OverloadedError` when full."""
        if self._in_flight >= self.limit:
            raise OverloadedError(
                f"the server is at capacity ({self.limit} requests in flight); retry after "
                f"{self.retry_after_s} s",
                retry_after_s=self.retry_after_s,
            )
        self._in_flight += 1
        return AdmissionTicket(self)

    def _release(self) -> None:
        self._in_flight -= 1
