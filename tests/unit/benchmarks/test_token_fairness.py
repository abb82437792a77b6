"""The token-fairness benchmark's arithmetic (pure): tokens weighted as the gateway
counts them, and each key's share of them and of the requests."""

import pytest

from benchmarks.token_fairness import KeyServed, prompt, shares
from serving.config.priority import PrioritySpec


def test_shares_weigh_prompt_and_output_tokens_as_the_gateway_does():
    served = {"long": KeyServed(ok=10, prompt_tokens=4000, output_tokens=320),
              "short": KeyServed(ok=40, refused=7, prompt_tokens=4000, output_tokens=1280)}
    got = shares(served, PrioritySpec())  # 1 per prompt token, 2 per output token
    assert got["long"]["tokens"] == pytest.approx(4640 / (4640 + 6560))
    assert got["short"]["requests"] == pytest.approx(0.8)
    assert shares({"a": KeyServed(), "b": KeyServed()}, PrioritySpec())["a"] == {"tokens": 0.0, "requests": 0.0}


def test_prompts_share_no_prefix_and_grow_with_the_tokens_asked():
    assert prompt(1, 100).split()[:3] != prompt(2, 100).split()[:3]
    assert prompt(1, 100) == prompt(1, 100)  # drawn with the request's own seed
    assert len(prompt(1, 400).split()) == 399 and len(prompt(1, 100).split()) == 99


def test_refusals_add_up_over_the_gateway_replicas():
    from benchmarks.common.saturating_clients import refusals

    text = ('# TYPE serveout_key_rejected_requests counter\n'
            'serveout_key_rejected_requests_total{gateway_replica="a",key="long",reason="overloaded"} 3.0\n'
            'serveout_key_rejected_requests_total{gateway_replica="b",key="long",reason="overloaded"} 4.0\n'
            'serveout_key_rejected_requests_total{gateway_replica="b",key="short",reason="fair_share"} 1.0\n')
    assert refusals(text) == {"long overloaded": 7.0, "short fair_share": 1.0}
