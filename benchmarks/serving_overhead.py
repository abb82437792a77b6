"""What the stack costs over the bare vLLM OpenAI server, with the real engine (issues 2,
10, 19).

Starts ``python -m vllm.entrypoints.openai.api_server`` alone, then again beside an idle
Ray cluster and Serve (with serveout's direct-ingress settings, no application: the
floor any Ray-based design has on this box, since Ray's daemons share the cores), then
serveout (one replica) on the same model and engine settings, one after the other;
drives each with the same streaming workload and prints side by side: TTFT p50/p95 at
concurrency 1, output tokens/s at 1 and 16, and the latency of a trivial GET. The goals
are set against the floor (tok/s at 16 >= 0.95x, TTFT p50 <= +10 ms); the ratio to
the bare server alone is printed too. Figures, not assertions: this machine is shared.

serveout is measured once per gateway mode (``--gateway-modes``): ``direct`` (the
default: HAProxy -> the engine replica serving HTTP, the router asked once per request)
and ``separate`` (Serve's ingress -> gateway replica -> engine replica).
``--against-ray-llm`` also measures Ray Serve LLM 2.60 (``build_openai_app`` with direct
streaming, same engine settings; ``benchmarks.ray_serve_llm``) with the same client.

    .venv/bin/python -m benchmarks.serving_overhead [--gateway-modes direct,separate]
        [--stream-intervals 1] [--no-floor] [--against-ray-llm] [--out results/serving_overhead.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks.common.isolation import loopback_if_root
from benchmarks.common.model import MODEL, stack_config
from benchmarks.common.references import bare_vllm_server, ensure_ray_llm_installed, ray_serve_llm_server
from benchmarks.common.streaming_client import PROMPT, RunFigures, run, trivial_latency_ms
from serving.cluster.local import ClusterOptions, LocalCluster

REPO = Path(__file__).resolve().parents[1]
console = Console() if sys.stdout.isatty() else Console(width=160)


def measure(url: str) -> dict:
    async def go() -> dict:
        await run(url, MODEL, concurrency=4, requests=8, output_tokens=16, prompt=PROMPT)  # warm-up
        c1 = await run(url, MODEL, concurrency=1, requests=20, output_tokens=64, prompt=PROMPT)
        c16 = await run(url, MODEL, concurrency=16, requests=64, output_tokens=128, prompt=PROMPT)
        trivial = await trivial_latency_ms(url, "/v1/models")
        return {"c1": c1, "c16": c16, "trivial_get_ms": trivial}

    return asyncio.run(go())


def bare_vllm(port: int) -> dict:
    console.print("starting the bare vLLM server")
    with bare_vllm_server(port, Path("/tmp/serveout-bare-vllm.log")) as url:
        with console.status("measuring the bare vLLM server"):
            return measure(url)


def bare_vllm_beside_ray(port: int, ray_http_port: int) -> dict:
    """The bare server measured while an idle Ray cluster and Serve run on the same cores."""
    with LocalCluster(ClusterOptions(http_port=ray_http_port)):
        return bare_vllm(port)


def speed_row(t: Table, label: str, base, beside, stack, attr: str, fmt: str) -> None:
    """One figure of bare / floor / serveout, and serveout's ratio to each."""
    values = [getattr(r, attr) if r is not None else None for r in (base, beside, stack)]
    cells = [format(v, fmt) if v is not None else "-" for v in values]
    ratio = lambda a, b: f"{a / b:.2f}x" if a is not None and b else "-"
    t.add_row(label, *cells, ratio(values[2], values[1]), ratio(values[2], values[0]))


def ray_serve_llm(port: int) -> dict:
    console.print("starting Ray Serve LLM (direct streaming)")
    with ray_serve_llm_server(port, Path("/tmp/serveout-ray-serve-llm.log")) as url:
        with console.status("measuring Ray Serve LLM"):
            return measure(url)


def presence_table(alone: dict, beside: dict) -> Table:
    t = Table(title="bare vLLM server alone vs beside an idle Ray cluster + Serve (no application)")
    for col in ("figure", "alone", "beside idle Ray", "beside / alone"):
        t.add_column(col)
    a1, b1, a16, b16 = alone["c1"], beside["c1"], alone["c16"], beside["c16"]
    t.add_row("TTFT p50, c=1 (ms)", f"{a1.ttft_p50_ms:.1f}", f"{b1.ttft_p50_ms:.1f}",
              f"+{b1.ttft_p50_ms - a1.ttft_p50_ms:.1f} ms")
    t.add_row("output tok/s, c=1", f"{a1.output_tok_s:.1f}", f"{b1.output_tok_s:.1f}",
              f"{b1.output_tok_s / a1.output_tok_s:.2f}")
    t.add_row("output tok/s, c=16", f"{a16.output_tok_s:.0f}", f"{b16.output_tok_s:.0f}",
              f"{b16.output_tok_s / a16.output_tok_s:.2f}")
    return t


def serveout_stack(port: int, modes: list[str], stream_intervals: list[int]) -> list[dict]:
    """serveout measured once per gateway mode and engine ``stream_interval`` (1 = a
    chunk per token)."""
    results = []
    with LocalCluster(ClusterOptions(http_port=port)) as cluster:
        for mode in modes:
            for interval in stream_intervals:
                config = stack_config({"gateway": {"port": port, "mode": mode},
                                       "engine": {"stream_interval": interval}})
                with console.status(f"serveout ({mode}) starting") as status:
                    url = cluster.deploy(config, on_progress=lambda s: status.update(f"serveout: {s}"))
                with console.status(f"measuring serveout ({mode}, stream_interval {interval})"):
                    results.append(measure(url) | {"gateway_mode": mode, "stream_interval": interval})
    return results


