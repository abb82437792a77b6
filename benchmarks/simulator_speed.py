"""How fast the simulator answers: the issue's scale goal (24 H200 GPUs, one hour of
traffic at 50 req/s, under 60 s on a 2-core box) and a 5-minute version, side by side.

Each scenario is timed in parts: preparing the traffic (workload plan, tokenising the
prompt pool), the discrete-event simulation itself, building the load tester's records
and figures (``build_stage``, the load tester's own pure code). No report files are
written (``records.jsonl`` of the hour holds ~46M inter-token gaps).

    .venv/bin/python -m benchmarks.simulator_speed [--scenarios short,hour] [--workload ...]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from loadtest.analysis.metrics import build_stage
from loadtest.analysis.summary import GeneratorReport
from loadtest.cli import build_parser, config_from_args
from serving.config.stack import RoutingPolicyName, RoutingSpec
from simulator.cluster import ClusterSim
from simulator.config import SimulationConfig
from simulator.replica_setup import replica_setup
from simulator.simulate import TOKENIZER_FALLBACK, records_of
from simulator.traffic import stage_traffic, tokenizer_loader

SCENARIOS = {"short": 300.0, "hour": 3600.0}
RESULTS = Path("results") / "simulator_speed.json"


def time_scenario(duration_s: float, rate: float, workload: str) -> dict:
    args = build_parser().parse_args([
        "run", "--target", "http://simulated.invalid", "--model", "llama-3.3-70b-instruct", "--no-metrics",
        "--profile", f"poisson:rate={rate:g},max_concurrency=4096", "--workload", workload,
        "--duration", f"{duration_s:g}s"])
    config = config_from_args(args)
    sim = SimulationConfig(hardware="h200", model="llama-3.3-70b-instruct", replicas=6, tensor_parallel=4,
                           routing=RoutingSpec(policy=RoutingPolicyName.LEAST_LOADED), max_in_flight=100_000)
    plan = config.profile.next_stage([])
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    setup = replica_setup(sim)
    loader, _ = tokenizer_loader(config, TOKENIZER_FALLBACK)
    loader()
    t1 = time.perf_counter()
    traffic = stage_traffic(config, plan, loader)
    t2 = time.perf_counter()
    run = ClusterSim(setup, sim, config, plan, traffic, seed=config.seed).run()
    t3 = time.perf_counter()
    records = records_of(run, 0, traffic, 0.0, True).columns
    stage = build_stage(records, plan=plan, window=config.measured_window, timed=True, objectives=(),
                        started_unix=0.0, offset_s=0.0, generator=GeneratorReport(), duration_s=duration_s)
    t4 = time.perf_counter()
    cpu = time.process_time() - cpu0
    return {
        "simulated_s": duration_s, "requests": len(records), "ok": stage.requests.ok,
        "output_tokens": stage.tokens.output_total, "ttft_p50_ms": (stage.latency.ttft.p50 or 0) * 1e3,
        "tpot_p50_ms": (stage.latency.tpot.p50 or 0) * 1e3, "tok_s": stage.throughput.output_tokens_per_s,
        "setup_s": t1 - t0, "traffic_s": t2 - t1, "simulation_s": t3 - t2, "summary_s": t4 - t3,
        "total_s": t4 - t0, "cpu_s": cpu, "preemptions": run.preemptions,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default="short,hour")
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--workload", default="random:input_len=1024,output_len=256,spread=0.5")
    args = parser.parse_args(argv)
    console = Console()
    rows = {name: time_scenario(SCENARIOS[name], args.rate, args.workload) for name in args.scenarios.split(",")}
    table = Table(title=f"simulator speed: llama-3.3-70b on 6 x 4 H200, poisson {args.rate:g} req/s, {args.workload}",
                  title_justify="left")
    table.add_column("figure")
    for name in rows:
        table.add_column(name, justify="right")
    for key in next(iter(rows.values())):
        table.add_row(key, *(f"{r[key]:,.2f}" if isinstance(r[key], float) else f"{r[key]:,}" for r in rows.values()))
    console.print(table)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
