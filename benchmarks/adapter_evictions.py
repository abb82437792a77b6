"""What an adapter evicted from the engine's host cache costs, and that serveout sees it.

One replica of the default model whose engine keeps one adapter in host memory
(``lora.max_cpu_loras`` 1, ``max_loras`` 1) serves ``clinic`` and ``pharmacy``. Beside a
long base-model stream, the same adapter requests are sent in two phases, side by side
in one run:

- **warm**: ``clinic`` again and again (in host memory after the first);
- **cold**: ``clinic`` and ``pharmacy`` alternately: each evicts the other, so each
  request reads its adapter from disk inside an engine step (the cold-load stall).

Printed: the adapters' TTFT p50/max in each phase, the base stream's worst gap between
tokens in each phase (the stall every request on the replica shares), and what the
stack's ``/metrics`` says (``serveout_engine_adapter_evictions_total`` against the
evictions the phase forced; the residency of each adapter). Figures, not assertions.

    .venv/bin/python -m benchmarks.adapter_evictions [--requests 8] [--out results/adapter_evictions.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from benchmarks.common.isolation import loopback_if_root
from benchmarks.common.model import MODEL, stack_config
from benchmarks.common.streaming_client import chat_body, stream_one
from serving.cluster.local import ClusterOptions, LocalCluster
from benchmarks.common.metrics import samples

REPO = Path(__file__).resolve().parents[1]
console = Console() if sys.stdout.isatty() else Console(width=160)
PORT = 8000
QUESTION = "Can I come in on Saturday?"


async def base_stream_gaps(client: httpx.AsyncClient, url: str, stop: asyncio.Event) -> list[float]:
    """Stream base-model answers back to back until ``stop``; the gaps between chunks."""
    gaps: list[float] = []
    while not stop.is_set():
        body = chat_body(MODEL, "Tell a long story.", 256)
        async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
            last = None
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    now = time.perf_counter()
                    if last is not None:
                        gaps.append(now - last)
                    last = now
    return gaps


async def phase(url: str, models: list[str]) -> dict:
    """The adapter requests of one phase, one after another, beside a base-model stream."""
    async with httpx.AsyncClient(timeout=300) as client:
        stop = asyncio.Event()
        background = asyncio.create_task(base_stream_gaps(client, url, stop))
        await asyncio.sleep(2.0)  # the base stream is decoding
        ttfts = []
        for model in models:
            result = await stream_one(client, url, chat_body(model, QUESTION, 16))
            ttfts.append(result.ttft_s)
        stop.set()
        gaps = await background
    return {"ttft_p50_ms": statistics.median(ttfts) * 1e3, "ttft_max_ms": max(ttfts) * 1e3,
            "base_gap_max_ms": max(gaps) * 1e3, "base_gap_p50_ms": statistics.median(gaps) * 1e3}


def evictions(url: str) -> float:
    return sum(samples(url, "serveout_engine_adapter_evictions_total").values())


def residency(url: str) -> str:
    return ", ".join(sorted(f"{dict(k)['adapter']} {dict(k)['state']}"
                            for k in samples(url, "serveout_engine_adapter_residency")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=8, help="adapter requests per phase")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "adapter_evictions.json")
    args = parser.parse_args()
    loopback_if_root("benchmarks.adapter_evictions")
    config = stack_config({"gateway": {"port": PORT}, "replicas": {"num_replicas": 1, "cpus_per_rank": 2},
                           "adapters": ["clinic", "pharmacy"],
                           "engine": {"lora": {"max_loras": 1, "max_cpu_loras": 1}}})
    out: dict = {}
    with LocalCluster(ClusterOptions(http_port=PORT)) as cluster:
        with console.status("starting one replica with one adapter slot in host memory"):
            url = cluster.deploy(config)
        asyncio.run(phase(url, ["clinic"]))  # clinic in host memory, pharmacy evicted: the warm phase starts warm
        for name, models in (("warm", ["clinic"] * args.requests),
                             ("cold", ["pharmacy", "clinic"] * (args.requests // 2))):
            time.sleep(3)  # one stats poll: the counter is settled
            before = evictions(url)
            with console.status(f"{name} phase"):
                figures = asyncio.run(phase(url, models))
            time.sleep(3)
            forced = sum(1 for a, b in zip(["clinic", *models], models) if a != b)  # clinic is cached before
            out[name] = {**figures, "evictions_seen": evictions(url) - before, "evictions_forced": forced,
                         "residency_after": residency(url)}
    table = Table(title="Adapters in host memory (warm) against evicted each time (cold), one replica, "
                        "max_cpu_loras 1, beside a base-model stream")
    for column in ("figure", "warm", "cold", "cold / warm"):
        table.add_column(column, justify="right")
    for key, label in (("ttft_p50_ms", "adapter TTFT p50 (ms)"), ("ttft_max_ms", "adapter TTFT max (ms)"),
                       ("base_gap_p50_ms", "base stream gap p50 (ms)"),
                       ("base_gap_max_ms", "base stream gap max (ms)")):
        warm, cold = out["warm"][key], out["cold"][key]
        table.add_row(label, f"{warm:.1f}", f"{cold:.1f}", f"{cold / warm:.2f}x")
    for key in ("evictions_forced", "evictions_seen", "residency_after"):
        table.add_row(key.replace("_", " "), str(out["warm"][key]), str(out["cold"][key]), "")
    console.print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    console.print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()
