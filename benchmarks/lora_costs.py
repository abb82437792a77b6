"""What LoRA adapters cost one vLLM engine on this box: the simulator's ``lora:`` figures.

Drives ONE real engine in this process (as ``benchmarks.step_time``: serving's engine
arguments, no server, no Ray) with LoRA on, one adapter slot (``max_loras`` 1) and a host
cache of two (``max_cpu_loras`` 2), over the adapters ``./scripts/setup`` trains, each
served under four names (vLLM treats every name as its own adapter):

- **step factor**: ``--batch`` sequences decoding ``--tokens`` tokens, the base model
  against one adapter: the adapter's step time over the base's;
- **activation**: a one-token request whose adapter is in the host cache but not in the
  slot (two names taking turns): its time over a one-token request of the adapter
  already in the slot;
- **load**: a one-token request of a name never seen (read from disk, evicting the host
  cache's oldest), over an activation.

Each figure is the median of ``--repeats`` runs. Prints the figures and the profile's
``lora:`` section to paste into ``simulator/hardware/<profile>.yaml``, and writes
``results/lora_costs.json``. Figures, never asserted.

    .venv/bin/python -m benchmarks.lora_costs [--batch 8] [--tokens 32] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks.common.engine import Driver, in_process_engine, prepare_process
from benchmarks.common.model import stack_config
from simulator.machine import cpu_model

REPO = Path(__file__).resolve().parents[1]
NAMES_PER_ADAPTER = 4


def lora_requests(config) -> list:
    """Every trained adapter under ``NAMES_PER_ADAPTER`` names, as vLLM ``LoRARequest`` s."""
    from vllm.lora.request import LoRARequest

    requests = []
    for copy in range(NAMES_PER_ADAPTER):
        for adapter in config.adapters:
            requests.append(LoRARequest(f"{adapter.name}-{copy}", len(requests) + 1, str(adapter.path)))
    return requests


def timed(driver: Driver, count: int, tokens: int, lora=None) -> float:
    """Seconds to run ``count`` requests of ``tokens`` output tokens to their end."""
    ids = {driver.add(16, tokens, lora_request=lora) for _ in range(count)}
    start = time.perf_counter()
    driver.step_until(lambda: ids <= driver.finished)
    return time.perf_counter() - start


def measure(batch: int, tokens: int, repeats: int) -> dict:
    config = stack_config({"adapters": "all",
                           "engine": {"lora": {"max_loras": 1, "max_cpu_loras": 2}, "enable_prefix_caching": False}})
    prepare_process(config, "benchmarks.lora_costs")
    with in_process_engine(config) as (engine, limits):
        driver = Driver(engine, limits)
        loras = lora_requests(config)
        timed(driver, batch, tokens)
        timed(driver, batch, tokens, loras[0])  # warm-up: kernels, and loras[0] in the slot
        base = [timed(driver, batch, tokens) for _ in range(repeats)]
        adapter = [timed(driver, batch, tokens, loras[0]) for _ in range(repeats)]
        warm = [timed(driver, 1, 1, loras[0]) for _ in range(repeats)]
        active, spare = loras[0], loras[1]  # both in the host cache (its two places)
        timed(driver, 1, 1, spare)
        activate = []
        for _ in range(repeats):
            active, spare = spare, active
            activate.append(timed(driver, 1, 1, active))  # in the host cache, not in the slot
        cold = [timed(driver, 1, 1, lora) for lora in loras[2:2 + repeats]]  # never seen: read from disk
    med = statistics.median
    return {
        "cpu": cpu_model(), "batch": batch, "tokens": tokens, "repeats": repeats, "adapters": len(loras),
        "base_s": base, "adapter_s": adapter, "warm_s": warm, "activate_s": activate, "cold_s": cold,
        "step_factor": med(adapter) / med(base),
        "activate_ms": max(med(activate) - med(warm), 0.0) * 1e3,
        "load_ms": max(med(cold) - med(activate), 0.0) * 1e3,
    }


def profile_section(figures: dict) -> str:
    """The hardware profile's ``lora:`` section for these figures."""
    how = (f"fitted: python -m benchmarks.lora_costs on {figures['cpu']} (batch {figures['batch']}, "
           f"{figures['tokens']} tokens, median of {figures['repeats']})")
    return "\n".join([
        "lora:",
        f"  step_factor: {{value: {figures['step_factor']:.3f}, source: \"{how}: one adapter's decode over the base's\"}}",
        f"  load_ms: {{value: {figures['load_ms']:.2f}, source: \"{how}: a new adapter's first token over an activation\"}}",
        f"  activate_ms: {{value: {figures['activate_ms']:.2f}, source: \"{how}: an adapter from the host cache over "
        "one in the slot\"}",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8, help="sequences in the step-factor batch")
    parser.add_argument("--tokens", type=int, default=32, help="output tokens per step-factor request")
    parser.add_argument("--repeats", type=int, default=5, help="runs per figure (cold loads: as many as there "
                        "are names never used)")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "lora_costs.json")
    args = parser.parse_args(argv)
    figures = measure(args.batch, args.tokens, args.repeats)
    console = Console()
    table = Table(title=f"LoRA on one engine ({figures['cpu']})")
    table.add_column("figure")
    table.add_column("median", justify="right")
    med = statistics.median
    table.add_row(f"base: {args.batch} x {args.tokens} tokens (s)", f"{med(figures['base_s']):.3f}")
    table.add_row(f"one adapter: {args.batch} x {args.tokens} tokens (s)", f"{med(figures['adapter_s']):.3f}")
    table.add_row("step factor (adapter / base)", f"{figures['step_factor']:.2f}x")
    table.add_row("one token, adapter in the slot (ms)", f"{med(figures['warm_s']) * 1e3:.1f}")
    table.add_row("one token, adapter in the host cache (ms)", f"{med(figures['activate_s']) * 1e3:.1f}")
    table.add_row("one token, adapter from disk (ms)", f"{med(figures['cold_s']) * 1e3:.1f}")
    table.add_row("activation (ms)", f"{figures['activate_ms']:.1f}")
    table.add_row("load from disk (ms)", f"{figures['load_ms']:.1f}")
    console.print(table)
    print(profile_section(figures))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2))
    console.print(f"figures written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
