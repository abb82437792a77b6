"""The serving path's own cost per streamed token (issues 10 and 19), on the null engine.

Deploys serveout with the null engine (one null engine replica bound to one core, no
model: it streams `` tok`` words at ``--tokens-per-s`` per stream, 0 = one per
event-loop turn), drives ``--concurrency`` closed-loop streams for ``--duration``
seconds from a separate client process (the benchmarks' streaming client), and prints
per concurrency:

- streamed tok/s and req/s, per front-end core and per core of the whole stack;
- CPU µs per streamed token (and per request) of each process: in the direct mode
  (the default) HAProxy, the routers (``ray::ServeReplica:<app>:router``) and the
  engine replica serving HTTP itself; in the separate mode Serve's HTTP proxy
  (``ray::ProxyActor``), the gateway replica(s) and the engine replica; Ray's other
  processes (controller, raylet, GCS, HAProxy's manager, idle workers) too, and the
  sum over **every** process of the stack (the client's excluded). psutil CPU times of
  each process, taken when the client starts its timed window and when it ends; only
  processes this script started are looked at (other jobs on a shared box run Ray too).

``--against minimal`` (the default) runs the same client, same run, against the
smallest honest Python SSE server (``benchmarks.minimal_sse_server``: one uvicorn
process, every frame by ``json.dumps``, the same token schedule): the reference the
issue's goal is set against (the stack's CPU per token <= 2x it).

``--against vllm-api-server`` then runs the same client at the same concurrency
against vLLM's own OpenAI server (``benchmarks.common.references``) with the real default
model (vLLM has no null engine), and reports the CPU µs per token of its API-server
process against its EngineCore process: what vLLM's own HTTP front end costs per token
on this box, beside serveout's. The model bounds that run's tok/s, so only its per-token
CPU figures compare with the null-engine run.

``--gateway-mode separate`` measures the separate mode (every token through the
gateway replica) instead.

    .venv/bin/python -m benchmarks.serving_ceiling [--concurrency 32,128] [--duration 20]
        [--tokens-per-s 0] [--output-tokens 256] [--gateway-mode direct|separate]
        [--against minimal,vllm-api-server]

Figures are printed and written to ``results/serving_ceiling.json``, never asserted.
As root the script re-runs itself in a loopback-only network namespace.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import psutil
from rich.console import Console
from rich.table import Table

from benchmarks.common.cpu import cpu_s, machine_busy_s, percent_of_cores
from benchmarks.common.isolation import loopback_if_root
from benchmarks.common.model import MODEL, stack_config
from benchmarks.common.references import bare_vllm_server
from benchmarks.common.servers import running
from benchmarks.common.streaming_client import PROMPT, chat_body, stream_one
from loadtest.analysis.stats import percentile
from serving.cluster.local import ClusterOptions, LocalCluster
from serving.cluster.netns import python_argv

REPO = Path(__file__).resolve().parents[1]
APP = "serveout"
CLIENT_SLACK_S = 120.0  # start-up, warm-up and the last streams, past --duration
console = Console() if sys.stdout.isatty() else Console(width=180)

Matcher = Callable[[str], bool]


@dataclass(frozen=True)
class Target:
    """The processes of one target, by role (a process takes the first role that matches)."""

    roles: dict[str, Matcher]
    front_end: tuple[str, ...]  # the HTTP side: what a gateway core carries
    path: tuple[str, ...]  # every serving-path process (the engine's model work excluded)
    gateway: str | None = None


SEPARATE = Target(
    roles={"HTTP proxy": lambda cmd: "ProxyActor" in cmd,
           "gateway": lambda cmd: f"ServeReplica:{APP}:gateway" in cmd,
           "engine replica": lambda cmd: f"ServeReplica:{APP}:engine" in cmd},
    front_end=("HTTP proxy", "gateway"), path=("HTTP proxy", "gateway", "engine replica"), gateway="gateway")
DIRECT = Target(  # the engine replica serves HTTP itself: it is the front end, HAProxy in front
    roles={"HAProxy": lambda cmd: "haproxy" in cmd.split(" ", 1)[0],
           "routers": lambda cmd: f"ServeReplica:{APP}:router" in cmd,
           "engine replica (serves HTTP)": lambda cmd: f"ServeReplica:{APP}:engine" in cmd},
    front_end=("HAProxy", "routers", "engine replica (serves HTTP)"),
    path=("HAProxy", "routers", "engine replica (serves HTTP)"), gateway="engine replica (serves HTTP)")
MINIMAL = Target(
    roles={"minimal SSE server": lambda cmd: "benchmarks.minimal_sse_server" in cmd},
    front_end=("minimal SSE server",), path=("minimal SSE server",))
VLLM = Target(  # its engine processes are retitled VLLM::EngineCore / VLLM::Worker (setproctitle)
    roles={"vLLM EngineCore": lambda cmd: "EngineCore" in cmd,
           "vLLM workers": lambda cmd: "VLLM::Worker" in cmd,
           "vLLM API server": lambda cmd: "vllm.entrypoints.openai.api_server" in cmd or "APIServer" in cmd},
    front_end=("vLLM API server",), path=("vLLM API server",))
OTHER = "other processes started here (Ray daemons, controller, idle workers)"
EVERY = "every process of the stack (the client's excluded)"


# --- the client (a child process, so its CPU is its own) ---------------------------


@dataclass(frozen=True)
class LoadFigures:
    concurrency: int
    requests: int
    errors: int
    tokens: int
    wall_s: float
    ttft_p50_ms: float
    ttft_p95_ms: float


async def closed_loop(url: str, body: dict, concurrency: int, duration_s: float) -> LoadFigures:
    """``concurrency`` workers, each starting a new stream as its last one ends, until
    ``duration_s`` has passed (streams under way then run to their end)."""
    results, errors = [], 0
    limits = httpx.Limits(max_connections=concurrency * 2)
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:
        start = time.perf_counter()
        end = start + duration_s

        async def worker() -> None:
            nonlocal errors
            while time.perf_counter() < end:
                try:
                    results.append(await stream_one(client, url, body))
                except (httpx.HTTPError, json.JSONDecodeError):
                    errors += 1
                    await asyncio.sleep(0.1)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - start
    ttfts = sorted(r.ttft_s * 1000 for r in results) or [float("nan")]
    return LoadFigures(concurrency, len(results), errors, sum(r.output_tokens for r in results), wall,
                       percentile(ttfts, 50), percentile(ttfts, 95))


def client_main(argv: list[str]) -> None:
    """``client URL CONCURRENCY DURATION_S OUTPUT_TOKENS``: warm up, print ``start``, run,
    print the figures as one JSON line."""
    url, concurrency, duration_s, output_tokens = argv[0], int(argv[1]), float(argv[2]), int(argv[3])
    body = chat_body(MODEL, PROMPT, output_tokens)
    asyncio.run(closed_loop(url, body, concurrency, min(3.0, duration_s)))  # warm-up
    print("start", flush=True)
    print(json.dumps(asdict(asyncio.run(closed_loop(url, body, concurrency, duration_s)))), flush=True)


# --- process CPU ----------------------------------------------------------------------


def command_line(process: psutil.Process) -> str:
    try:
        return " ".join([process.name(), *process.cmdline()])
    except psutil.Error:
        return ""


def find_roles(roles: dict[str, Matcher]) -> dict[str, list[psutil.Process]]:
    """This script's descendant processes by role (first matching role), the rest as OTHER."""
    found: dict[str, list[psutil.Process]] = {role: [] for role in [*roles, OTHER]}
    for process in psutil.Process().children(recursive=True):
        cmd = command_line(process)
        role = next((r for r, matches in roles.items() if matches(cmd)), OTHER)
        found[role].append(process)
    return found


