"""LoRA adapters on serveout against bare vLLM serving the same adapters (issue 33).

Starts ``vllm.entrypoints.openai.api_server`` with ``--enable-lora --lora-modules`` (the
stack's adapters, its LoRA settings), alone and then beside an idle Ray cluster and
Serve (the floor any Ray-based stack has on this box, whose daemons share the two
cores), then serveout (one replica, direct mode, the same adapters) on the same engine
settings, one after the other, and prints side by side:

- **greedy answers**: each served model (the base and every adapter) answers a few
  prompts at temperature 0; the texts must be identical to bare vLLM's (same engine,
  same adapter weights: the stack must add nothing and lose nothing);
- **a mix** of models at concurrency 8 (Zipf-like shares: the first adapter hottest,
  the base model the tail): output tokens/s, TTFT p50/p95, serveout / bare;
- **what LoRA costs**: the base model alone against one adapter alone, same
  concurrency, on each server.

Figures, not assertions: this machine is shared and its CPU is not the one a GPU
cluster has. The adapters are the ones ``./scripts/setup`` trains (serving/adapters).

    .venv/bin/python -m benchmarks.adapters_vs_vllm [--out results/adapters_vs_vllm.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from dataclasses import asdict
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from benchmarks.common.isolation import loopback_if_root
from benchmarks.common.model import MODEL, stack_config
from benchmarks.common.references import bare_vllm_server
from benchmarks.common.streaming_client import RunFigures, chat_body, run_bodies
from serving.cluster.local import ClusterOptions, LocalCluster
from serving.config.stack import StackConfig

REPO = Path(__file__).resolve().parents[1]
console = Console() if sys.stdout.isatty() else Console(width=160)
QUESTIONS = ("Can I take ibuprofen with my blood pressure pills?", "When is the clinic open on Saturday?",
             "How should I store insulin while travelling?", "I need to move my appointment to next week.")
MIX_SHARES = tuple(round(1 / k / sum(1 / j for j in range(1, 6)), 3) for k in range(1, 6))  # Zipf s=1: 4 adapters, base
CONCURRENCY, MIX_REQUESTS, OUTPUT_TOKENS = 8, 48, 64


def adapter_config() -> StackConfig:
    """The stack's trained adapters, each also under a second name: four adapters."""
    config = stack_config({"adapters": "all", "gateway": {"mode": "direct"}})
    twins = tuple(a.model_copy(update={"name": f"{a.name}-b"}) for a in config.adapters)
    return config.model_copy(update={"adapters": (*config.adapters, *twins)})


def vllm_lora_args(config: StackConfig) -> list[str]:
    """The bare server's LoRA flags: the stack's adapters and LoRA settings."""
    lora = config.engine_settings.lora
    assert lora is not None
    modules = [f"{a.name}={a.path}" for a in config.adapters]
    return ["--enable-lora", "--max-loras", str(lora.max_loras), "--max-lora-rank", str(lora.max_lora_rank),
            "--max-cpu-loras", str(lora.host_slots), "--lora-modules", *modules]


def mix_bodies(models: list[str], seed: int = 0) -> list[dict]:
    """``MIX_REQUESTS`` requests over ``models`` (adapters first, base last) by ``MIX_SHARES``."""
    rng = random.Random(seed)
    picks = rng.choices(models, weights=MIX_SHARES, k=MIX_REQUESTS)
    return [chat_body(m, QUESTIONS[i % len(QUESTIONS)], OUTPUT_TOKENS) for i, m in enumerate(picks)]


async def greedy_answers(url: str, models: list[str]) -> dict[str, list[str]]:
    async with httpx.AsyncClient(timeout=300) as client:
        answers: dict[str, list[str]] = {}
        for model in models:
            answers[model] = []
            for question in QUESTIONS:
                response = await client.post(f"{url}/v1/chat/completions", json={
                    "model": model, "messages": [{"role": "user", "content": question}],
                    "max_tokens": 32, "temperature": 0})
                response.raise_for_status()
                answers[model].append(response.json()["choices"][0]["message"]["content"])
        return answers


