"""The real-stack part of issue 21's benchmark: routing policies on 2 replicas of the
default model on this box, each against two oracles of the same requests.

Two workloads, each run under every policy on a fresh deployment (2 engine replicas,
deleted after the run so that no policy inherits another's cache;
``--kv-cache-gib`` each, one gateway): the shared-prefix workload of
``benchmarks.routing_policies`` (48 prefixes of ~1k tokens, each asked twice), and
multi-turn conversations that resend their history with no session header (each
conversation opens with its own ~600-token record, then asks short questions; the
model's answers are resent as they came). The engines' own prefix-cache counters give
the hit rate; the routers' counters the requests each replica took.

The oracles:

- ``sticky-oracle``, measured: a router that knows which requests share a prefix (the
  conversation, or the shared prefix) and keeps each group on one replica, the groups
  balanced over the two (the ``session`` policy, each group sent with a session id the
  benchmark picks so that the ring places it on the lighter replica). It runs on the
  same engines as the policies, so it reaches what their cache size and eviction allow:
  the yardstick the real goal is judged on.
- the **bound** (:mod:`simulator.oracles.prefix_bound`, load cap 1.2x the mean),
  computed: an upper bound on any router with any eviction, on the token ids the gateway
  sent (every prompt through the model's chat template) and the tokens each answer left
  in the engine's cache (vLLM caches generated tokens; the next turn resends them), with
  each replica's KV cache in 128-token blocks (the CPU engine's block size).

``cache-aware`` runs with the engines' KV cache events on (``engine.kv_cache_events``).

    .venv/bin/python -m benchmarks.routing_oracle_real
        [--policies round-robin,least-loaded,prefix-affinity,cache-aware,sticky-oracle]
        [--conversations 24] [--turns 4] [--concurrency 4] [--kv-cache-gib 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from benchmarks.common.isolation import loopback_if_root
from benchmarks.common.model import MODEL
from benchmarks.common.prefix_workload import (
    WORDS,
    engine_replica_ids,
    engine_totals,
    routed_by_replica,
    shared_prefix_requests,
)
from loadtest.analysis.stats import percentile
from loadtest.workloads.tokenizer import default_tokenizer_path, load_tokenizer
from serving.config.loading import build_stack_config
from serving.config.model_spec import EngineSettings, ModelCatalog
from serving.cluster.local import ClusterOptions, LocalCluster
from serving.model_store import ModelStore
from serving.routing.hash_ring import HashRing
from serving.routing.session import DEFAULT_VIRTUAL_NODES
from simulator.config import SimulationConfig
from simulator.replica_setup import replica_setup
from simulator.machine import cpu_model
from simulator.oracles.prefix_bound import prefix_bound

REPO = Path(__file__).resolve().parents[1]
BLOCK = 128
console = Console() if sys.stdout.isatty() else Console(width=180)


STICKY_ORACLE = "sticky-oracle"


@dataclass
class Sent:
    """One request as sent: its group (conversation or shared prefix), messages, answer, TTFT."""

    group: int
    messages: list[dict]
    answer: str = ""
    ttft_s: float = float("nan")


async def stream_chat(client: httpx.AsyncClient, url: str, messages: list[dict], max_tokens: int,
                      session: str | None) -> tuple[float, str]:
    """One streamed greedy chat completion: (TTFT seconds, the answer's text)."""
    body = {"model": MODEL, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    headers = {"x-session-id": session} if session else {}
    start = time.perf_counter()
    ttft, parts = None, []
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers) as response:
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


async def run_conversations(url: str, openers: list[str], turns: int, concurrency: int, max_tokens: int,
                            sessions: dict[int, str]) -> list[Sent]:
    """Conversations, ``concurrency`` at a time, each turn resending the whole history."""
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(len(openers)):
        queue.put_nowait(i)
    sent: list[Sent] = []

    async def worker(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            group = queue.get_nowait()
            messages = [{"role": "user", "content": openers[group]}]
            for turn in range(turns):
                if turn:
                    messages.append({"role": "user", "content": f"Question {turn}: name one word of the record."})
                one = Sent(group, list(messages))
                sent.append(one)
                one.ttft_s, one.answer = await stream_chat(client, url, messages, max_tokens, sessions.get(group))
                messages.append({"role": "assistant", "content": one.answer})

    async with httpx.AsyncClient(timeout=600) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return sent


async def run_single(url: str, requests: list[tuple[int, dict]], concurrency: int,
                     sessions: dict[int, str]) -> list[Sent]:
    queue: asyncio.Queue[tuple[int, dict]] = asyncio.Queue()
    for request in requests:
        queue.put_nowait(request)
    sent: list[Sent] = []

    async def worker(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            group, body = queue.get_nowait()
            one = Sent(group, body["messages"])
            sent.append(one)
            one.ttft_s, one.answer = await stream_chat(client, url, body["messages"], body["max_tokens"],
                                                       sessions.get(group))

    async with httpx.AsyncClient(timeout=600) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return sent


def sticky_sessions(url: str, groups: list[int]) -> dict[int, str]:
    """A session id per group such that the ``session`` policy's ring puts the groups,
    in order of first request, each on the replica with fewer requests so far."""
    deadline = time.monotonic() + 60
    while len(ids := engine_replica_ids(url)) < 2:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the gateway exports stats of {len(ids)} engine replicas, not 2")
        time.sleep(1)
    ring = HashRing(ids, virtual_nodes=DEFAULT_VIRTUAL_NODES)
    sizes = Counter(groups)
    load = dict.fromkeys(sorted(ids), 0)
    sessions: dict[int, str] = {}
    for group in dict.fromkeys(groups):
        target = min(load, key=load.__getitem__)
        load[target] += sizes[group]
        sessions[group] = next(key for n in itertools.count()
                               if ring.walk(key := f"group-{group}-{n}")[0] == target)
    return sessions


def token_ids(tokenizer, messages: list[dict], *, generation_prompt: bool) -> list[int]:
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt,
                                              tokenize=True)["input_ids"])  # transformers 5: a BatchEncoding


def bound_of(sent: list[Sent], tokenizer, kv_tokens: int) -> dict:
    """The bound on these requests, with each answer's tokens as the engine left them: the
    conversation rendered with the answer (what its next turn resends), past the prompt."""
    prompts, outputs = [], []
    for one in sent:
        prompt = token_ids(tokenizer, one.messages, generation_prompt=True)
        full = token_ids(tokenizer, [*one.messages, {"role": "assistant", "content": one.answer}],
                         generation_prompt=False)
        output = full[len(prompt):] if full[:len(prompt)] == prompt else tokenizer.encode(
            one.answer, add_special_tokens=False)
        prompts.append(prompt)
        outputs.append(output)
    bound = prefix_bound(prompts, replicas=2, capacity_blocks=kv_tokens // BLOCK, block_tokens=BLOCK, outputs=outputs)
    prompt_only = prefix_bound(prompts, replicas=2, capacity_blocks=kv_tokens // BLOCK, block_tokens=BLOCK)
    return {"hit_rate": bound.hit_rate, "binding": bound.binding, "prompts_only_hit_rate": prompt_only.hit_rate}


def measure(cluster: LocalCluster, policy: str, workload: str, args: argparse.Namespace, tokenizer,
            kv_tokens: int) -> dict:
    catalog = ModelCatalog(REPO / "models")
    config = build_stack_config(
        {"replicas": {"num_replicas": 2},
         "engine": {"kv_cache_space_gib": args.kv_cache_gib, "kv_cache_events": policy == "cache-aware"},
         "routing": {"policy": "session" if policy == STICKY_ORACLE else policy}},
        catalog=catalog, resolve_path=ModelStore(catalog).require)
    with console.status(f"deploying {policy}") as status:
        url = cluster.deploy(config, on_progress=lambda s: status.update(f"{policy}: {s}"))
    shared = shared_prefix_requests(48, 940, 2, seed=7)
    openers = conversation_openers(args.conversations, args.record_words, seed=11)
    groups = [g for g, _ in shared] if workload == "shared-prefix" else [
        g for g in range(len(openers)) for _ in range(args.turns)]
    sessions = sticky_sessions(url, groups) if policy == STICKY_ORACLE else {}
    with console.status(f"{workload} under {policy}"):
        before, routed_before = engine_totals(url), routed_by_replica(url)
        if workload == "shared-prefix":
            sent = asyncio.run(run_single(url, shared, args.concurrency, sessions))
        else:
            sent = asyncio.run(run_conversations(url, openers, args.turns, args.concurrency, args.max_tokens, sessions))
        time.sleep(3)  # replica stats reach the gateway one period later
        after, routed_after = engine_totals(url), routed_by_replica(url)
    # A routing change alone would reconfigure the running engines, whose caches hold
    # this run's prompts: the next run starts on fresh engines instead.
    cluster.undeploy(config.app_name)
    hits = after.get("serveout_engine_prefix_cache_hits_total", 0) - before.get("serveout_engine_prefix_cache_hits_total", 0)
    queries = (after.get("serveout_engine_prefix_cache_queries_total", 0)
               - before.get("serveout_engine_prefix_cache_queries_total", 0))
    per_replica = sorted(routed_after[r] - routed_before.get(r, 0) for r in routed_after)
    ordered = sorted(one.ttft_s * 1000 for one in sent)
    return {"policy": policy, "workload": workload, "hit_rate": hits / queries if queries else 0.0,
            "bound": bound_of(sent, tokenizer, kv_tokens), "requests": len(sent), "routed_per_replica": per_replica,
            "max_over_mean_routed": max(per_replica) / (sum(per_replica) / len(per_replica)) if per_replica else None,
            "ttft_p50_ms": percentile(ordered, 50), "ttft_p95_ms": percentile(ordered, 95),
            "sent": [asdict(one) for one in sent]}


def compare(results: list[dict]) -> None:
    """Each run against its workload's sticky oracle, bound and round-robin (same run)."""
    for r in results:
        def same(policy: str) -> dict | None:
            return next((o for o in results if o["workload"] == r["workload"] and o["policy"] == policy), None)
        oracle, rr = same(STICKY_ORACLE), same("round-robin")
        r["vs_sticky_oracle"] = r["hit_rate"] / oracle["hit_rate"] if oracle and oracle["hit_rate"] else None
        r["vs_bound"] = r["hit_rate"] / r["bound"]["hit_rate"] if r["bound"]["hit_rate"] else None
        r["p95_vs_round_robin"] = r["ttft_p95_ms"] / rr["ttft_p95_ms"] if rr else None


def _f(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policies", default=f"round-robin,least-loaded,prefix-affinity,cache-aware,{STICKY_ORACLE}")
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
    compare(results)
    table = Table(title=f"2 replicas of {MODEL} here, KV cache {args.kv_cache_gib} GiB each (~{kv_tokens} tokens)")
    for col in ("workload", "policy", "hit rate", "vs sticky oracle", "bound", "vs bound", "max/mean requests",
                "TTFT p50 ms", "TTFT p95 ms", "p95 vs RR"):
        table.add_column(col)
    for r in results:
        table.add_row(r["workload"], r["policy"], f"{r['hit_rate']:.3f}", _f(r["vs_sticky_oracle"], ".3f"),
                      f"{r['bound']['hit_rate']:.3f}", _f(r["vs_bound"], ".3f"), _f(r["max_over_mean_routed"], ".2f"),
                      f"{r['ttft_p50_ms']:.0f}", f"{r['ttft_p95_ms']:.0f}", _f(r["p95_vs_round_robin"], ".2f"))
    console.print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)}, "kv_tokens": kv_tokens,
                                    "cpu": cpu_model(), "runs": results}, indent=2))
    console.print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()
