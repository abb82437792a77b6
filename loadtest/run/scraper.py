"""Periodic scraping of the target's ``/metrics`` into a server timeline (a thread)."""

from __future__ import annotations

import threading
import time

import httpx

from loadtest.analysis.server_metrics import ServerSample, extract_server_sample, parse_samples
from loadtest.errors import ParseError


def busy_requests(sample: ServerSample) -> float | None:
    """Requests the server counts in flight (``None``: it exports no such gauge)."""
    if sample.in_flight is not None:
        return sample.in_flight
    if sample.running is not None:
        return sample.running + (sample.waiting or 0.0)
    return None


class MetricsScraper:
    """Scrapes ``url`` every ``interval_s`` on a background thread; ``scrape_now`` adds a
    sample synchronously (used at stage boundaries). A target without ``/metrics`` (404)
    is scraped no further. ``model``: the tested model, or every model of a mix."""

    def __init__(self, url: str, *, model: str | frozenset[str], interval_s: float, t0_unix: float,
                 timeout_s: float = 5.0, api_key: str | None = None) -> None:
        self.url = url
        self.model = model
        self.interval_s = interval_s
        self.t0_unix = t0_unix
        self.samples: list[ServerSample] = []
        self.ok = 0
        self.failed = 0
        self.last_error: str | None = None
        self.unavailable = False
        # A gateway with API keys guards /metrics too: send the run's key.
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self._client = httpx.Client(timeout=timeout_s, headers=headers)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="metrics-scraper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.scrape_now()

    def scrape_now(self) -> ServerSample | None:
        """Scrape once; returns the sample or ``None`` on failure."""
        if self.unavailable:
            return None
        with self._lock:
            at = time.time()
            try:
                response = self._client.get(self.url)
                if response.status_code == 404:
                    self.unavailable = True
                    self.last_error = f"{self.url} answered 404; no server timeline"
                    return None
                response.raise_for_status()
                sample = extract_server_sample(
                    parse_samples(response.text), t=at - self.t0_unix, model=self.model
                )
            except (httpx.HTTPError, ParseError) as exc:
                self.failed += 1
                self.last_error = f"{type(exc).__name__}: {exc}"[:300]
                return None
            self.ok += 1
            self.samples.append(sample)
            return sample

    def wait_settled(self, timeout_s: float) -> tuple[float | None, float | None]:
        """Scrape until the server counts no request in flight (its gateway's in-flight
        gauge, else its engines' running plus waiting), at most ``timeout_s``: the count
        at the last scrape and the seconds it took to reach zero (``None``: it did not, or
        the server exports no such gauge)."""
        start = time.monotonic()
        while True:
            sample = self.scrape_now()
            busy = None if sample is None else busy_requests(sample)
            waited = time.monotonic() - start
            if busy is None or busy == 0:
                return busy, (waited if busy == 0 else None)
            if waited >= timeout_s:
                return busy, None
            time.sleep(0.1)

    def latest(self) -> ServerSample | None:
        return self.samples[-1] if self.samples else None

    def between(self, start_t: float, end_t: float) -> list[ServerSample]:
        """Samples with ``start_t <= t <= end_t`` (seconds since the run started)."""
        return [s for s in list(self.samples) if start_t <= s.t <= end_t]

    def stop(self) -> None:
        """Stop the thread and close the client (idempotent)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.interval_s + 6.0)
        self._client.close()