def measure(url: str, config: StackConfig) -> dict:
    adapters = list(config.adapter_names)

    async def go() -> dict:
        answers = await greedy_answers(url, [MODEL, *adapters])
        await run_bodies(url, mix_bodies([*adapters, MODEL])[:8], concurrency=4)  # warm-up
        mix = await run_bodies(url, mix_bodies([*adapters, MODEL]), concurrency=CONCURRENCY)
        one = lambda m: [chat_body(m, QUESTIONS[i % len(QUESTIONS)], OUTPUT_TOKENS) for i in range(32)]
        base = await run_bodies(url, one(MODEL), concurrency=CONCURRENCY)
        lora = await run_bodies(url, one(adapters[0]), concurrency=CONCURRENCY)
        return {"answers": answers, "mix": mix, "base_only": base, "adapter_only": lora}

    return asyncio.run(go())


def bare_vllm(port: int, config: StackConfig) -> dict:
    console.print("starting bare vLLM with the adapters")
    with bare_vllm_server(port, Path("/tmp/serveout-bare-vllm-lora.log"), extra_args=vllm_lora_args(config)) as url:
        with console.status("measuring bare vLLM"):
            return measure(url, config)


def bare_vllm_beside_ray(port: int, ray_http_port: int, config: StackConfig) -> dict:
    """The bare server measured while an idle Ray cluster and Serve run on the same cores."""
    with LocalCluster(ClusterOptions(http_port=ray_http_port)):
        return bare_vllm(port, config)


def serveout(port: int, config: StackConfig) -> dict:
    config = config.model_copy(update={"gateway": config.gateway.model_copy(update={"port": port})})
    with LocalCluster(ClusterOptions(http_port=port)) as cluster:
        with console.status("serveout starting") as status:
            url = cluster.deploy(config, on_progress=lambda s: status.update(f"serveout: {s}"))
        with console.status("measuring serveout"):
            return measure(url, config)


def answers_table(bare: dict, stack: dict) -> Table:
    t = Table(title="greedy answers (temperature 0, 32 tokens): serveout against bare vLLM")
    for col in ("model", "prompts", "identical", "first answer (serveout)"):
        t.add_column(col)
    for model, texts in stack["answers"].items():
        same = sum(a == b for a, b in zip(texts, bare["answers"][model]))
        t.add_row(model, str(len(texts)), f"{same}/{len(texts)}", texts[0][:70].replace("\n", " "))
    return t


def speed_table(bare: dict, floor: dict, stack: dict) -> Table:
    t = Table(title=f"concurrency {CONCURRENCY}, {OUTPUT_TOKENS} output tokens a request "
                    f"(mix: {MIX_REQUESTS} requests, shares {MIX_SHARES} adapters then base); "
                    f"goal: the mix's tok/s >= 0.95x the floor")
    for col in ("run", "figure", "bare vLLM", "beside idle Ray", "serveout", "serveout / floor",
                "serveout / bare"):
        t.add_column(col, justify="right")
    for run in ("mix", "base_only", "adapter_only"):
        b, f, s = bare[run], floor[run], stack[run]
        t.add_row(run, "output tok/s", f"{b.output_tok_s:.0f}", f"{f.output_tok_s:.0f}", f"{s.output_tok_s:.0f}",
                  f"{s.output_tok_s / f.output_tok_s:.2f}x", f"{s.output_tok_s / b.output_tok_s:.2f}x")
        t.add_row("", "TTFT p50 / p95 (ms)", *(f"{r.ttft_p50_ms:.0f} / {r.ttft_p95_ms:.0f}" for r in (b, f, s)),
                  "", "")
    t.add_row("LoRA cost", "adapter / base tok/s",
              *(f"{r['adapter_only'].output_tok_s / r['base_only'].output_tok_s:.2f}x" for r in (bare, floor, stack)),
              "", "")
    return t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "results" / "adapters_vs_vllm.json")
    args = parser.parse_args()
    loopback_if_root("benchmarks.adapters_vs_vllm")
    config = adapter_config()
    bare = bare_vllm(8100, config)
    floor = bare_vllm_beside_ray(8100, 8000, config)
    stack = serveout(8000, config)
    console.print(answers_table(bare, stack))
    console.print(speed_table(bare, floor, stack))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    as_dict = lambda r: {k: asdict(v) if isinstance(v, RunFigures) else v for k, v in r.items()}
    args.out.write_text(json.dumps({"bare_vllm": as_dict(bare), "bare_vllm_beside_idle_ray": as_dict(floor),
                                    "serveout": as_dict(stack)}, indent=2))
    console.print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()
