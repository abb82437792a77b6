"""Replaying a public trace excerpt at real speed against a server of known timing.

Starts ``benchmarks.timed_server`` (first token ``--ttft`` after receipt, then one every
``--itl``) and replays ``loadtest/data/traces/mooncake-conversation-400.jsonl`` (400
requests of Kimi's conversation service over 141 s, sessions inferred from the block
hashes) with ``--profile replay:...`` for each generator in ``--workers``, then prints
what the goal asks: every request sent, the arrival lateness (p50, p99, max: how late
each request left against its recorded time), and the figures by turn and session.
Beside each replay a process that only sleeps (``benchmarks.wake_probe``) measures how
late this machine wakes anything up, and the generator reports how long it waited for a
CPU: lateness the machine imposed is told apart from the generator's own. Also printed:
the size of the plan each generator process is sent (recipes, not prompt text).
Figures are printed and written to ``results/trace_replay/results.json``, never asserted.
As root the script re-runs itself in a loopback-only network namespace. Run it at the
normal priority (not under ``nice``): a niced generator on a busy machine is starved.

    .venv/bin/python -m benchmarks.trace_replay [--workers 1,2] [--speed 1] [--end 141]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

from benchmarks.common.isolation import loopback_if_root
from benchmarks.common.servers import free_port, stop
from benchmarks.common.timed_server import start_in_child
from benchmarks.common.wake_probe import WakeProbe
from loadtest import RunOptions, parse_profile, run_load_test
from loadtest.analysis.records import read_records
from loadtest.config import GeneratorConfig, LoadTestConfig, TargetConfig
from loadtest.generator.workers import plan_part, plan_shares
from loadtest.workloads import WorkloadContext
from loadtest.workloads.tokenizer import load_tokenizer
from simulator.machine import cpu_model

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO / "loadtest" / "data" / "traces" / "mooncake-conversation-400.jsonl"
TOKENIZER = REPO / "tests" / "fixtures" / "tiny-tokenizer"


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.1f}"


def plan_sizes(config: LoadTestConfig, workers: int) -> str:
    """What each generator process is sent: the plan's JSON (its messages as recipes)
    against the text of the messages it carries."""
    tokenizer = load_tokenizer(TOKENIZER)
    plan = config.workload.build(0, WorkloadContext(seed=config.seed, chat=True, tokenizer_loader=lambda: tokenizer))
    text_mb = sum(len(t.content.encode()) for s in plan.sessions for t in s.turns) / 1e6
    if workers == 1:
        return f"plan.json {len(plan.model_dump_json()) / 1e6:.2f} MB for {text_mb:.1f} MB of prompt text"
    shares = plan_shares([1] * workers, arrivals=[0.0] * len(plan.sessions), max_requests=None,
                         sessions=len(plan.sessions), paired=True)  # fmt: skip
    parts = [len(plan_part(plan, share).model_dump_json()) / 1e6 for share in shares]
    return f"each worker's share {' / '.join(f'{mb:.2f}' for mb in parts)} MB for {text_mb:.1f} MB of prompt text"


def lateness(records_path: Path) -> str:
    late = np.array([r.start_s - r.scheduled_s for r in read_records(records_path) if r.scheduled_s is not None])
    p50, p99 = np.percentile(late, [50, 99]) if len(late) else (np.nan, np.nan)
    return f"p50 {p50 * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms, max {late.max(initial=0.0) * 1e3:.1f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--speed", type=float, default=1.0)
    parser.add_argument("--end", type=float, default=None, help="replay the trace up to this second")
    parser.add_argument("--ttft", type=float, default=0.05)
    parser.add_argument("--itl", type=float, default=0.005, help="short: 400 answers of ~400 tokens in 141 s")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "trace_replay")
    args = parser.parse_args()
    loopback_if_root("benchmarks.trace_replay")
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"{cpu_model()}, {os.cpu_count()} cores; this process at nice {os.nice(0)}")
    server, url = start_in_child(port=free_port(), ttft_s=args.ttft, itl_s=args.itl, model="timed",
                                 log=args.out / "timed_server.log")  # fmt: skip
    end = "" if args.end is None else f",end={args.end:g}"
    results = {}
    try:
        for workers in (int(w) for w in args.workers.split(",")):
            profile = parse_profile(f"replay:{TRACE},sessions=prefix,speed={args.speed:g}{end},max_concurrency=512")
            config = LoadTestConfig(target=TargetConfig(url=url, model="timed", scrape_interval_s=1.0),
                                    profile=profile, duration_s=profile.plan().span_s + 1.0, tokenizer=TOKENIZER,
                                    generator=GeneratorConfig(workers=workers))  # fmt: skip
            with WakeProbe(args.out / f"w{workers}-wake-probe.json") as probe:
                stage = run_load_test(config, RunOptions(out_dir=args.out / f"w{workers}")).headline
            a, s, g = stage.arrivals, stage.sessions, stage.generator
            print(f"\n{'1 process' if workers == 1 else f'{workers} workers + master'}: {stage.label}")
            print(f"  sent: {plan_sizes(config, workers)}")
            print(f"  requests: {a.due} due, {a.scheduled} sent, {a.dropped} dropped, {stage.requests.ok} ok, "
                  f"{stage.requests.failed} failed")
            print(f"  arrival lateness: {lateness(args.out / f'w{workers}' / 'records.jsonl')}; "
                  f"{a.late} over {a.late_threshold_s * 1e3:.0f} ms")
            wait = "-" if g.cpu_wait_s is None else f"{g.cpu_wait_s:.2f} s"
            print(f"  generator: loop lag p99 {ms(g.loop_lag_p99_s)} ms, max {ms(g.loop_lag_max_s)} ms (waiting "
                  f"{ms(g.cpu_wait_at_lag_max_s)} ms for a CPU around it); waited for a CPU {wait} in all; "
                  f"CPU p90 {g.cpu_percent_p90 or 0:.0f}%")
            assert probe.figures is not None
            print(f"  machine: {probe.figures.line()}")
            if s is not None:
                print(f"  sessions: {s.sessions} ({s.complete} complete), time p50 {s.duration.p50:.2f} s, "
                      f"p95 {s.duration.p95:.2f} s; think time p50 {s.think.p50 or 0:.1f} s")
                for t in s.by_turn:
                    print(f"  turn {t.turn + 1}{'+' if t.pooled else ''}: {t.requests} requests, TTFT p50 "
                          f"{ms(t.ttft.p50)} ms p95 {ms(t.ttft.p95)} ms, E2E p50 {ms(t.e2e.p50)} ms")
            results[workers] = json.loads(stage.model_dump_json(include={"arrivals", "requests", "sessions",
                                                                          "generator"}))  # fmt: skip
            results[workers]["wake_probe"] = vars(probe.figures)
    finally:
        stop(server)
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    print(f"\nfigures written to {args.out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
