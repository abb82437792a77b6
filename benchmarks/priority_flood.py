"""Interactive chat under a batch flood (issue 35): does a priority class keep the
interactive TTFT while batch work fills the rest, and how much batch throughput stays?

One engine replica (the default model, ``--max-num-seqs`` 8 sequences) behind a keys
file of two keys: ``clinic`` (class ``interactive``) and ``nightly`` (class ``batch``).
For each variant (``--variants``) the stack is deployed once and runs three phases of
``--duration`` s each, after a warm-up:

1. **interactive alone**: ``--interactive`` (2) closed-loop senders of streamed chats
   (``--interactive-tokens`` 8 output tokens): TTFT p50 / p95;
2. **batch alone**: ``--batch`` (24, 3x the engine's sequences) closed-loop senders of
   whole completions (``--batch-tokens`` 16, ``ignore_eos``) that wait Retry-After after
   a 429: batch output tokens/s;
3. **flood**: both at once: interactive TTFT p50 / p95 and 429s, batch tokens/s.

Variants: ``fcfs`` (vLLM's arrival order, batch may fill the whole bound: the stack
before priority classes), ``priority`` (vLLM's priority scheduling, batch may still fill
the bound), ``holdback`` (priority scheduling and batch held to ``max_share`` 0.75 of the
engine's sequences: the default). The bound is ``2 x max_num_seqs`` so that without a
holdback batch also waits in vLLM's queue.

    .venv/bin/python -m benchmarks.priority_flood [--variants fcfs,priority,holdback] [--duration 45]

Figures are printed side by side and written to ``results/priority_flood.json``, never
asserted. As root the script re-runs itself in a loopback-only network namespace.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from benchmarks.common.arguments import choice_list
from benchmarks.common.isolation import loopback_if_root
from benchmarks.common.model import MODEL, stack_config
from benchmarks.common.streaming_client import PROMPT, chat_body, stream_one
from loadtest.analysis.stats import percentile
from serving.cluster.local import ClusterOptions, LocalCluster
from serving.errors import ServeoutError

REPO = Path(__file__).resolve().parents[1]
KEYS = {"clinic": "sk-clinic-flood-0123456789abcdef", "nightly": "sk-nightly-flood-0123456789abcdef"}
CLASSES = {"clinic": "interactive", "nightly": "batch"}
VARIANTS = {  # name -> (vLLM scheduling policy, batch's max_share of the bound)
    "fcfs": ("fcfs", 1.0), "priority": ("priority", 1.0), "holdback": ("priority", 0.75)}
console = Console() if sys.stdout.isatty() else Console(width=160)


@dataclass(frozen=True)
class Phase:
    """What one phase measured (None: that sender kind did not run)."""

    ttft_p50_ms: float | None = None
    ttft_p95_ms: float | None = None
    interactive_ok: int = 0
    interactive_429: int = 0
    batch_tok_s: float | None = None
    batch_ok: int = 0
    batch_429: int = 0


def summarise(ttfts_s: list[float], interactive_429: int, batch_tokens: int, batch_ok: int,
              batch_429: int, seconds: float, *, interactive: bool, batch: bool) -> Phase:
    """A phase's figures from what its senders saw (pure)."""
    ttfts = sorted(t * 1000 for t in ttfts_s)
    return Phase(
        ttft_p50_ms=percentile(ttfts, 50) if interactive and ttfts else None,
        ttft_p95_ms=percentile(ttfts, 95) if interactive and ttfts else None,
        interactive_ok=len(ttfts), interactive_429=interactive_429,
        batch_tok_s=batch_tokens / seconds if batch else None, batch_ok=batch_ok, batch_429=batch_429)


def retry_after(response: httpx.Response) -> float:
    value = response.headers.get("retry-after", "1")
    return float(value) if value.strip().isdigit() else 1.0


async def phase(url: str, args: argparse.Namespace, *, interactive: int, batch: int) -> Phase:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + args.duration
    ttfts: list[float] = []
    tallies = {"i429": 0, "tokens": 0, "bok": 0, "b429": 0}

    async def chat(client: httpx.AsyncClient) -> None:
        body = chat_body(MODEL, PROMPT, args.interactive_tokens)
        while loop.time() < deadline:
            try:
                result = await stream_one(client, url, body)
                ttfts.append(result.ttft_s)
            except httpx.HTTPStatusError as exc:
                tallies["i429"] += exc.response.status_code == 429
                await asyncio.sleep(retry_after(exc.response))

    async def job(client: httpx.AsyncClient, i: int) -> None:
        body = {"model": MODEL, "prompt": f"Record {i}: summarise the visit notes.", "temperature": 0,
                "max_tokens": args.batch_tokens, "ignore_eos": True}
        while loop.time() < deadline:
            try:
                response = await client.post(f"{url}/v1/completions", json=body)
            except httpx.HTTPError:
                await asyncio.sleep(1.0)
                continue
            if response.status_code == 200 and loop.time() <= deadline:
                tallies["bok"] += 1
                tallies["tokens"] += response.json()["usage"]["completion_tokens"]
            elif response.status_code != 200:
                tallies["b429"] += response.status_code == 429
                await asyncio.sleep(retry_after(response))

    def client(key: str, n: int) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=300, headers={"Authorization": f"Bearer {KEYS[key]}"},
                                 limits=httpx.Limits(max_connections=n + 4))

    async with client("clinic", interactive) as clinic, client("nightly", batch) as nightly:
        start = time.perf_counter()
        await asyncio.gather(*(chat(clinic) for _ in range(interactive)),
                             *(job(nightly, i) for i in range(batch)))
        seconds = min(time.perf_counter() - start, args.duration)
    return summarise(ttfts, tallies["i429"], tallies["tokens"], tallies["bok"], tallies["b429"], seconds,
                     interactive=interactive > 0, batch=batch > 0)


