"""How much streamed load one load-generator process, and N worker processes, can drive.

Starts ``benchmarks.timed_server`` (first token ``--ttft`` after receipt, then one token
every ``--itl``: its timing is known exactly, so the only thing that can fall behind is
the client), then for each generator in ``--workers`` (1: the single-process generator;
N: a master and N local worker processes) runs open-loop ``poisson`` stages of
``--output-len``-token streams at rising rates (x ``--growth`` from ``--start-rate``),
then bisects ``--refine`` times between the last rate that kept the schedule and the
first that did not. A rate keeps the schedule when the arrivals' p99 lateness (how late
each request left compared with its scheduled start, the generator's own clock) stays
under ``--max-lateness`` (10 ms), no request failed and the streamed tokens reached 90 %
of the offered ones. The capacity is the streamed tok/s of the best such rate.

Each stage's row shows the busiest generator process's CPU (p90, % of one core), the
whole generator's CPU seconds per 1,000 streamed tokens (master and workers together:
what distribution costs), its event-loop lag, the timed server's CPU (near a full core, the server, not the generator,
is the limit of that figure) and how busy the whole machine was (% of all cores, every
process's CPU: a figure taken with the machine near 100 % measures the contention, not
the generator). Read the figures side by side, from one run on a quiet machine.

    .venv/bin/python -m benchmarks.generator_capacity [--workers 1,8] [--duration 10s]
    .venv/bin/python -m benchmarks.generator_capacity --workers 1,2 --rates 20,40 --duration 4s

Figures are printed and written to ``results/generator_capacity/results.json``, never
asserted. As root the script re-runs itself in a loopback-only network namespace.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
from rich.console import Console
from rich.table import Table

from benchmarks.common.cpu import cpu_s, machine_busy_s, percent_of_cores
from benchmarks.common.isolation import loopback_if_root
from benchmarks.common.servers import free_port, stop
from benchmarks.common.timed_server import start_in_child
from loadtest import RunOptions, parse_profile, parse_workload, run_load_test
from loadtest.config import GeneratorConfig, LoadTestConfig, TargetConfig
from loadtest.errors import ConfigError, LoadTestError
from loadtest.units import parse_duration

REPO = Path(__file__).resolve().parents[1]
MODEL = "timed"
console = Console() if sys.stdout.isatty() else Console(width=180)


@dataclass(frozen=True)
class Probe:
    """One stage at one rate, and whether it kept the schedule."""

    workers: int
    rate: float
    offered_tok_s: float
    streamed_tok_s: float | None
    lateness_p99_ms: float | None
    lateness_max_ms: float | None
    failed: int
    generator_cpu_p90: float | None
    generator_cpu_s_per_1k_tokens: float | None
    loop_lag_p99_ms: float | None
    server_cpu_percent: float
    machine_busy_percent: float
    passed: bool
    note: str = ""


def start_server(args: argparse.Namespace, log: Path) -> tuple[subprocess.Popen, str]:
    return start_in_child(port=args.port or free_port(), ttft_s=args.ttft, itl_s=args.itl, model=MODEL, log=log)


def concurrency_cap(rate: float, args: argparse.Namespace) -> int:
    """Client slots with room to spare, so that lateness measures the generator, never the cap."""
    e2e = args.ttft + (args.output_len - 1) * args.itl
    return math.ceil(rate * e2e * 1.5) + 32


def probe(url: str, server: psutil.Process, workers: int, rate: float, args: argparse.Namespace, out: Path) -> Probe:
    config = LoadTestConfig(
        target=TargetConfig(url=url, model=MODEL, scrape_metrics=False),
        profile=parse_profile(f"poisson:rate={rate:g},max_concurrency={concurrency_cap(rate, args)}"),
        workload=parse_workload(f"prompts:output_len={args.output_len}"),
        duration_s=args.warmup_s + args.duration_s,
        warmup_s=args.warmup_s,
        seed=args.seed,
        generator=GeneratorConfig(workers=workers),
        label=f"{workers} worker(s) at {rate:g}/s",
    )
    offered = rate * args.output_len
    cpu0, busy0, t0 = cpu_s([server]), machine_busy_s(), time.time()
    try:
        stage = run_load_test(config, RunOptions(out_dir=out, reports=("json",))).headline
    except LoadTestError as exc:
        return Probe(workers, rate, offered, None, None, None, 0, None, None, None, 0.0, 0.0, False, f"failed: {exc}"[:200])
    wall = time.time() - t0
    server_cpu = 100.0 * (cpu_s([server]) - cpu0) / wall
    machine_busy = percent_of_cores(machine_busy_s() - busy0, wall)
    streamed = stage.throughput.output_tokens_per_s
    lag_p99, lag_max = stage.arrivals.lag_p99_s, stage.arrivals.lag_max_s
    gen = stage.generator
    notes = []
    if lag_p99 is None or lag_p99 >= args.max_lateness_s:
        notes.append("late")
    if stage.requests.failed:
        notes.append(f"{stage.requests.failed} failed")
    if streamed is None or streamed < 0.9 * offered:
        notes.append("tokens short")
    return Probe(
        workers=workers,
        rate=rate,
        offered_tok_s=offered,
        streamed_tok_s=streamed,
        lateness_p99_ms=None if lag_p99 is None else lag_p99 * 1e3,
        lateness_max_ms=None if lag_max is None else lag_max * 1e3,
        failed=stage.requests.failed,
        generator_cpu_p90=gen.cpu_percent_p90,
        generator_cpu_s_per_1k_tokens=gen.cpu_seconds_per_1k_tokens,
        loop_lag_p99_ms=None if gen.loop_lag_p99_s is None else gen.loop_lag_p99_s * 1e3,
        server_cpu_percent=server_cpu,
        machine_busy_percent=machine_busy,
        passed=not notes,
        note=", ".join(notes) + (" (server near a full core)" if server_cpu >= 90 else ""),
    )


def search(run, args: argparse.Namespace) -> list[Probe]:
    """Rising rates until one fails, then ``refine`` bisections (geometric) in between;
    or exactly ``--rates`` when given."""
    if args.rates:
        return [run(rate) for rate in args.rates]
    probes: list[Probe] = []
    good = bad = None
    rate = args.start_rate
    while rate <= args.max_rate:
        probes.append(result := run(rate))
        if not result.passed:
            bad = rate
            break
        good, rate = rate, rate * args.growth
    for _ in range(args.refine if good is not None and bad is not None else 0):
        mid = math.sqrt(good * bad)
        probes.append(result := run(mid))
        good, bad = (mid, bad) if result.passed else (good, mid)
    return probes


def capacity(probes: list[Probe]) -> float | None:
    return max((p.streamed_tok_s for p in probes if p.passed and p.streamed_tok_s), default=None)


def _num(value: float | None, fmt: str = "{:.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def table(workers: int, probes: list[Probe], args: argparse.Namespace) -> Table:
    label = "1 process" if workers == 1 else f"{workers} workers + master"
    t = Table(title=f"{label}: {args.output_len}-token streams, TTFT {args.ttft * 1e3:g} ms, ITL {args.itl * 1e3:g} ms",
              title_justify="left")  # fmt: skip
    for col in ("rate /s", "offered tok/s", "streamed tok/s", "lateness p99 ms", "max ms", "gen CPU p90 %",
                "gen CPU s/1k tok", "loop lag p99 ms", "server CPU %", "machine busy %", "kept"):  # fmt: skip
        t.add_column(col, justify="right")
    for p in sorted(probes, key=lambda p: p.rate):
        t.add_row(f"{p.rate:.1f}", _num(p.offered_tok_s), _num(p.streamed_tok_s), _num(p.lateness_p99_ms, "{:.1f}"),
                  _num(p.lateness_max_ms, "{:.1f}"), _num(p.generator_cpu_p90),
                  _num(p.generator_cpu_s_per_1k_tokens, "{:.3f}"), _num(p.loop_lag_p99_ms, "{:.1f}"),
                  _num(p.server_cpu_percent), _num(p.machine_busy_percent),
                  "yes" if p.passed else f"no: {p.note}")  # fmt: skip
    return t


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default=f"1,{os.cpu_count() or 1}", help="generators to measure (default 1,cores)")
    parser.add_argument("--ttft", type=float, default=0.05, help="server's time to first token (s)")
    parser.add_argument("--itl", type=float, default=0.01, help="server's gap between tokens (s)")
    parser.add_argument("--output-len", type=int, default=128, help="tokens per answer")
    parser.add_argument("--duration", default="10s", help="measured load time per rate")
    parser.add_argument("--warmup", default="2s", help="load before the measured window")
    parser.add_argument("--max-lateness", default="10ms", help="arrival lateness p99 a kept schedule stays under")
    parser.add_argument("--start-rate", type=float, default=10.0, help="first rate (requests/s)")
    parser.add_argument("--growth", type=float, default=1.5)
    parser.add_argument("--max-rate", type=float, default=5000.0)
    parser.add_argument("--refine", type=int, default=2, help="bisections after the first failing rate")
    parser.add_argument("--rates", default=None, help="comma-separated rates to run instead of searching")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--port", type=int, default=0, help="the timed server's port (0: any free one)")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "generator_capacity")
    args = parser.parse_args()
    try:
        args.duration_s, args.warmup_s = parse_duration(args.duration), parse_duration(args.warmup)
        args.max_lateness_s = parse_duration(args.max_lateness)
        generators = [int(w) for w in args.workers.split(",")]
        args.rates = [float(r) for r in args.rates.split(",")] if args.rates else None
    except (ConfigError, ValueError) as exc:
        parser.error(str(exc))
    loopback_if_root("benchmarks.generator_capacity")
    args.out.mkdir(parents=True, exist_ok=True)
    server, url = start_server(args, args.out / "timed_server.log")
    results: dict[int, list[Probe]] = {}
    try:
        process = psutil.Process(server.pid)
        for workers in generators:

            def run(rate: float, workers: int = workers) -> Probe:
                with console.status(f"{workers} worker(s) at {rate:.1f} requests/s"):
                    return probe(url, process, workers, rate, args, args.out / f"w{workers}-r{rate:.1f}")

            results[workers] = search(run, args)
            console.print(table(workers, results[workers], args))
    finally:
        stop(server)
    console.print(f"[bold]highest streamed tok/s with arrival lateness p99 < {args.max_lateness_s * 1e3:g} ms[/] "
                  f"({os.cpu_count()} cores, shared with the timed server and anything else running):")  # fmt: skip
    base = capacity(results.get(1, []))
    for workers, probes in results.items():
        best = capacity(probes)
        ratio = f"  ({best / base:.2f}x one process)" if best and base and workers != 1 else ""
        name = "1 process" if workers == 1 else f"{workers} workers"
        console.print(f"  {name}: {_num(best)} tok/s{ratio}" if best else f"  {name}: none kept (lower --start-rate)")
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    (args.out / "results.json").write_text(json.dumps({
        "args": settings, "cores": os.cpu_count(),
        "generators": {str(w): {"capacity_tok_s": capacity(p), "probes": [asdict(x) for x in p]} for w, p in results.items()},
    }, indent=2))  # fmt: skip
    console.print(f"figures written to {args.out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