def measure(url: str, target: Target, concurrency: int, duration_s: float, output_tokens: int) -> dict:
    """One timed window of the client at ``concurrency``, with every role's CPU."""
    argv = ["client", url, str(concurrency), str(duration_s), str(output_tokens)]
    client = subprocess.Popen(python_argv("benchmarks.serving_ceiling", argv), stdout=subprocess.PIPE,
                              text=True, cwd=REPO)
    watchdog = threading.Timer(duration_s + CLIENT_SLACK_S, client.kill)  # bounds the readlines
    watchdog.start()
    try:
        found = find_roles(target.roles)
        found[OTHER] = [p for p in found[OTHER] if p.pid != client.pid]
        found["client"] = [psutil.Process(client.pid)]
        for role in (r for r in target.roles if not found[r]):
            console.print(f"[yellow]no {role} process found among this script's descendants: its CPU reads 0")
        line = client.stdout.readline()
        if line.strip() != "start":
            raise RuntimeError(f"the client did not start (said {line!r})")
        before = {role: cpu_s(ps) for role, ps in found.items()}
        busy0, t0 = machine_busy_s(), time.monotonic()
        line = client.stdout.readline()
        after = {role: cpu_s(ps) for role, ps in found.items()}
        window = time.monotonic() - t0
        busy = percent_of_cores(machine_busy_s() - busy0, window)
        if not line:
            raise RuntimeError(f"the client ended without figures (killed after {duration_s + CLIENT_SLACK_S:.0f} s?)")
        load = LoadFigures(**json.loads(line))
    finally:
        watchdog.cancel()
        if client.poll() is None:
            client.kill()
        client.wait(timeout=10)
    return {"load": asdict(load), "window_s": window, "machine_busy_percent": busy,
            "processes": {role: {"count": len(found[role]), "cpu_s": after[role] - before[role]} for role in found}}


