"""GPU telemetry through a real HTTP endpoint serving DCGM exporter scrapes
(tests/fixtures/dcgm), the real parser and scraper, and a real run's summary."""

from __future__ import annotations

import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from loadtest import RunOptions, parse_profile, parse_workload, run_load_test
from loadtest.analysis.gpu import gpu_stage, parse_dcgm, window_energy
from loadtest.analysis.summary import GpuSample
from loadtest.config import GpuConfig, LoadTestConfig, TargetConfig
from loadtest.run.gpu_scraper import GpuScraper
from tests.paths import REPO
from tests.unit.loadtest.fake_openai_server import FakeServer

SCRAPES = [s for s in re.split(r"^##### .*\n", (REPO / "tests/fixtures/dcgm/scrapes.txt").read_text(), flags=re.M) if s]
WATTS = 900.0  # both GPUs together, in every scrape


class DcgmExporter(ThreadingHTTPServer):
    """Serves the recorded scrapes at /metrics, scrape ``k`` from ``k`` seconds after the
    first request (the energy counters then run as fast as the power says)."""

    daemon_threads = True

    def __init__(self) -> None:
        exporter = self
        self.first: float | None = None

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                exporter.first = exporter.first or time.monotonic()
                k = int(time.monotonic() - exporter.first) if exporter.index is None else exporter.index
                body = SCRAPES[min(k, len(SCRAPES) - 1)].encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.index: int | None = None  # a fixed scrape to serve (None: by time)
        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/metrics"


@pytest.fixture()
def exporter():
    server = DcgmExporter()
    yield server
    server.shutdown()
    server.server_close()


def test_the_parser_reads_every_gpu_and_skips_blank_fields():
    readings = parse_dcgm(SCRAPES[0])
    assert [r.key for r in readings] == ["gpu-node-1/GPU-1b2f4e0a-77c1-5d1c-9a0e-3c5d2e8f9b10",
                                         "gpu-node-1/GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"]
    assert {r.power_w for r in readings} == {400.0, 500.0}
    assert {r.utilization for r in readings} == {0.8, 0.85} and {r.memory_used_mib for r in readings} == {61000, 62000}


def test_the_scraper_samples_a_real_endpoint(exporter):
    scraper = GpuScraper(GpuConfig(dcgm_urls=(exporter.url,), interval_s=60), t0_unix=0.0)
    samples = []
    try:
        for k in range(3):
            exporter.index = k
            samples.append(scraper.sample_now())
    finally:
        scraper.stop()
    assert all(s.gpus == 2 and s.power_w == 900.0 for s in samples)
    energies = [s.energy_j for s in samples]
    assert energies[1] - energies[0] == pytest.approx(900.0) and energies[2] - energies[1] == pytest.approx(900.0)
    assert scraper.report().samples_ok == 3


def test_a_missing_exporter_is_counted_not_fatal():
    scraper = GpuScraper(GpuConfig(dcgm_urls=("http://127.0.0.1:9/metrics",)), t0_unix=0.0)
    try:
        assert scraper.sample_now() is None
    finally:
        scraper.stop()
    assert scraper.failed == 1 and "ConnectError" in scraper.last_error


def test_energy_from_counters_else_from_power():
    samples = [GpuSample(t=t, power_w=100.0 + 10 * t, energy_j=1000.0 + 150.0 * t, gpus=1) for t in range(5)]
    assert window_energy(samples, 1.0, 3.0) == (pytest.approx(300.0), "counter")
    no_counter = [s.model_copy(update={"energy_j": None}) for s in samples]
    assert window_energy(no_counter, 0.5, 3.5) == (pytest.approx(3 * 120.0), "power")  # linear power: mean x time
    assert window_energy(no_counter, 0.5, 9.0) == (None, None)  # not covered
    stage = gpu_stage(samples, start=1.0, end=3.0, output_tokens=600.0, total_tokens=900.0, source="dcgm")
    assert stage.output_tokens_per_joule == pytest.approx(2.0) and stage.joules_per_output_token == pytest.approx(0.5)


def test_a_run_reports_power_energy_and_tokens_per_joule(tmp_path, exporter):
    with FakeServer() as server:
        config = LoadTestConfig(
            target=TargetConfig(url=server.url, model="fake-model", scrape_metrics=False),
            profile=parse_profile("concurrency:users=2"), workload=parse_workload("prompts:output_len=8"),
            duration_s=2.0, gpu=GpuConfig(dcgm_urls=(exporter.url,), interval_s=0.25),
        )  # fmt: skip
        summary = run_load_test(config, RunOptions(out_dir=tmp_path))
    gpu = summary.headline.gpu
    assert gpu is not None and gpu.gpus == 2 and gpu.power_mean_w == 900.0 and gpu.energy_from == "counter"
    assert gpu.energy_j == pytest.approx(WATTS * summary.headline.window.duration_s, rel=0.25)  # counters run at 900 W
    assert gpu.utilization_mean == pytest.approx(0.825)
    tokens = summary.headline.throughput.output_tokens_per_s * summary.headline.window.duration_s
    assert gpu.output_tokens_per_joule == pytest.approx(tokens / gpu.energy_j)
    assert summary.gpu.sources == (exporter.url,) and len(summary.gpu.timeline) >= 3
    assert "output tokens per joule" in (tmp_path / "report.md").read_text()
