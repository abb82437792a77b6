"""The real-stack part of issue 21's benchmark: routing policies on 2 replicas of the
default model on this box, each against the prefix-hit oracle of the same requests.

Two workloads, each run under every policy on a fresh deployment (2 engine replicas,
deleted after the run so that no policy inherits another's cache;
``--kv-cache-gib`` each, one gateway): the shared-prefix workload of
``benchmarks.routing_policies`` (48 prefixes of ~1k tokens, each asked twice), and
multi-turn conversations that resend their history with no session header (each
conversation opens with its own ~600-token record, then asks short questions; the
model's answers are resent as they came). The engines' own prefix-cache counters give
the hit rate; the oracle (:mod:`simulator.oracles.prefix_bound`, load cap 1.2x the
mean) is computed on the token ids the gateway sent (every prompt through the model's
chat template), with each replica's KV cache in 128-token blocks. ``cache-aware`` runs
with the engines' KV cache events on (``engine.kv_cache_events``).

    .venv/bin/python -m benchmarks.routing_oracle_real [--policies round-robin,least-loaded,prefix-affinity,cache-aware]
        [--conversations 24] [--turns 4] [--concurrency 4] [--kv-cache-gib 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from benchmarks.common.isolation import loopback_if_root
from benchmarks.common.model import MODEL
from benchmarks.common.prefix_workload import WORDS, engine_totals, shared_prefix_bodies
from loadtest.analysis.stats import percentile
from loadtest.workloads.tokenizer import default_tokenizer_path, load_tokenizer
from serving.config.loading import build_stack_config
from serving.config.model_spec import EngineSettings, ModelCatalog
from serving.local_cluster import ClusterOptions, LocalCluster
from serving.model_store import ModelStore
from simulator.config import SimulationConfig
from simulator.engine import replica_setup
from simulator.oracles.prefix_bound import prefix_bound

REPO = Path(__file__).resolve().parents[1]
BLOCK = 128
console = Console() if sys.stdout.isatty() else Console(width=180)


async def stream_chat(client: httpx.AsyncClient, url: str, messages: list[dict], max_tokens: int) -> tuple[float, str]:
    """One streamed greedy chat completion: (TTFT seconds, the answer's text)."""
    body = {"model": MODEL, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    start = time.perf_counter()
    ttft, parts = None, []
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[6:]).get("choices", []):
                text = choice.get("delta", {}).get("content")
                if text:
                    ttft = ttft if ttft is not None else time.perf_counter() - start
                    parts.append(text)
    return (ttft if ttft is not None else float("nan")), "".join(parts)


def conversation_openers(count: int, words: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"Record {i}: " + " ".join(rng.choice(WORDS) for _ in range(words)) + "\nSummarise this record."
            for i in range(count)]


async def run_conversations(url: str, openers: list[str], turns: int, concurrency: int,
                            max_tokens: int) -> tuple[list[float], list[list[dict]]]:
    """Conversations, ``concurrency`` at a time, each turn resending the whole history."""
    queue: asyncio.Queue[str] = asyncio.Queue()
    for opener in openers:
        queue.put_nowait(opener)
    ttfts: list[float] = []
    prompts: list[list[dict]] = []

    async def worker(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            messages = [{"role": "user", "content": queue.get_nowait()}]
            for turn in range(turns):
                if turn:
                    messages.append({"role": "user", "content": f"Question {turn}: name one word of the record."})
                prompts.append(list(messages))
                ttft, answer = await stream_chat(client, url, messages, max_tokens)
                ttfts.append(ttft)
                messages.append({"role": "assistant", "content": answer})

    async with httpx.AsyncClient(timeout=600) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return ttfts, prompts


async def run_single(url: str, bodies: list[dict], concurrency: int) -> tuple[list[float], list[list[dict]]]:
    queue: asyncio.Queue[dict] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    ttfts: list[float] = []

    async def worker(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            body = queue.get_nowait()
            ttfts.append((await stream_chat(client, url, body["messages"], body["max_tokens"]))[0])

    async with httpx.AsyncClient(timeout=600) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return ttfts, [b["messages"] for b in bodies]


def oracle(prompts: list[list[dict]], tokenizer, kv_tokens: int) -> dict:
    ids = [tuple(tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=True)["input_ids"])
           for m in prompts]  # transformers 5 returns a BatchEncoding
    bound = prefix_bound(ids, replicas=2, capacity_blocks=kv_tokens // BLOCK, block_tokens=BLOCK)
    return {"hit_rate": bound.hit_rate, "binding": bound.binding}


def measure(cluster: LocalCluster, policy: str, workload: str, args: argparse.Namespace, tokenizer,
            kv_tokens: int) -> dict:
    catalog = ModelCatalog(REPO / "models")
    config = build_stack_config(
        {"replicas": {"num_replicas": 2},
         "engine": {"kv_cache_space_gib": args.kv_cache_gib, "kv_cache_events": policy == "cache-aware"},
         "routing": {"policy": policy}},
        catalog=catalog, resolve_path=ModelStore(catalog).require)
    with console.status(f"deploying {policy}") as status:
        url = cluster.deploy(config, on_progress=lambda s: status.update(f"{policy}: {s}"))
    with console.status(f"{workload} under {policy}"):
        before = engine_totals(url)
        if workload == "shared-prefix":
            bodies = shared_prefix_bodies(48, 940, 2, seed=7)
            ttfts, prompts = asyncio.run(run_single(url, bodies, args.concurrency))
        else:
            openers = conversation_openers(args.conversations, args.record_words, seed=11)
            ttfts, prompts = asyncio.run(run_conversations(url, openers, args.turns, args.concurrency, args.max_tokens))
        time.sleep(3)  # replica stats reach the gateway one period later
        after = engine_totals(url)
    # A routing change alone would reconfigure the running engines, whose caches hold
    # this run's prompts: the next run starts on fresh engines instead.
    cluster.undeploy(config.app_name)
    hits = after.get("serveout_engine_prefix_cache_hits_total", 0) - before.get("serveout_engine_prefix_cache_hits_total", 0)
    queries = (after.get("serveout_engine_prefix_cache_queries_total", 0)
               - before.get("serveout_engine_prefix_cache_queries_total", 0))
    ordered = sorted(t * 1000 for t in ttfts)
    bound = oracle(prompts, tokenizer, kv_tokens)
    hit_rate = hits / queries if queries else 0.0
    return {"policy": policy, "workload": workload, "hit_rate": hit_rate, "oracle": bound,
            "vs_oracle": hit_rate / bound["hit_rate"] if bound["hit_rate"] else None, "requests": len(ttfts),
            "ttft_p50_ms": percentile(ordered, 50), "ttft_p95_ms": percentile(ordered, 95), "prompts": prompts}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policies", default="round-robin,least-loaded,prefix-affinity,cache-aware")
    parser.add_argument("--workloads", default="shared-prefix,multi-turn")
    parser.add_argument("--conversations", type=int, default=24)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--record-words", type=int, default=560, help="words of each conversation's record (~600 tokens)")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--kv-cache-gib", type=float, default=0.5)
    parser.add_argument("--out", type=Path, default=REPO / "results" / "routing_oracle_real.json")
    args = parser.parse_args(argv)
    loopback_if_root("benchmarks.routing_oracle_real")
    tokenizer = load_tokenizer(default_tokenizer_path(MODEL))
    kv_tokens = replica_setup(SimulationConfig(hardware="cpu", model=MODEL, engine=EngineSettings(
        kv_cache_space_gib=args.kv_cache_gib))).kv_tokens
    results = []
    with LocalCluster(ClusterOptions()) as cluster:
        for workload in args.workloads.split(","):
            for policy in args.policies.split(","):
                results.append(measure(cluster, policy, workload, args, tokenizer, kv_tokens))
    table = Table(title=f"2 replicas of {MODEL} here, KV cache {args.kv_cache_gib} GiB each (~{kv_tokens} tokens)")
    for col in ("workload", "policy", "hit rate", "oracle", "vs oracle", "TTFT p50 ms", "TTFT p95 ms", "p95 vs RR"):
        table.add_column(col)
    for r in results:
        rr = next((o for o in results if o["workload"] == r["workload"] and o["policy"] == "round-robin"), None)
        table.add_row(r["workload"], r["policy"], f"{r['hit_rate']:.3f}", f"{r['oracle']['hit_rate']:.3f}",
                      f"{r['vs_oracle']:.3f}" if r["vs_oracle"] is not None else "-", f"{r['ttft_p50_ms']:.0f}",
                      f"{r['ttft_p95_ms']:.0f}", f"{r['ttft_p95_ms'] / rr['ttft_p95_ms']:.2f}" if rr else "-")
    console.print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)}, "kv_tokens": kv_tokens,
                                    "runs": results}, indent=2))
    console.print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()
