"""The closing scrape of a stage waits until the server has accounted for every request."""

from __future__ import annotations

from loadtest.analysis.server_metrics import ServerSample
from loadtest.run.orchestrator import _scrape_when_settled


class FakeScraper:
    """Fake: replays a fixed list of in-flight counts, one per scrape."""

    def __init__(self, in_flight: list[float | None]) -> None:
        self.pending = list(in_flight)
        self.scrapes = 0

    def scrape_now(self) -> ServerSample:
        self.scrapes += 1
        value = self.pending.pop(0) if len(self.pending) > 1 else self.pending[0]
        return ServerSample(t=float(self.scrapes), in_flight=value)


def test_waits_until_nothing_is_in_flight():
    scraper = FakeScraper([2, 1, 0, 0])
    _scrape_when_settled(scraper, timeout_s=5.0)
    assert scraper.scrapes == 3


def test_a_server_without_the_gauge_is_scraped_once():
    scraper = FakeScraper([None])
    _scrape_when_settled(scraper, timeout_s=5.0)
    assert scraper.scrapes == 1


def test_gives_up_when_other_traffic_keeps_requests_in_flight():
    scraper = FakeScraper([3])
    _scrape_when_settled(scraper, timeout_s=0.25)
    assert 2 <= scraper.scrapes <= 5
