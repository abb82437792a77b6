"""Routing by LoRA adapter slots (issue 33's routing goal): eight adapters over two
replicas whose engines batch at most ``max_loras`` = 2 distinct adapters a step.

The same open-loop Poisson schedule (seeded: the same arrivals, prompts and adapters in
every run) is sent to one stack (two replicas of the default model, one core each, eight
adapter names over the two adapters set-up trains: vLLM counts each name as its own
adapter, for slots too) under each routing setting in turn, redeployed in place (no
engine restart):

- ``round-robin``, adapter slots off: a router that knows nothing of adapters;
- ``round-robin`` and ``cache-aware`` (the default) with adapter slots on
  (``routing.adapter_slots``: a request goes first where its adapter can be batched now).

Printed side by side: TTFT p50/p95/p99, E2E p95, requests per replica (max / mean), the
slot waits the router counted, and the ratio of round-robin's TTFT p95 to each. The goal
(TTFT p95 at least 2x lower than round-robin's, no replica above 1.3x the mean) is a
figure to read, not an assertion: these are 2 shared cores.

    .venv/bin/python -m benchmarks.adapter_routing [--rate 1.0] [--duration 60] [--out results/adapter_routing.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from benchmarks.common.isolation import loopback_if_root
from benchmarks.common.metrics import samples
from benchmarks.common.model import stack_config
from benchmarks.common.streaming_client import chat_body, stream_one
from loadtest.analysis.stats import percentile
from serving.cluster.local import ClusterOptions, LocalCluster

REPO = Path(__file__).resolve().parents[1]
console = Console() if sys.stdout.isatty() else Console(width=160)
ADAPTERS = 8
OUTPUT_TOKENS = 32
SETTINGS = (("round-robin", False), ("round-robin", True), ("cache-aware", True))
TOPICS = ("opening hours", "a prescription refill", "a blood test", "insulin storage", "a vaccine",
          "an invoice", "a referral letter", "side effects")


def schedule(rate: float, duration_s: float, names: list[str], seed: int = 0) -> list[tuple[float, dict]]:
    """(send time, body) pairs: Poisson arrivals, each for an adapter drawn uniformly."""
    rng = random.Random(seed)
    at, plan = 0.0, []
    while (at := at + rng.expovariate(rate)) < duration_s:
        question = f"Request {len(plan)}: a question about {rng.choice(TOPICS)}. Answer briefly."
        plan.append((at, chat_body(rng.choice(names), question, OUTPUT_TOKENS)))
    return plan


async def send(client: httpx.AsyncClient, url: str, body: dict) -> dict:
    """One streamed request: its status, replica, TTFT and E2E (None when it failed)."""
    try:
        result = await stream_one(client, url, body)
    except httpx.HTTPStatusError as exc:
        return {"status": exc.response.status_code, "replica": "?", "ttft_s": None, "e2e_s": None,
                "model": body["model"]}
    ttft = None if math.isnan(result.ttft_s) else result.ttft_s
    return {"status": 200, "replica": result.replica, "ttft_s": ttft, "e2e_s": result.e2e_s, "model": body["model"]}


async def run_schedule(url: str, plan: list[tuple[float, dict]]) -> list[dict]:
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=512)) as client:
        t0 = time.perf_counter()

        async def at(when: float, body: dict) -> dict:
            await asyncio.sleep(max(0.0, t0 + when - time.perf_counter()))
            return await send(client, url, body)

        return await asyncio.gather(*(at(when, body) for when, body in plan))


def slot_waits(url: str) -> int:
    return int(sum(samples(url, "serveout_adapter_slot_waits_total").values()))


def figures(results: list[dict], waits: int) -> dict:
    ok = [r for r in results if r["status"] == 200 and r["ttft_s"] is not None]
    ttft = sorted(r["ttft_s"] * 1000 for r in ok)
    e2e = sorted(r["e2e_s"] * 1000 for r in ok)
    per_replica = Counter(r["replica"] for r in ok)
    mean = sum(per_replica.values()) / max(len(per_replica), 1)
    return {"requests": len(results), "ok": len(ok), "ttft_p50_ms": percentile(ttft, 50),
            "ttft_p95_ms": percentile(ttft, 95), "ttft_p99_ms": percentile(ttft, 99),
            "e2e_p95_ms": percentile(e2e, 95), "per_replica": dict(per_replica),
            "max_over_mean": max(per_replica.values()) / mean if mean else 0.0, "slot_waits": waits}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=1.0, help="requests/s offered (default %(default)s)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of arrivals per run")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "adapter_routing.json")
    args = parser.parse_args()
    loopback_if_root("benchmarks.adapter_routing")
    trained = stack_config({"adapters": "all"}).adapters
    adapters = [{"name": f"domain{i}", "path": str(trained[i % len(trained)].path), "rank": 8}
                for i in range(ADAPTERS)]
    plan = schedule(args.rate, args.duration, [a["name"] for a in adapters])
    results = {}
    with LocalCluster(ClusterOptions(http_port=8000)) as cluster:
        for policy, slots in SETTINGS:
            label = f"{policy}, adapter slots {'on' if slots else 'off'}"
            config = stack_config({"adapters": adapters, "replicas": {"num_replicas": 2, "cpus_per_rank": 1},
                                   "routing": {"policy": policy, "adapter_slots": slots}})
            with console.status(f"deploying: {label}") as status:
                url = cluster.deploy(config, on_progress=lambda s: status.update(f"{label}: {s}"))
            asyncio.run(run_schedule(url, schedule(2.0, 4.0, [a["name"] for a in adapters], seed=1)))  # warm-up
            before = slot_waits(url)
            with console.status(f"measuring {label}: {len(plan)} requests over {args.duration:g} s"):
                measured = asyncio.run(run_schedule(url, plan))
            results[label] = figures(measured, slot_waits(url) - before)
    baseline = results[f"{SETTINGS[0][0]}, adapter slots off"]["ttft_p95_ms"]
    t = Table(title=f"{ADAPTERS} adapters, 2 replicas x max_loras 2, Poisson {args.rate:g} req/s for "
                    f"{args.duration:g} s, {OUTPUT_TOKENS} output tokens; goal: TTFT p95 >= 2x lower than "
                    f"round-robin's, no replica above 1.3x the mean")
    for col in ("routing", "ok", "TTFT p50 / p95 / p99 (ms)", "E2E p95 (ms)", "per replica", "max / mean",
                "slot waits", "round-robin p95 / this"):
        t.add_column(col, justify="right")
    for label, r in results.items():
        t.add_row(label, f"{r['ok']}/{r['requests']}",
                  f"{r['ttft_p50_ms']:.0f} / {r['ttft_p95_ms']:.0f} / {r['ttft_p99_ms']:.0f}",
                  f"{r['e2e_p95_ms']:.0f}", " ".join(str(n) for n in r["per_replica"].values()),
                  f"{r['max_over_mean']:.2f}", str(r["slot_waits"]), f"{baseline / r['ttft_p95_ms']:.2f}x")
    console.print(t)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"rate": args.rate, "duration_s": args.duration, "results": results}, indent=2))
    console.print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()
