"""Routing policies side by side on two replicas (issue 4's benchmark), plus autoscaling times.

A shared-prefix workload whose distinct prefix tokens exceed one replica's KV cache
(the regime where routing decides the hit rate) is sent at the same
offered load to the stack under prefix-affinity, least-loaded and round-robin; the
engines' own prefix-cache counters give the hit rate. Then queue-depth autoscaling
(1..2 replicas) is timed: load step -> second replica serving, load stop -> back to 1.

With ``--gateway-replicas 1,2`` every policy is measured behind one and then two
gateway replicas (each with its own router), and the table adds the hit rate with N
gateways against one.

    .venv/bin/python -m benchmarks.routing_policies [--prefixes 48] [--repeats 2] [--skip-autoscaling]
        [--gateway-replicas 1,2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from benchmarks.common.isolation import loopback_if_root
from benchmarks.common.model import MODEL, stack_config
from benchmarks.common.prefix_workload import engine_totals, shared_prefix_bodies
from benchmarks.common.streaming_client import chat_body, run_bodies
from serving.cluster.local import ClusterOptions, LocalCluster

REPO = Path(__file__).resolve().parents[1]
console = Console() if sys.stdout.isatty() else Console(width=160)




def measure_policy(cluster: LocalCluster, policy: str, gateways: int, bodies: list[dict],
                   args: argparse.Namespace) -> dict:
    config = stack_config(
        {"replicas": {"num_replicas": 2}, "engine": {"kv_cache_space_gib": args.kv_cache_gib},
         "routing": {"policy": policy, "imbalance_threshold": args.imbalance_threshold},
         "gateway": {"replicas": gateways}})
    concurrency = args.concurrency
    label = f"{policy}, {gateways} gateway(s)"
    with console.status(f"deploying with {label}") as status:
        url = cluster.deploy(config, on_progress=lambda s: status.update(f"{label}: {s}"))
    with console.status(f"measuring {label}"):
        before = engine_totals(url)
        figures = asyncio.run(run_bodies(url, bodies, concurrency=concurrency))
        time.sleep(3)  # replica stats reach the gateway one period later
        after = engine_totals(url)
    # A new policy alone would reconfigure the running engines, whose caches hold this
    # run's prefixes: the next policy starts on fresh engines instead.
    cluster.undeploy(config.app_name)
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    hits = delta.get("serveout_engine_prefix_cache_hits_total", 0)
    queries = delta.get("serveout_engine_prefix_cache_queries_total", 0)
    decisions = {k.split(":", 1)[1]: int(v) for k, v in delta.items() if k.startswith("decision:") and v}
    # With several gateways, /metrics is one gateway's: its own routing decisions only
    # (the engine counters are every engine's, whichever gateway reports them).
    return {"policy": policy, "gateways": gateways, "hit_rate": hits / queries if queries else 0.0,
            "figures": asdict(figures), "decisions": decisions}


def measure_autoscaling(cluster: LocalCluster) -> dict:
    config = stack_config(
        {"autoscaling": {"enabled": True, "min_replicas": 1, "max_replicas": 2, "target_queue_per_replica": 4,
                         "upscale_delay_s": 2, "downscale_delay_s": 10, "look_back_period_s": 3,
                         "metrics_interval_s": 0.5}})
    with console.status("deploying with autoscaling 1..2"):
        url = cluster.deploy(config)

    def ready() -> float:
        status = httpx.get(f"{url}/status", timeout=10).json()
        return status["replicas"]["ready"]

    stop = threading.Event()

    def busy() -> None:
        body = {**chat_body(MODEL, "Tell a story.", 200), "stream": False}
        body.pop("stream_options")
        with httpx.Client(timeout=600) as client:
            while not stop.is_set():
                client.post(f"{url}/v1/chat/completions", json=body)

    workers = [threading.Thread(target=busy) for _ in range(12)]
    start = time.monotonic()
    with console.status("load step: waiting for the second replica"):
        for w in workers:
            w.start()
        while ready() < 2 and time.monotonic() - start < 600:
            time.sleep(0.5)
        up = time.monotonic() - start
        stop.set()
        for w in workers:
            w.join()
    stopped = time.monotonic()
    with console.status("load stopped: waiting for scale-down"):
        while ready() > 1 and time.monotonic() - stopped < 600:
            time.sleep(0.5)
    return {"load_step_to_second_replica_s": up, "load_stop_to_one_replica_s": time.monotonic() - stopped,
            "downscale_delay_s": 10, "upscale_delay_s": 2}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # Defaults: many long prefixes (documents, system prompts), each asked twice. The
    # first request of a prefix misses anywhere; the second hits only if it reaches the
    # same replica: always under prefix-affinity, half the time otherwise. 48 prefixes
    # of ~1k tokens (~48k) exceed one replica's 0.5 GiB cache (~23k tokens) but not
    # half of them: under round-robin each replica caches every prefix and evicts some
    # before their second request; under prefix-affinity each caches only its half.
    parser.add_argument("--prefixes", type=int, default=48, help="distinct shared prefixes")
    parser.add_argument("--prefix-words", type=int, default=940, help="words per prefix (~1k tokens)")
    parser.add_argument("--repeats", type=int, default=2, help="requests per prefix")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--kv-cache-gib", type=float, default=0.5, help="KV cache per replica")
    parser.add_argument("--imbalance-threshold", type=int, default=4)
    parser.add_argument("--policies", default="round-robin,least-loaded,prefix-affinity")
    parser.add_argument("--gateway-replicas", default="1", help="gateway replica counts to measure, e.g. 1,2")
    parser.add_argument("--skip-autoscaling", action="store_true")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "routing_policies.json")
    args = parser.parse_args()
    loopback_if_root("benchmarks.routing_policies")
    bodies = shared_prefix_bodies(args.prefixes, args.prefix_words, args.repeats, seed=7)
    results = []
    with LocalCluster(ClusterOptions()) as cluster:
        for gateways in [int(n) for n in args.gateway_replicas.split(",")]:
            for policy in args.policies.split(","):
                results.append(measure_policy(cluster, policy, gateways, bodies, args))
        scaling = None if args.skip_autoscaling else measure_autoscaling(cluster)
    def base(r: dict) -> dict:
        same = [o for o in results if o["gateways"] == r["gateways"]]
        return next((o for o in same if o["policy"] == "round-robin"), same[-1])

    def one_gateway(r: dict) -> dict:
        return next((o for o in results if o["policy"] == r["policy"] and o["gateways"] == 1), r)

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}x" if b else "-"

    table = Table(title=f"routing on 2 replicas: {len(bodies)} requests, {args.prefixes} shared prefixes "
                        f"of ~{args.prefix_words} words x {args.repeats}, concurrency {args.concurrency}, KV cache "
                        f"{args.kv_cache_gib} GiB/replica, imbalance threshold {args.imbalance_threshold}")
    for col in ("policy", "gateways", "engine prefix hit rate", "vs round-robin", "vs 1 gateway",
                "TTFT p50 (ms)", "TTFT p95 (ms)", "output tok/s", "routing decisions (one gateway's)"):
        table.add_column(col)
    for r in results:
        f = r["figures"]
        table.add_row(r["policy"], str(r["gateways"]), f"{r['hit_rate']:.3f}",
                      ratio(r["hit_rate"], base(r)["hit_rate"]), ratio(r["hit_rate"], one_gateway(r)["hit_rate"]),
                      f"{f['ttft_p50_ms']:.0f}", f"{f['ttft_p95_ms']:.0f}", f"{f['output_tok_s']:.1f}",
                      ", ".join(f"{k} {v}" for k, v in sorted(r["decisions"].items())))
    console.print(table)
    if scaling:
        console.print(f"autoscaling 1..2 on queue depth: load step -> 2nd replica serving "
                      f"{scaling['load_step_to_second_replica_s']:.0f} s; load stop -> 1 replica "
                      f"{scaling['load_stop_to_one_replica_s']:.0f} s (downscale delay 10 s)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)}, "policies": results,
                                    "autoscaling": scaling}, indent=2))
    console.print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()
