"""Which dtype the CPU engine should use: correctness and speed of each, side by side.

bfloat16 greedy answers depend on the CPU: on Intel Sapphire Rapids (AMX) SmolLM2-135M
in bfloat16 answers "What is the capital of France?" with French gibberish, while
float32 answers "The capital of France is Paris." on every CPU seen. This script starts
the bare vLLM server once per dtype (same engine settings as serveout's replicas),
asks a few greedy questions, and measures TTFT at 1 stream and output tokens/s at 1
and 16 streams, so the cost of the correct choice is a measured figure on this box.

    .venv/bin/python -m benchmarks.dtype_choice [--dtypes bfloat16,float32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import asdict
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from benchmarks.common.model import MODEL
from benchmarks.common.references import bare_vllm_server
from benchmarks.common.streaming_client import run
from simulator.machine import cpu_model

REPO = Path(__file__).resolve().parents[1]
QUESTIONS = {
    "What is the capital of France?": "paris",
    "What is the capital of Germany?": "berlin",
    "What is the capital of Japan?": "tokyo",
}
PROMPT = "Write a short story about a robot who learns to paint."
console = Console() if sys.stdout.isatty() else Console(width=160)


def cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def ask(url: str, question: str) -> str:
    body = {"model": MODEL, "messages": [{"role": "user", "content": question}],
            "temperature": 0, "max_tokens": 32}
    response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
    response.raise_for_status()
    return response.json()["choices"][0]["message"]["content"]


def measure(url: str) -> dict:
    answers = {q: ask(url, q) for q in QUESTIONS}

    async def speed() -> dict:
        await run(url, MODEL, concurrency=4, requests=8, output_tokens=16, prompt=PROMPT)  # warm-up
        c1 = await run(url, MODEL, concurrency=1, requests=12, output_tokens=64, prompt=PROMPT)
        c16 = await run(url, MODEL, concurrency=16, requests=64, output_tokens=128, prompt=PROMPT)
        return {"c1": asdict(c1), "c16": asdict(c16)}

    return {"answers": answers,
            "correct": sum(want in answers[q].lower() for q, want in QUESTIONS.items()),
            **asyncio.run(speed())}


def table(results: dict[str, dict], base: str) -> Table:
    t = Table(title=f"vLLM CPU engine, {MODEL}, by dtype, on {cpu_model()}")
    for col in ("dtype", "greedy answers right", "TTFT p50 c=1 (ms)", "tok/s c=1", "tok/s c=16",
                f"tok/s c=16 vs {base}"):
        t.add_column(col)
    ref = results[base]["c16"]["output_tok_s"]
    for dtype, r in results.items():
        t.add_row(dtype, f"{r['correct']}/{len(QUESTIONS)}", f"{r['c1']['ttft_p50_ms']:.1f}",
                  f"{r['c1']['output_tok_s']:.1f}", f"{r['c16']['output_tok_s']:.0f}",
                  f"{r['c16']['output_tok_s'] / ref:.2f}x")
    return t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--out", type=Path, default=REPO / "results" / "dtype_choice.json")
    args = parser.parse_args()
    dtypes = args.dtypes.split(",")
    results: dict[str, dict] = {}
    for dtype in dtypes:
        with console.status(f"bare vLLM server, {dtype}: starting"):
            with bare_vllm_server(args.port, Path(f"/tmp/serveout-dtype-{dtype}.log"), dtype=dtype) as url:
                results[dtype] = measure(url)
        for question, answer in results[dtype]["answers"].items():
            console.print(f"[bold]{dtype}[/] {question} -> {answer!r}")
    console.print(table(results, dtypes[0]))
    flags = cpu_flags()
    extra = {"cpu": cpu_model(), "amx": "amx_bf16" in flags, "avx512_bf16": "avx512_bf16" in flags}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({**extra, "results": results}, indent=2))
    console.print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()