def reference_table(name: str, reference: dict, stacks: list[dict]) -> Table:
    t = Table(title=f"serveout vs {name}, same client, same box (serveout must beat it on both)")
    for col in ("figure", name, *(f"serveout {s['gateway_mode']}" for s in stacks)):
        t.add_column(col, justify="right")
    t.add_row("TTFT p50, c=1 (ms)", f"{reference['c1'].ttft_p50_ms:.1f}",
              *(f"{s['c1'].ttft_p50_ms:.1f}" for s in stacks))
    t.add_row("output tok/s, c=16", f"{reference['c16'].output_tok_s:.0f}",
              *(f"{s['c16'].output_tok_s:.0f} ({s['c16'].output_tok_s / reference['c16'].output_tok_s:.2f}x)"
                for s in stacks))
    return t


def table(bare: dict, floor: dict | None, stack: dict) -> Table:
    t = Table(title=f"bare vLLM, bare vLLM beside idle Ray (the floor), serveout (1 replica, same engine "
                    f"settings; gateway {stack['gateway_mode']}, stream_interval {stack['stream_interval']}); "
                    f"goals vs the floor: tok/s at c=16 >= 0.95x, TTFT p50 at c=1 <= +10 ms")
    for col in ("figure", "bare vLLM", "beside idle Ray", "serveout", "serveout / floor", "serveout / bare"):
        t.add_column(col, justify="right")
    f = floor or {}
    b1, f1, s1 = bare["c1"], f.get("c1"), stack["c1"]
    floor_ttft = (f1 or b1).ttft_p50_ms
    t.add_row("TTFT p50, c=1 (ms)", f"{b1.ttft_p50_ms:.1f}", f"{f1.ttft_p50_ms:.1f}" if f1 else "-",
              f"{s1.ttft_p50_ms:.1f}", f"{s1.ttft_p50_ms - floor_ttft:+.1f} ms",
              f"{s1.ttft_p50_ms - b1.ttft_p50_ms:+.1f} ms")
    speed_row(t, "TTFT p95, c=1 (ms)", b1, f1, s1, "ttft_p95_ms", ".1f")
    speed_row(t, "output tok/s, c=1", b1, f1, s1, "output_tok_s", ".1f")
    speed_row(t, "output tok/s, c=16", bare["c16"], f.get("c16"), stack["c16"], "output_tok_s", ".0f")
    speed_row(t, "TTFT p50, c=16 (ms)", bare["c16"], f.get("c16"), stack["c16"], "ttft_p50_ms", ".0f")
    t.add_row("GET /v1/models p50 (ms)", f"{bare['trivial_get_ms']:.2f}",
              f"{f['trivial_get_ms']:.2f}" if f else "-", f"{stack['trivial_get_ms']:.2f}", "", "")
    return t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "results" / "serving_overhead.json")
    parser.add_argument("--gateway-modes", default="direct",
                        help="serveout gateway modes to measure, comma-separated (direct, separate; '' for none)")
    parser.add_argument("--stream-intervals", default="1",
                        help="serveout engine stream_interval values to measure (1 = same as bare vLLM)")
    parser.add_argument("--serve-env", default="", metavar="KEY=VALUE,...",
                        help="extra environment for serveout's Ray cluster (e.g. Serve's fast-path switches)")
    parser.add_argument("--no-floor", action="store_true",
                        help="skip the bare server beside an idle Ray cluster and Serve")
    parser.add_argument("--against-ray-llm", action="store_true",
                        help="also measure Ray Serve LLM 2.60 with direct streaming (installs pyarrow, pandas)")
    args = parser.parse_args()
    extra_env = dict(item.split("=", 1) for item in args.serve_env.split(",") if item)
    if args.against_ray_llm:
        ensure_ray_llm_installed()  # from the package index: before the network namespace
    loopback_if_root("benchmarks.serving_overhead")
    bare = bare_vllm(8100)
    os.environ.update(extra_env)  # before this process starts Ray: every Ray process inherits it
    beside = None if args.no_floor else bare_vllm_beside_ray(8100, 8000)
    modes = [m for m in args.gateway_modes.split(",") if m]
    stacks = serveout_stack(8000, modes, [int(v) for v in args.stream_intervals.split(",")]) if modes else []
    ray_llm = ray_serve_llm(8300) if args.against_ray_llm else None
    if beside:
        console.print(presence_table(bare, beside))
    for stack in stacks:
        console.print(table(bare, beside, stack))
    if ray_llm:
        console.print(reference_table("Ray Serve LLM", ray_llm, stacks))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    as_dict = lambda r: {k: asdict(v) if isinstance(v, RunFigures) else v for k, v in r.items()}
    args.out.write_text(json.dumps({"bare_vllm": as_dict(bare), "serve_env": extra_env,
                                    "bare_vllm_beside_idle_ray": as_dict(beside) if beside else None,
                                    "ray_serve_llm": as_dict(ray_llm) if ray_llm else None,
                                    "serveout": [as_dict(s) for s in stacks]}, indent=2))
    console.print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()
