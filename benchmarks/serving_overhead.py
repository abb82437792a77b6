"""What the stack costs over the bare vLLM OpenAI server (issue 2's benchmark).

Starts ``python -m vllm.entrypoints.openai.api_server`` and then serveout (one
replica) on the same model and engine settings, one after the other, drives both
with the same streaming workload, and prints side by side: TTFT p50/p95 at
concurrency 1, output tokens/s at concurrency 16, and the latency of a trivial GET
(the HTTP path's own cost). Figures, not assertions: this machine is shared.

    .venv/bin/python -m benchmarks.serving_overhead [--out results/serving_overhead.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from benchmarks.streaming_client import RunFigures, run, trivial_latency_ms
from serving.config.loading import build_stack_config
from serving.config.model_spec import ModelCatalog
from serving.engine.placement import engine_runtime_env
from serving.local_cluster import ClusterOptions, LocalCluster
from serving.model_store import ModelStore
from serving.netns import in_loopback_netns, python_argv, reexec_in_loopback_netns

REPO = Path(__file__).resolve().parents[1]
MODEL = "smollm2-135m-instruct"
PROMPT = ("Summarise in one paragraph why serving large language models on many replicas "
          "needs careful routing, admission control and autoscaling, and what goes wrong "
          "without them.")
console = Console() if sys.stdout.isatty() else Console(width=160)


def measure(url: str) -> dict:
    async def go() -> dict:
        await run(url, MODEL, concurrency=4, requests=8, output_tokens=16, prompt=PROMPT)  # warm-up
        c1 = await run(url, MODEL, concurrency=1, requests=20, output_tokens=64, prompt=PROMPT)
        c16 = await run(url, MODEL, concurrency=16, requests=64, output_tokens=128, prompt=PROMPT)
        trivial = await trivial_latency_ms(url, "/v1/models")
        return {"c1": c1, "c16": c16, "trivial_get_ms": trivial}

    return asyncio.run(go())


def bare_vllm(model_path: Path, port: int) -> dict:
    env = dict(os.environ, VLLM_CPU_OMP_THREADS_BIND="0-1", VLLM_HOST_IP="127.0.0.1",
               **engine_runtime_env_vars())
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_path),
           "--served-model-name", MODEL, "--dtype", "bfloat16", "--max-model-len", "2048",
           "--enforce-eager", "--max-num-seqs", "64", "--enable-prefix-caching",
           "--kv-cache-memory-bytes", str(1 << 30), "--host", "127.0.0.1", "--port", str(port),
           "--disable-uvicorn-access-log", "--disable-log-stats"]
    log = open("/tmp/serveout-bare-vllm.log", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        with console.status("bare vLLM server starting"):
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    raise RuntimeError(f"vLLM server exited; see {log.name}")
                try:
                    if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(1)
        with console.status("measuring the bare vLLM server"):
            return measure(url)
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def engine_runtime_env_vars() -> dict:
    catalog = ModelCatalog(REPO / "models")
    config = build_stack_config({}, catalog=catalog, resolve_path=ModelStore(catalog).require)
    return engine_runtime_env(config)["env_vars"]


def serveout_stack(port: int, stream_intervals: list[int]) -> list[dict]:
    """serveout measured once per engine ``stream_interval`` (1 = a chunk per token)."""
    catalog = ModelCatalog(REPO / "models")
    results = []
    with LocalCluster(ClusterOptions(http_port=port)) as cluster:
        for interval in stream_intervals:
            config = build_stack_config({"gateway": {"port": port}, "engine": {"stream_interval": interval}},
                                        catalog=catalog, resolve_path=ModelStore(catalog).require)
            with console.status("serveout starting") as status:
                url = cluster.deploy(config, on_progress=lambda s: status.update(f"serveout: {s}"))
            with console.status(f"measuring serveout (stream_interval {interval})"):
                results.append(measure(url) | {"stream_interval": interval})
    return results


def table(bare: dict, stack: dict) -> Table:
    t = Table(title=f"bare vLLM server vs serveout (1 replica, same engine settings; serveout "
                    f"stream_interval {stack['stream_interval']})")
    for col in ("figure", "bare vLLM", "serveout", "serveout / bare", "target"):
        t.add_column(col)
    b1, s1, b16, s16 = bare["c1"], stack["c1"], bare["c16"], stack["c16"]
    t.add_row("TTFT p50, c=1 (ms)", f"{b1.ttft_p50_ms:.1f}", f"{s1.ttft_p50_ms:.1f}",
              f"+{s1.ttft_p50_ms - b1.ttft_p50_ms:.1f} ms", "<= +25 ms")
    t.add_row("TTFT p95, c=1 (ms)", f"{b1.ttft_p95_ms:.1f}", f"{s1.ttft_p95_ms:.1f}",
              f"+{s1.ttft_p95_ms - b1.ttft_p95_ms:.1f} ms", "")
    t.add_row("output tok/s, c=16", f"{b16.output_tok_s:.0f}", f"{s16.output_tok_s:.0f}",
              f"{s16.output_tok_s / b16.output_tok_s:.2f}", ">= 0.90")
    t.add_row("TTFT p50, c=16 (ms)", f"{b16.ttft_p50_ms:.0f}", f"{s16.ttft_p50_ms:.0f}",
              f"{s16.ttft_p50_ms / b16.ttft_p50_ms:.2f}", "")
    t.add_row("GET /v1/models p50 (ms)", f"{bare['trivial_get_ms']:.2f}", f"{stack['trivial_get_ms']:.2f}",
              f"+{stack['trivial_get_ms'] - bare['trivial_get_ms']:.2f} ms", "")
    return t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "results" / "serving_overhead.json")
    parser.add_argument("--stream-intervals", default="1,4",
                        help="serveout engine stream_interval values to measure (1 = same as bare vLLM)")
    args = parser.parse_args()
    if os.geteuid() == 0 and not in_loopback_netns():
        reexec_in_loopback_netns(python_argv("benchmarks.serving_overhead", sys.argv[1:]))
    model_path = ModelStore(ModelCatalog(REPO / "models")).require(MODEL)
    bare = bare_vllm(model_path, 8100)
    stacks = serveout_stack(8000, [int(v) for v in args.stream_intervals.split(",")])
    for stack in stacks:
        console.print(table(bare, stack))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    as_dict = lambda r: {k: asdict(v) if isinstance(v, RunFigures) else v for k, v in r.items()}
    args.out.write_text(json.dumps({"bare_vllm": as_dict(bare), "serveout": [as_dict(s) for s in stacks]}, indent=2))
    console.print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()
