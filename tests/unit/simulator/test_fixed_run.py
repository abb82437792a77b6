"""A fixed request set on a simulated cluster: every request routed once, the engines'
hit counters, and a router that reads the simulated engines' caches."""

from serving.config.stack import RoutingPolicyName, RoutingSpec
from simulator.config import SimulationConfig
from simulator.fixed_run import Slo, run_fixed
from simulator.workloads.requests import RequestSet, TimedRequest


def doc_requests(docs: int, asks: int) -> RequestSet:
    """``docs`` prompts of 8 prefix units (1,024 tokens) asked ``asks`` times each, interleaved."""
    out = []
    for k in range(asks):
        for d in range(docs):
            prompt = tuple(range(d * 10_000, d * 10_000 + 1024)) + (900_000 + len(out),)
            out.append(TimedRequest(0.5 * len(out), prompt, 8, session=len(out)))
    return RequestSet("docs", tuple(out), "test")


def cpu(policy: RoutingPolicyName, replicas: int = 2) -> SimulationConfig:
    return SimulationConfig(hardware="cpu", model="smollm2-135m-instruct", replicas=replicas,
                            routing=RoutingSpec(policy=policy), max_in_flight=10_000)


def test_every_request_is_routed_once_and_the_hit_counters_add_up():
    requests = doc_requests(4, 3)
    result = run_fixed(requests, cpu(RoutingPolicyName.ROUND_ROBIN), Slo(60.0, 10.0))
    assert result.ok == len(requests) == sum(result.routed)
    assert result.prompt_tokens_queried >= requests.prompt_tokens
    assert 0 < result.hit_rate < 1
    assert result.max_over_mean_routed == 1.0


def test_the_cache_aware_router_reads_the_engines_and_keeps_documents_together():
    requests = doc_requests(4, 3)
    aware = run_fixed(requests, cpu(RoutingPolicyName.CACHE_AWARE, replicas=4), Slo(60.0, 10.0))
    spread = run_fixed(requests, cpu(RoutingPolicyName.ROUND_ROBIN, replicas=4), Slo(60.0, 10.0))
    # 4 documents on 4 replicas: round-robin sends each document's asks to a new replica
    # every time (4 docs x 3 asks, rotating by 4: the same replica), so compare to the best:
    # every ask after a document's first hits its 8 units.
    best = 4 * 2 * 1024 / requests.prompt_tokens
    assert aware.hit_rate >= 0.95 * best
    assert aware.slo_attainment == 1.0 and spread.ok == aware.ok
