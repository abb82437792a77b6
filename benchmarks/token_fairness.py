"""Token-fair sharing on the real stack: two keys of one class, one sending prompts
``--ratio`` (4) times longer, both saturating the admission bound.

Deploys the default model on ``--replicas`` (2) engine replicas with a keys file of two
keys, ``long`` and ``short`` (the same class, no per-key limits), and a bound of
``--bound`` (16). Each key runs ``--senders`` (24) closed-loop senders of non-streamed
completions for ``--duration`` s (120): ``short`` prompts of ``--short`` (100) tokens,
``long`` prompts ``--ratio`` times that, ``--max-tokens`` (32) output tokens each
(``ignore_eos``), waiting ``Retry-After`` after a 429 as the OpenAI SDK does. Per key it
counts the tokens served, read from each answer's ``usage``, and weighs them as the
gateway's fair sharing does (``input_token_cost`` 1 per prompt token, ``output_token_cost``
2 per output token): the share each key got.

Two variants, one after the other in the same run (the second only reconfigures the
running replicas): ``tokens``, the gateway's token-weighted sharing (the default), and
``requests``, the same with both token costs set to 0, so every key's counter stays
equal and the bound is shared by requests in flight (the control: what the gateway did
before token fairness).

    .venv/bin/python -m benchmarks.token_fairness [--duration 120] [--senders 24] [--ratio 4]

Figures are printed and written to ``results/token_fairness.json``, never asserted. As
root the script re-runs itself in a loopback-only network namespace.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from benchmarks.common.arguments import choice_list
from benchmarks.common.isolation import loopback_if_root
from benchmarks.common.model import MODEL
from benchmarks.common.saturating_clients import deploy, raise_open_files, refusals, retry_after_s
from serving.cluster.local import ClusterOptions, LocalCluster
from serving.config.priority import PrioritySpec
from serving.errors import ServeoutError

REPO = Path(__file__).resolve().parents[1]
KEYS = {"long": "sk-long-fairness-0123456789abcdef", "short": "sk-short-fairness-0123456789abcdef"}
VARIANTS = {"tokens": {}, "requests": {"input_token_cost": 0.0, "output_token_cost": 0.0}}
console = Console() if sys.stdout.isatty() else Console(width=160)


@dataclass
class KeyServed:
    """What one key got: requests answered and refused, and the tokens of its answers."""

    ok: int = 0
    refused: int = 0
    other: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0

    def weighted(self, costs: PrioritySpec) -> float:
        """Its tokens as the gateway's default costs count them (key weight 1)."""
        return self.prompt_tokens * costs.input_token_cost + self.output_tokens * costs.output_token_cost


def shares(served: dict[str, KeyServed], costs: PrioritySpec) -> dict[str, dict[str, float]]:
    """Per key: its share of the weighted tokens and of the requests answered."""
    tokens = {key: s.weighted(costs) for key, s in served.items()}
    total_tokens, total_ok = sum(tokens.values()), sum(s.ok for s in served.values())
    return {key: {"tokens": tokens[key] / total_tokens if total_tokens else 0.0,
                  "requests": s.ok / total_ok if total_ok else 0.0} for key, s in served.items()}


WORDS = ("apple", "river", "stone", "cloud", "table", "green", "music", "paper", "light", "horse",
         "bread", "chair", "water", "glass", "field", "north")


def prompt(i: int, tokens: int) -> str:
    """About ``tokens`` prompt tokens (one per word), in an order drawn per request: no two
    requests share a prefix, so prefix-aware routing spreads them like any other load
    (shared prefixes would pin each key's requests to one replica)."""
    draw = random.Random(i)
    return " ".join(draw.choice(WORDS) for _ in range(max(tokens - 1, 1)))


