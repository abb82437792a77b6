"""CPU cost, in one gateway replica, of showing every gateway replica on ``/metrics``.

Builds one replica's registry as a busy gateway holds it (the gateway metrics of one
model with requests on both endpoints and several statuses, ``--keys`` API keys, the
routing collector over ``--engines`` engine replicas), then times, best of
``--rounds``:
  - today: ``generate_latest(registry)`` (one gateway's ``/metrics``),
  - publish: what each replica does every second (collect, leave out the shared
    views, pickle as plain tuples), and the same pickling prometheus_client's
    objects as they are, for scale,
  - scrape: what the answering replica does with ``--replicas`` replicas on the
    board (publish, unpickle every snapshot, merge with the label, render),
and prints them side by side with the sizes.

    .venv/bin/python -m benchmarks.gateway_metrics_sharing [--replicas 2,8,32] [--keys 8] [--engines 4]
"""

from __future__ import annotations

import argparse
import pickle
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, generate_latest

from serving.config.stack import RoutingPolicyName
from serving.engine.protocol import EngineStats
from serving.gateway.metrics import GatewayMetrics
from serving.gateway.metrics_board import MetricsBoard, Snapshot, merged_families, render, split_shared
from serving.gateway.metrics_sharing import shared_views
from serving.routing.metrics import RoutingMetrics, routing_collector
from serving.routing.policy import RoutingDecision

SHARED = shared_views(direct=False)


def busy_gateway(keys: int, engines: int) -> tuple[CollectorRegistry, RoutingMetrics]:
    registry = CollectorRegistry()
    metrics = GatewayMetrics(registry)
    metrics.declare_model("m")
    names = tuple(f"key{i}" for i in range(keys))
    metrics.declare_keys(names)
    for i in range(2000):
        key, endpoint = names[i % keys], ("chat", "completions")[i % 2]
        metrics.count_request("m", endpoint, ("200", "200", "200", "429", "499")[i % 5], key)
        metrics.latency.labels("m", endpoint).observe(0.01 * (i % 300))
        metrics.ttft.labels("m", endpoint).observe(0.001 * (i % 300))
        metrics.record_tokens("m", prompt=i % 4000, generated=i % 500, key=key)
        if i % 50 == 0:
            metrics.count_rejected("m", key, ("overloaded", "rpm")[i % 2])
    for state in ("ready", "starting", "desired"):
        metrics.replicas.labels("m", state).set(engines)
    router = RoutingMetrics("serveout:engine")  # held by the caller: the collector keeps it weakly
    routing_collector(registry).attach(router)
    replicas = [f"engine{i}" for i in range(engines)]
    router.set_replicas({r: EngineStats(r, waiting=1, running=8, kv_cache_usage=0.4) for r in replicas})
    for i in range(500):
        router.count_routed(replicas[i % engines], RoutingPolicyName.PREFIX_AFFINITY, RoutingDecision.PREFIX_HIT)
    return registry, router


def best_us(fn: Callable[[], object], rounds: int, inner: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        best = min(best, (time.perf_counter() - start) / inner)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", default="2,8,32")
    parser.add_argument("--keys", type=int, default=8)
    parser.add_argument("--engines", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    registry, _router = busy_gateway(args.keys, args.engines)

    def publish() -> Snapshot:
        own, _ = split_shared(registry.collect(), SHARED)
        return Snapshot.of("self", 0, own)

    def publish_objects() -> bytes:
        own, _ = split_shared(registry.collect(), SHARED)
        return pickle.dumps(own, protocol=pickle.HIGHEST_PROTOCOL)

    today = generate_latest(registry)
    snapshot = publish()
    print(f"one gateway replica: {args.keys} keys, {args.engines} engine replicas; best of {args.rounds} rounds")
    print(f"{'':28}{'µs':>10}{'bytes':>12}")
    print(f"{'today: generate_latest':28}{best_us(lambda: generate_latest(registry), args.rounds, 50):>10.0f}"
          f"{len(today):>12}")
    print(f"{'publish (every second)':28}{best_us(publish, args.rounds, 50):>10.0f}{len(snapshot.families):>12}")
    print(f"{'  pickling the objects':28}{best_us(publish_objects, args.rounds, 50):>10.0f}"
          f"{len(publish_objects()):>12}")
    for n in (int(x) for x in args.replicas.split(",")):
        board = MetricsBoard()
        for i in range(n - 1):
            own, _ = split_shared(registry.collect(), SHARED)
            board.publish(Snapshot.of(f"replica{i}", 0, own))

        def scrape(board: MetricsBoard = board) -> bytes:
            own, views = split_shared(registry.collect(), SHARED)
            return render(merged_families(board.exchange(Snapshot.of("self", 0, own)), shared=views))

        text = scrape()
        print(f"{f'scrape, {n} replicas':28}{best_us(scrape, args.rounds, max(1, 50 // n)):>10.0f}{len(text):>12}")


if __name__ == "__main__":
    main()