def figures(run: dict, target: Target) -> dict:
    """Per-token and per-core figures of one measured window (pure)."""
    load, window, processes = run["load"], run["window_s"], run["processes"]
    tokens, requests = max(load["tokens"], 1), max(load["requests"], 1)

    def per_cpu_s(roles: tuple[str, ...]) -> float | None:
        cpu_s = sum(processes[r]["cpu_s"] for r in roles)
        return load["tokens"] / cpu_s if cpu_s > 0 else None

    stack_cpu_s = sum(p["cpu_s"] for role, p in processes.items() if role != "client")
    out = {"tok_s": load["tokens"] / load["wall_s"], "req_s": load["requests"] / load["wall_s"],
           "stack_cpu_us_per_token": 1e6 * stack_cpu_s / tokens,
           "stack_cpu_us_per_request": 1e6 * stack_cpu_s / requests,
           "tok_s_per_stack_core": load["tokens"] / stack_cpu_s if stack_cpu_s > 0 else None,
           "tok_s_per_front_end_core": per_cpu_s(target.front_end), "tok_s_per_path_core": per_cpu_s(target.path),
           "processes": {role: {"count": p["count"], "cpu_percent": 100 * p["cpu_s"] / window,
                                "cpu_us_per_token": 1e6 * p["cpu_s"] / tokens,
                                "cpu_us_per_request": 1e6 * p["cpu_s"] / requests}
                         for role, p in processes.items()}}
    if target.gateway is not None:
        gateways = max(processes[target.gateway]["count"], 1)
        out |= {"gateway_replicas": gateways, "tok_s_per_gateway_replica": out["tok_s"] / gateways,
                "req_s_per_gateway_replica": out["req_s"] / gateways,
                "tok_s_per_gateway_core": per_cpu_s((target.gateway,))}
    return out


# --- the two targets ------------------------------------------------------------------


def null_engine_runs(args: argparse.Namespace) -> list[dict]:
    top = max(args.concurrency)
    config = stack_config({
        "engine_backend": {"kind": "null", "tokens_per_s": args.tokens_per_s, "ttft_s": args.ttft_ms / 1000},
        "engine": {"max_num_seqs": top, "stream_interval": args.stream_interval},
        "gateway": {"port": args.port, "max_in_flight": max(256, 2 * top), "mode": args.gateway_mode},
    })
    target = DIRECT if config.gateway.direct else SEPARATE
    runs = []
    with LocalCluster(ClusterOptions(http_port=args.port)) as cluster:
        with console.status("serveout (null engine) starting") as status:
            url = cluster.deploy(config, on_progress=lambda s: status.update(f"serveout: {s}"))
        for c in args.concurrency:
            with console.status(f"null engine: {c} streams for {args.duration:g} s"):
                run = measure(url, target, c, args.duration, args.output_tokens)
            runs.append(run | figures(run, target))
    return runs


def minimal_runs(args: argparse.Namespace) -> list[dict]:
    """The same client against ``benchmarks.minimal_sse_server`` (same token schedule)."""
    port = args.port + 200
    argv = ["--port", str(port), "--tokens-per-s", str(args.tokens_per_s), "--ttft-ms", str(args.ttft_ms)]
    url = f"http://127.0.0.1:{port}"
    with running(python_argv("benchmarks.minimal_sse_server", argv), url, name="the minimal SSE server", log=None,
                 timeout_s=60):
        runs = []
        for c in args.concurrency:
            with console.status(f"minimal SSE server: {c} streams for {args.duration:g} s"):
                run = measure(url, MINIMAL, c, args.duration, args.output_tokens)
            runs.append(run | figures(run, MINIMAL))
        return runs


def vllm_runs(args: argparse.Namespace) -> list[dict]:
    runs = []
    console.print("starting the bare vLLM server (real model)")
    with bare_vllm_server(args.port + 100, Path("/tmp/serveout-ceiling-vllm.log")) as url:
        for c in args.concurrency:
            with console.status(f"vLLM API server: {c} streams for {args.vllm_duration:g} s"):
                run = measure(url, VLLM, c, args.vllm_duration, args.vllm_output_tokens)
            runs.append(run | figures(run, VLLM))
    return runs