async def contest(url: str, args: argparse.Namespace, timeout_s: float) -> dict[str, KeyServed]:
    loop = asyncio.get_running_loop()
    served = {key: KeyServed() for key in KEYS}
    lengths = {"short": args.short, "long": args.short * args.ratio}
    deadline = loop.time() + args.duration

    async def sender(key: str, client: httpx.AsyncClient, i: int) -> None:
        headers, n = {"Authorization": f"Bearer {KEYS[key]}"}, 0
        while loop.time() < deadline:
            n += 1
            body = {"model": MODEL, "prompt": prompt(i * 100_000 + n, lengths[key]), "max_tokens": args.max_tokens,
                    "ignore_eos": True, "temperature": 0}
            try:
                response = await client.post(f"{url}/v1/completions", json=body, headers=headers)
            except httpx.HTTPError:
                served[key].other += 1
                await asyncio.sleep(1.0)
                continue
            if response.status_code == 200:
                usage = response.json()["usage"]
                served[key].ok += 1
                served[key].prompt_tokens += usage["prompt_tokens"]
                served[key].output_tokens += usage["completion_tokens"]
                continue
            if response.status_code == 429:
                served[key].refused += 1
            else:
                served[key].other += 1
            await asyncio.sleep(retry_after_s(response.headers.get("retry-after")))

    limits = httpx.Limits(max_connections=2 * args.senders)
    async with httpx.AsyncClient(timeout=timeout_s, limits=limits) as client:
        await asyncio.gather(*(sender(key, client, i) for key in KEYS for i in range(args.senders)))
    return served


def run_variant(cluster: LocalCluster, name: str, args: argparse.Namespace, keys_file: Path) -> dict:
    config = deploy(cluster, {"replicas": {"num_replicas": args.replicas}, "gateway": {
        "port": args.port, "max_in_flight": args.bound, "api_keys_file": str(keys_file), "metrics_public": True,
        "priority": VARIANTS[name]}}, console)
    timeout_s = config.gateway.request_timeout_s + 30
    rejected = lambda: refusals(httpx.get(f"{cluster.url}/metrics", timeout=30).text)
    before = rejected()
    with console.status(f"{name}: two keys x {args.senders} senders for {args.duration:.0f} s, bound {args.bound}"):
        served = asyncio.run(asyncio.wait_for(contest(cluster.url, args, timeout_s), args.duration + timeout_s + 60))
    reasons = {k: v - before.get(k, 0.0) for k, v in rejected().items() if v > before.get(k, 0.0)}
    return {"served": {key: asdict(s) for key, s in served.items()}, "shares": shares(served, PrioritySpec()),
            "reasons_429": dict(sorted(reasons.items()))}


def table(results: dict, args: argparse.Namespace) -> Table:
    out = Table(title=f"two keys of one class, prompts of {args.short} and {args.short * args.ratio} tokens, "
                      f"{args.max_tokens} out; {args.senders} senders each, bound {args.bound}, {args.duration:.0f} s")
    for column in ("sharing", "key", "200", "429", "other", "prompt tokens", "output tokens",
                   "share of weighted tokens", "share of requests"):
        out.add_column(column, justify="left" if column in ("sharing", "key") else "right")
    for name, result in results.items():
        for key, s in result["served"].items():
            share = result["shares"][key]
            out.add_row(name, key, str(s["ok"]), str(s["refused"]), str(s["other"]), str(s["prompt_tokens"]),
                        str(s["output_tokens"]), f"{share['tokens']:.1%}", f"{share['requests']:.1%}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--bound", type=int, default=16, help="gateway.max_in_flight")
    parser.add_argument("--senders", type=int, default=24, help="closed-loop senders per key")
    parser.add_argument("--short", type=int, default=100, help="prompt tokens of the short key")
    parser.add_argument("--ratio", type=int, default=4, help="how many times longer the long key's prompts are")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--duration", type=float, default=120.0, help="seconds per variant")
    parser.add_argument("--variants", default="tokens,requests", help=f"of {', '.join(VARIANTS)}")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--out", type=Path, default=REPO / "results" / "token_fairness.json")
    args = parser.parse_args()
    variants = choice_list(parser, "--variants", args.variants, tuple(VARIANTS))
    loopback_if_root("benchmarks.token_fairness")
    raise_open_files(4 * args.senders + 1024)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    results: dict = {}
    try:
        with tempfile.TemporaryDirectory(prefix="serveout-fairness-") as folder, \
                LocalCluster(ClusterOptions(http_port=args.port)) as cluster:
            keys_file = Path(folder) / "keys.txt"  # one class, no per-key limits: only the bound and its sharing
            keys_file.write_text("".join(f"{name}:{key}\n" for name, key in KEYS.items()))
            for name in variants:
                results[name] = run_variant(cluster, name, args, keys_file)
                args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                                "variants": results}, indent=2))
                console.print(table(results, args))
                console.print(f"{name}: 429s by key and reason: {results[name]['reasons_429']}")
    except ServeoutError as exc:
        console.print(f"[red]error: {exc}")
        raise SystemExit(3) from None
    console.print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()