def run_variant(cluster: LocalCluster, name: str, args: argparse.Namespace, keys_file: Path) -> dict:
    policy, share = VARIANTS[name]
    config = stack_config({
        "replicas": {"num_replicas": 1},
        "engine": {"max_num_seqs": args.max_num_seqs, "scheduling_policy": policy},
        "gateway": {"port": args.port, "api_keys_file": str(keys_file), "metrics_public": True,
                    "max_in_flight": 2 * args.max_num_seqs,
                    "priority": {"classes": [{"name": "interactive", "max_share": 1.0},
                                             {"name": "batch", "max_share": share}]}}})
    with console.status(f"{name}: serveout starting") as status:
        cluster.deploy(config, on_progress=lambda s: status.update(f"{name}: {s}"))
    asyncio.run(phase(cluster.url, argparse.Namespace(**{**vars(args), "duration": 8.0}), interactive=1, batch=2))
    phases = {}
    for label, interactive, batch in (("interactive alone", args.interactive, 0),
                                      ("batch alone", 0, args.batch),
                                      ("flood", args.interactive, args.batch)):
        with console.status(f"{name}: {label} for {args.duration:.0f} s"):
            phases[label] = asdict(asyncio.run(phase(cluster.url, args, interactive=interactive, batch=batch)))
        time.sleep(3)  # the last requests of the phase drain
    return {"scheduling_policy": policy, "batch_max_share": share, "phases": phases}


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def table(results: dict, args: argparse.Namespace) -> Table:
    t = Table(title=f"interactive ({args.interactive} senders, {args.interactive_tokens} tokens) under a batch "
                    f"flood ({args.batch} senders = {args.batch / args.max_num_seqs:.0f}x the engine's "
                    f"{args.max_num_seqs} sequences, {args.batch_tokens} tokens); {args.duration:.0f} s a phase")
    for col in ("variant", "TTFT p50 / p95 ms alone", "TTFT p50 / p95 ms flood", "p95 flood / alone",
                "interactive 429", "batch tok/s alone", "batch tok/s flood", "batch kept", "batch 429 flood"):
        t.add_column(col)
    for name, r in results.items():
        alone, batch, flood = (r["phases"][k] for k in ("interactive alone", "batch alone", "flood"))
        ratio = (flood["ttft_p95_ms"] / alone["ttft_p95_ms"]
                 if flood["ttft_p95_ms"] and alone["ttft_p95_ms"] else None)
        kept = flood["batch_tok_s"] / batch["batch_tok_s"] if batch["batch_tok_s"] else None
        t.add_row(name, f"{ms(alone['ttft_p50_ms'])} / {ms(alone['ttft_p95_ms'])}",
                  f"{ms(flood['ttft_p50_ms'])} / {ms(flood['ttft_p95_ms'])}",
                  "-" if ratio is None else f"{ratio:.2f}x", str(flood["interactive_429"]),
                  f"{batch['batch_tok_s']:.0f}", f"{flood['batch_tok_s']:.0f}",
                  "-" if kept is None else f"{kept:.0%}", str(flood["batch_429"]))
    return t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default="fcfs,priority,holdback", help=f"of {', '.join(VARIANTS)}")
    parser.add_argument("--max-num-seqs", type=int, default=8)
    parser.add_argument("--interactive", type=int, default=2)
    parser.add_argument("--interactive-tokens", type=int, default=8)
    parser.add_argument("--batch", type=int, default=24)
    parser.add_argument("--batch-tokens", type=int, default=16)
    parser.add_argument("--duration", type=float, default=45.0, help="seconds per phase")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--out", type=Path, default=REPO / "results" / "priority_flood.json")
    args = parser.parse_args()
    variants = choice_list(parser, "--variants", args.variants, VARIANTS)
    loopback_if_root("benchmarks.priority_flood")
    results: dict = {}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(prefix="serveout-priority-") as folder, \
                LocalCluster(ClusterOptions(http_port=args.port)) as cluster:
            keys_file = Path(folder) / "keys.txt"
            keys_file.write_text("".join(f"{n}:{k} class={CLASSES[n]}\n" for n, k in KEYS.items()))
            for name in variants:  # figures saved after each variant
                results[name] = run_variant(cluster, name, args, keys_file)
                args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)},
                                                "variants": results}, indent=2))
                console.print(table(results, args))
    except ServeoutError as exc:
        console.print(f"[red]error: {exc}")
        raise SystemExit(3) from None
    console.print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()