def fmt(value: float | None, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


ROWS = (("streamed tok/s", "tok_s"), ("req/s", "req_s"),
        ("CPU µs per token, every process of the stack", "stack_cpu_us_per_token"),
        ("tok/s per core of the whole stack", "tok_s_per_stack_core"),
        ("tok/s per gateway replica", "tok_s_per_gateway_replica"),
        ("req/s per gateway replica", "req_s_per_gateway_replica"),
        ("tok/s per gateway core", "tok_s_per_gateway_core"),
        ("tok/s per front-end core", "tok_s_per_front_end_core"))


def table(title: str, runs: list[dict]) -> Table:
    t = Table(title=title)
    t.add_column("figure")
    for run in runs:
        t.add_column(f"c={run['load']['concurrency']}", justify="right")
    for label, key in ROWS:
        if key in runs[0]:
            t.add_row(label, *(fmt(r[key]) for r in runs))
    t.add_row("requests (errors)", *(f"{r['load']['requests']} ({r['load']['errors']})" for r in runs))
    t.add_row("TTFT p50 / p95 (ms)", *(f"{r['load']['ttft_p50_ms']:.0f} / {r['load']['ttft_p95_ms']:.0f}" for r in runs))
    for role in runs[0]["processes"]:
        cells = []
        for p in (r["processes"][role] for r in runs):
            count = "" if p["count"] == 1 else f" x{p['count']}"
            cells.append(f"{p['cpu_us_per_token']:.1f} ({p['cpu_percent']:.0f}%){count}")
        t.add_row(f"{role}: CPU µs/token (% of a core)", *cells)
    t.add_row("machine busy (% of all cores)", *(f"{r['machine_busy_percent']:.0f}%" for r in runs))
    return t


def ratio_table(stack: list[dict], minimal: list[dict]) -> Table:
    """serveout's CPU per token over the minimal server's, same concurrency, same run."""
    t = Table(title="serveout / minimal SSE server, same run (goal: CPU per token <= 2x)")
    t.add_column("figure")
    for run in stack:
        t.add_column(f"c={run['load']['concurrency']}", justify="right")
    t.add_row("CPU µs per token, every process: serveout / minimal",
              *(f"{a['stack_cpu_us_per_token']:.1f} / {b['stack_cpu_us_per_token']:.1f} = "
                f"{a['stack_cpu_us_per_token'] / b['stack_cpu_us_per_token']:.2f}x" for a, b in zip(stack, minimal)))
    t.add_row("streamed tok/s: serveout / minimal",
              *(f"{a['tok_s']:.0f} / {b['tok_s']:.0f} = {a['tok_s'] / b['tok_s']:.2f}x" for a, b in zip(stack, minimal)))
    return t


def concurrency_list(text: str) -> list[int]:
    return [int(v) for v in text.split(",")]


def main() -> None:
    if sys.argv[1:2] == ["client"]:
        client_main(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=concurrency_list, default=[32, 128], help="streams at once, comma-separated")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per concurrency (null engine)")
    parser.add_argument("--output-tokens", type=int, default=256, help="tokens per request (null engine)")
    parser.add_argument("--tokens-per-s", type=float, default=0.0, help="null engine pace per stream; 0 = as fast as possible")
    parser.add_argument("--ttft-ms", type=float, default=0.0, help="null engine time to first token")
    parser.add_argument("--stream-interval", type=int, default=1, help="tokens per chunk (1 = a chunk per token)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--gateway-mode", choices=["direct", "separate"], default="direct",
                        help="separate: a gateway replica in front of the null replica")
    parser.add_argument("--against", type=lambda text: [t for t in text.split(",") if t], default=["minimal"],
                        help="references measured in the same run, comma-separated: minimal (the minimal "
                             "SSE server), vllm-api-server (vLLM's own server, real model); '' for none")
    parser.add_argument("--vllm-duration", type=float, default=30.0, help="seconds per concurrency (vLLM)")
    parser.add_argument("--vllm-output-tokens", type=int, default=64, help="tokens per request (vLLM)")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "serving_ceiling.json")
    args = parser.parse_args()
    loopback_if_root("benchmarks.serving_ceiling")
    results = {"settings": {k: v for k, v in vars(args).items() if k != "out"}, "cores": psutil.cpu_count()}
    results["null_engine"] = null_engine_runs(args)
    console.print(table(f"serveout on the null engine (gateway {args.gateway_mode}, 1 null replica, "
                        f"{args.tokens_per_s:g} tok/s per stream, {args.output_tokens} tokens per request)",
                        results["null_engine"]))
    if "minimal" in args.against:
        results["minimal"] = minimal_runs(args)
        console.print(table("the minimal Python SSE server (one uvicorn process, json.dumps per frame)",
                            results["minimal"]))
        console.print(ratio_table(results["null_engine"], results["minimal"]))
    if "vllm-api-server" in args.against:
        results["vllm_api_server"] = vllm_runs(args)
        console.print(table(f"vLLM's own API server, real model ({args.vllm_output_tokens} tokens per request)",
                            results["vllm_api_server"]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=str))
    console.print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()
