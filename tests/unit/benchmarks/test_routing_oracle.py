"""benchmarks/routing_oracle.py: the day it replays (pure configuration, no simulation)."""

from benchmarks.routing_oracle import day_config
from simulator.oracles.clairvoyant import first_stage_arrivals


def test_the_day_is_the_seeded_real_time_day_profile():
    config = day_config("24h", seed=3)
    assert config.seed == 3 and config.duration_s == 24 * 3600
    assert (config.profile.kind, config.profile.peak_rate, config.profile.trough_rate) == ("day", 30, 3)


def test_other_seeds_give_other_arrivals():
    first, again, other = (first_stage_arrivals(day_config("10m", seed=s)) for s in (0, 0, 1))
    assert list(first) == list(again) and list(first) != list(other)
