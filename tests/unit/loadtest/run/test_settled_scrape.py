"""The closing scrape of a stage waits until the server has accounted for every request,
and says what it found (the in-flight check)."""

from __future__ import annotations

from loadtest.analysis.server_metrics import ServerSample
from loadtest.run.scraper import MetricsScraper, busy_requests


class FakeScraper(MetricsScraper):
    """Fake: replays a fixed list of server samples, one per scrape (no HTTP)."""

    def __init__(self, samples: list[ServerSample]) -> None:
        self.pending = list(samples)
        self.scrapes = 0

    def scrape_now(self) -> ServerSample:
        self.scrapes += 1
        return self.pending.pop(0) if len(self.pending) > 1 else self.pending[0]


def gauge(*values):
    return [ServerSample(t=float(i), in_flight=v) for i, v in enumerate(values)]


def test_waits_until_nothing_is_in_flight():
    scraper = FakeScraper(gauge(2, 1, 0, 0))
    busy, waited = scraper.wait_settled(timeout_s=5.0)
    assert scraper.scrapes == 3 and busy == 0 and waited is not None


def test_a_server_without_the_gauge_is_scraped_once():
    scraper = FakeScraper(gauge(None))
    assert scraper.wait_settled(timeout_s=5.0) == (None, None) and scraper.scrapes == 1


def test_gives_up_when_requests_stay_in_flight():
    scraper = FakeScraper(gauge(3))
    assert scraper.wait_settled(timeout_s=0.25) == (3, None)
    assert 2 <= scraper.scrapes <= 5


def test_engine_gauges_stand_in_for_the_gateway_one():
    assert busy_requests(ServerSample(t=0, running=2, waiting=1)) == 3
    assert busy_requests(ServerSample(t=0, running=0, in_flight=4)) == 4
    assert busy_requests(ServerSample(t=0)) is None
