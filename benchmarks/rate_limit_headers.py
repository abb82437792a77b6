"""Does a client that obeys the rate-limit headers get no 429? Side by side with one that
ignores them, against the same key's limits on the real stack.

Deploys serveout (one replica of the null engine at ``--tokens-per-s`` per stream: the
limits under test are the gateway's, not the engine's) with a keys file of two keys
with the same ``rpm`` and ``tpm`` (``--rpm`` 30, ``--tpm`` 3000), then, for
``--duration`` s (60), two sequential clients at once, each with its own key, sending
the same non-streamed chat requests (``--max-tokens`` 40):

- ``obeying``: before each request, reads the ``x-ratelimit-*`` headers of its last
  answer; when ``remaining-requests`` is 0 or ``remaining-tokens`` is below what the
  request reserves (its prompt plus ``max_tokens``, the prompt known from the last
  answer's ``usage``), it waits the matching ``reset-*`` (OpenAI's advice);
- ``ignoring``: sends at once, and after a 429 waits its ``Retry-After`` (what the
  OpenAI SDK does).

Per client: requests answered, 429s, tokens served and the rate achieved against the
key's limits. Figures are printed and written to ``results/rate_limit_headers.json``,
never asserted. As root it re-runs itself in a loopback-only network namespace.

    .venv/bin/python -m benchmarks.rate_limit_headers [--rpm 30] [--tpm 3000] [--duration 60]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from benchmarks.common.isolation import loopback_if_root
from benchmarks.common.model import MODEL
from benchmarks.common.saturating_clients import deploy, retry_after_s
from serving.cluster.local import ClusterOptions, LocalCluster
from serving.errors import ServeoutError

REPO = Path(__file__).resolve().parents[1]
KEYS = {"obeying": "sk-obeying-headers-0123456789abcdef", "ignoring": "sk-ignoring-headers-0123456789abcdef"}
console = Console() if sys.stdout.isatty() else Console(width=160)
_PART = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s)")
_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_reset(text: str) -> float:
    """Seconds of an OpenAI reset value (``1s``, ``250ms``, ``6m0s``, ``1h2m3.5s``)."""
    parts = _PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        raise ValueError(f"not a reset duration: {text!r}")
    return sum(float(n) * _SECONDS[u] for n, u in parts)


def wait_before(headers: dict[str, str], reserve_tokens: int) -> float:
    """How long an obeying client waits before its next request, from its last answer's
    headers: the ``reset`` of each budget that cannot take the request now."""
    wait = 0.0
    if "x-ratelimit-remaining-requests" in headers and int(headers["x-ratelimit-remaining-requests"]) < 1:
        wait = max(wait, parse_reset(headers["x-ratelimit-reset-requests"]))
    if "x-ratelimit-remaining-tokens" in headers and int(headers["x-ratelimit-remaining-tokens"]) < reserve_tokens:
        wait = max(wait, parse_reset(headers["x-ratelimit-reset-tokens"]))
    return wait


@dataclass
class ClientTally:
    ok: int = 0
    refused: int = 0
    other: int = 0
    tokens: int = 0  # prompt + completion tokens of the answers
    waited_s: float = 0.0  # time spent obeying the headers (or Retry-After)


async def client(url: str, name: str, args: argparse.Namespace) -> ClientTally:
    tally, headers, prompt_tokens = ClientTally(), {}, 0
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Count from one to ten."}],
            "max_tokens": args.max_tokens}
    deadline = time.monotonic() + args.duration
    async with httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {KEYS[name]}"}) as http:
        while time.monotonic() < deadline:
            if name == "obeying" and headers:
                wait = wait_before(headers, prompt_tokens + args.max_tokens)
                tally.waited_s += wait
                await asyncio.sleep(wait)
            response = await http.post(f"{url}/v1/chat/completions", json=body)
            headers = {k.lower(): v for k, v in response.headers.items() if k.lower().startswith("x-ratelimit-")}
            if response.status_code == 200:
                usage = response.json()["usage"]
                tally.ok += 1
                tally.tokens += usage["total_tokens"]
                prompt_tokens = usage["prompt_tokens"]
            elif response.status_code == 429:
                tally.refused += 1
                wait = retry_after_s(response.headers.get("retry-after"))
                tally.waited_s += wait
                await asyncio.sleep(wait)
            else:
                tally.other += 1
    return tally


async def both(url: str, args: argparse.Namespace) -> dict[str, ClientTally]:
    results = await asyncio.gather(*(client(url, name, args) for name in KEYS))
    return dict(zip(KEYS, results))


def table(tallies: dict[str, ClientTally], args: argparse.Namespace) -> Table:
    minutes = args.duration / 60
    out = Table(title=f"one sequential client per key, rpm {args.rpm}, tpm {args.tpm}, {args.duration:.0f} s "
                      f"(the budgets start full: up to {args.rpm} requests and {args.tpm} tokens at once)")
    for column in ("client", "200", "429", "other", "requests / min", "tokens / min", "waited (s)"):
        out.add_column(column, justify="left" if column == "client" else "right")
    for name, t in tallies.items():
        out.add_row(name, str(t.ok), str(t.refused), str(t.other), f"{t.ok / minutes:.1f}",
                    f"{t.tokens / minutes:.0f}", f"{t.waited_s:.1f}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rpm", type=int, default=30)
    parser.add_argument("--tpm", type=int, default=3000)
    parser.add_argument("--max-tokens", type=int, default=40)
    parser.add_argument("--tokens-per-s", type=float, default=200.0, help="the null engine's pace per stream")
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--out", type=Path, default=REPO / "results" / "rate_limit_headers.json")
    args = parser.parse_args()
    loopback_if_root("benchmarks.rate_limit_headers")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(prefix="serveout-headers-") as folder, \
                LocalCluster(ClusterOptions(http_port=args.port)) as cluster:
            keys_file = Path(folder) / "keys.txt"
            keys_file.write_text("".join(f"{name}:{key} rpm={args.rpm} tpm={args.tpm}\n"
                                         for name, key in KEYS.items()))
            deploy(cluster, {"replicas": {"num_replicas": 1},
                             "engine_backend": {"kind": "null", "tokens_per_s": args.tokens_per_s},
                             "gateway": {"port": args.port, "api_keys_file": str(keys_file)}}, console)
            with console.status(f"two clients for {args.duration:.0f} s"):
                tallies = asyncio.run(both(cluster.url, args))
    except ServeoutError as exc:
        console.print(f"[red]error: {exc}")
        raise SystemExit(3) from None
    console.print(table(tallies, args))
    args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                    "clients": {k: asdict(t) for k, t in tallies.items()}}, indent=2))
    console.print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()
