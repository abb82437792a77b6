"""The simulator's engine model against a real in-process vLLM engine, same arrivals (issue 20).

Where the truth repeats on this machine: ONE vLLM engine in this process (as
``benchmarks.step_time``: V1 engine core in-process, serving's engine arguments, no
Ray, no HTTP, prefix caching off) is fed a Poisson arrival schedule of fixed-length
requests (the load tester's own ``schedule``); the simulator's replica
(:func:`simulator.batch_run.run_arrivals`, the step-time model without any in-stack
constant) is fed the very same schedule. Prints TPOT p50 and output tok/s of both and
the error; the goal is within 10%. The CPU profile is ``--profile`` (default: the
``calibrate --quick`` output if there is one, else ``cpu``).

    .venv/bin/python -m benchmarks.engine_vs_simulator [--rate 1.0] [--requests 40]
        [--input-len 128] [--output-len 64] [--profile results/cpu-fitted.yaml]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common.engine import Driver, Limits, in_process_engine, prepare_process
from benchmarks.common.model import MODEL, catalog, model_path
from loadtest.analysis.arrivals import schedule
from serving.config.loading import build_stack_config
from simulator.batch_run import run_arrivals
from simulator.hardware import load_hardware
from simulator.machine import cpu_mismatch, cpu_model
from simulator.step_time import StepTimeModel

REPO = Path(__file__).resolve().parents[1]
GOAL_PCT = 10.0


def figures(rows: list[tuple[float, float, int]], start: float) -> dict[str, float]:
    """TPOT p50 (s) and output tok/s of (first token, last token, tokens) rows (pure)."""
    tpot = [(last - first) / (n - 1) for first, last, n in rows if n > 1]
    end = max(last for _, last, _ in rows)
    return {"tpot_p50_s": float(np.median(tpot)), "output_tok_s": sum(n for *_, n in rows) / (end - start)}


def run_engine(config, arrivals: np.ndarray, input_len: int, output_len: int) -> tuple[list, Limits, int]:
    """Feed the engine the requests at their arrival times; each one's token times."""
    with in_process_engine(config) as (engine, limits):
        driver = Driver(engine, limits)
        for _ in range(2):  # warm-up, unrecorded
            rid = driver.add(input_len, 8)
            driver.step_until(lambda: rid in driver.finished)
        tokens: dict[str, list[float]] = {}
        ids: list[str] = []
        start = time.perf_counter()
        while len(ids) < len(arrivals) or engine.has_unfinished_requests():
            now = time.perf_counter() - start
            while len(ids) < len(arrivals) and arrivals[len(ids)] <= now:
                ids.append(driver.add(input_len, output_len))
            if not engine.has_unfinished_requests():
                time.sleep(max(0.0, arrivals[len(ids)] - now))
                continue
            for out in engine.step():
                got = sum(len(o.token_ids) for o in out.outputs)
                if got:
                    tokens.setdefault(out.request_id, []).extend([time.perf_counter() - start] * got)
        rows = [(tokens[r][0], tokens[r][-1], len(tokens[r])) for r in ids]
        return rows, limits, engine.vllm_config.cache_config.block_size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=1.0, help="Poisson arrivals per second")
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", default=None, help="CPU hardware profile (name or YAML path)")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "engine_vs_simulator.json")
    args = parser.parse_args()
    config = build_stack_config({"model": MODEL, "engine": {"enable_prefix_caching": False}}, catalog=catalog(),
                                model_path=model_path())
    prepare_process(config, "benchmarks.engine_vs_simulator")
    arrivals = schedule(start_rate=args.rate, burstiness=None, seed=args.seed, count=args.requests,
                        duration_s=args.requests / args.rate * 4)
    real, limits, block = run_engine(config, arrivals, args.input_len, args.output_len)
    fitted = REPO / "results" / "cpu-fitted.yaml"
    profile = load_hardware(args.profile or (fitted if fitted.is_file() else "cpu"))
    model = StepTimeModel(config.model.architecture, profile, tensor_parallel=1, dtype=str(config.model.dtype))
    simulated = run_arrivals(model, arrivals, [args.input_len] * len(arrivals), [args.output_len] * len(arrivals),
                             num_blocks=limits.kv_tokens // block, block_size=block, max_num_seqs=limits.max_num_seqs,
                             max_num_batched_tokens=limits.max_num_batched_tokens)
    measured, predicted = figures(real, 0.0), figures(simulated, 0.0)
    print(f"in-process vLLM engine vs simulator ({profile.name}, {cpu_model()}): {len(arrivals)} requests, Poisson "
          f"{args.rate:g}/s, {args.input_len} -> {args.output_len} tokens")
    if warning := cpu_mismatch(profile):
        print(f"warning: {warning}")
    result = {}
    for key, scale, unit in (("tpot_p50_s", 1e3, "ms"), ("output_tok_s", 1.0, "tok/s")):
        error = (predicted[key] / measured[key] - 1) * 100
        result[key] = {"engine": measured[key], "simulator": predicted[key], "error_pct": error}
        verdict = "within" if abs(error) <= GOAL_PCT else "OUTSIDE"
        print(f"  {key:<14} engine {measured[key] * scale:9.2f} {unit:<6} simulator {predicted[key] * scale:9.2f} "
              f"{unit:<6} error {error:+6.1f}% ({verdict} {GOAL_PCT:g}%)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"cpu": cpu_model(), "profile": str(args.profile or profile.name),
                                    "rate": args.rate, "requests": args.requests, **result}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
