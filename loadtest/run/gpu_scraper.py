"""GPU telemetry sampled on a thread: DCGM exporters over HTTP and/or NVML (this machine).

Every ``interval_s`` each source is read and every GPU of every source is combined
into one :class:`~loadtest.analysis.summary.GpuSample` (power and energy of all GPUs
together, :func:`loadtest.analysis.gpu.combine`). A source that fails is counted and
its last error kept; the run goes on.
"""

from __future__ import annotations

import threading
import time

import httpx

from loadtest.analysis.gpu import GpuReading, combine, parse_dcgm
from loadtest.analysis.summary import GpuReport, GpuSample
from loadtest.config import GpuConfig
from loadtest.errors import ParseError
from loadtest.run.nvml import Nvml, NvmlError


class GpuScraper:
    """Samples ``config``'s sources every ``config.interval_s`` (``t``: seconds since
    ``t0_unix``); :meth:`sample_now` adds one sample synchronously."""

    def __init__(self, config: GpuConfig, *, t0_unix: float, timeout_s: float = 5.0) -> None:
        self.config = config
        self.t0_unix = t0_unix
        self.samples: list[GpuSample] = []
        self.ok = 0
        self.failed = 0
        self.last_error: str | None = None
        self._client = httpx.Client(timeout=timeout_s)
        self._nvml: Nvml | None = None
        if config.nvml:
            try:
                self._nvml = Nvml.open()
            except NvmlError as exc:
                self.failed += 1
                self.last_error = f"NVML: {exc}"
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpu-scraper", daemon=True)

    @property
    def sources(self) -> tuple[str, ...]:
        return (*self.config.dcgm_urls, *(("nvml",) if self.config.nvml else ()))

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.config.interval_s):
            self.sample_now()

    def _read(self) -> list[GpuReading]:
        readings: list[GpuReading] = []
        for i, url in enumerate(self.config.dcgm_urls):
            response = self._client.get(url)
            response.raise_for_status()
            readings += parse_dcgm(response.text, source=f"{i}:")
        if self._nvml is not None:
            readings += self._nvml.readings()
        return readings

    def sample_now(self) -> GpuSample | None:
        """Read every source once; the combined sample, or ``None`` when a source failed."""
        with self._lock:
            at = time.time()
            try:
                readings = self._read()
            except (httpx.HTTPError, ParseError, NvmlError) as exc:
                self.failed += 1
                self.last_error = f"{type(exc).__name__}: {exc}"[:300]
                return None
            if not readings:
                self.failed += 1
                self.last_error = "no GPU in the telemetry"
                return None
            self.ok += 1
            sample = combine(readings, at - self.t0_unix)
            self.samples.append(sample)
            return sample

    def report(self) -> GpuReport:
        return GpuReport(sources=self.sources, samples_ok=self.ok, samples_failed=self.failed,
                         last_error=self.last_error, timeline=tuple(self.samples))

    def stop(self) -> None:
        """Stop the thread and close the sources (idempotent)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.config.interval_s + 6.0)
        self._client.close()
        if self._nvml is not None:
            self._nvml.close()
            self._nvml = None
