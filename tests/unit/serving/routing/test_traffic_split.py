"""A split model name's version per sticky key: sticky, close to the weight, and a
key on the canary stays there when the weight grows."""

from serving.config.rollout import TrafficSplit
from serving.routing.traffic_split import choose_version, sticky_key

KEYS = [f"session:{i}" for i in range(4000)]


def split(percent, canary="clinic-v2"):
    return TrafficSplit(name="clinic", stable="clinic", canary=canary, canary_percent=percent)


def on_canary(percent):
    return {k for k in KEYS if choose_version(split(percent), k) == "clinic-v2"}


def test_the_share_follows_the_weight_and_growing_it_keeps_every_canary_key():
    shares = {p: on_canary(p) for p in (5, 25, 50)}
    for percent, keys in shares.items():
        assert abs(len(keys) / len(KEYS) - percent / 100) < 0.025, (percent, len(keys))
    assert shares[5] <= shares[25] <= shares[50]
    assert on_canary(0) == set() and on_canary(100) == set(KEYS)


def test_the_same_key_always_gets_the_same_version():
    assert all(choose_version(split(50), k) == choose_version(split(50), k) for k in KEYS[:200])
    assert choose_version(TrafficSplit(name="clinic", stable="clinic-v2"), "session:1") == "clinic-v2"


def test_a_session_sticks_before_a_key_and_a_key_before_the_request():
    assert sticky_key("s1", "clinic-app", "r1") == "session:s1"
    assert sticky_key(None, "clinic-app", "r1") == "key:clinic-app"
    assert sticky_key(None, None, "r1") == "request:r1"
