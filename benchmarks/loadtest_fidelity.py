"""loadtest and vLLM's benchmark measured against the truth (issue 8's fidelity benchmark).

Starts ``benchmarks.timed_server`` (first token ``--ttft`` after receipt, then one token
every ``--itl``; every write recorded), then at each concurrency runs on it, one after
the other (alternating which goes first), the real ``loadtest run`` (closed loop
``concurrency:users=C`` for ``--duration``) and vLLM's ``bench serve`` module
(``--max-concurrency C``, as many prompts as C users complete in the same time). Both
use the ``random`` workload and the same tokenizer. The first request of each
connection, which pays for opening it, is left out on both sides (loadtest ``--warmup``
of one E2E, vLLM ``--num-warmups C``) unless ``--cold``. Each tool's TTFT, ITL, TPOT,
E2E (p50, p95) and output tok/s are printed next to the truth: the same figures computed,
with that tool's own definitions, from the server's recorded times of that tool's run.
The truth is taken at the server, so loopback and client time are part of a tool's
error; the lines under each table say where it goes (sending, delivery of each chunk,
the server's own lateness, CPU of the client, the server and everything else).

    .venv/bin/python -m benchmarks.loadtest_fidelity [--concurrency 16,128,512] [--duration 30s]

loadtest runs with ``--loadtest-workers`` generator processes (default 1, not the CLI's
one per core plus a master): on a small box the timed server and vLLM's single-process
client share the same cores, and one process per core would make loadtest compete with
the server it measures and compare a multi-process client with a single-process one.
Pass ``--loadtest-workers 2`` (or more) to measure the CLI's default shape.

Goal: loadtest within max(2 ms, 2 %) of the truth (tok/s: 2 %), and its error never
larger than vLLM's benchmark's on the same figure (up to 0.1 ms / 0.1 %). Figures are
printed and written to ``results/loadtest_fidelity/``, never asserted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
from rich.console import Console
from rich.table import Table

from benchmarks.common.cpu import Sampler
from benchmarks.common.fidelity_truth import (
    KEYS,
    LATENCIES,
    LOADTEST_DEF,
    STATS,
    VLLM_DEF,
    ClientStream,
    delivery_lag,
    in_tolerance,
    not_worse,
    pair_in_order,
    schedule_lateness,
    send_delay,
    time_budget,
    truth_figures,
)
from benchmarks.common.isolation import loopback_if_root
from benchmarks.common.model import MODEL as TOKENIZER_MODEL
from benchmarks.common.servers import stop
from benchmarks.common.timed_server import Trace, start_in_child, traces_from_truth
from benchmarks.common.vllm_bench import run_measured, vllm_bench_command
from loadtest.analysis.records import read_records
from loadtest.analysis.summary import StageSummary, load_summary
from loadtest.errors import ConfigError
from loadtest.units import parse_duration
from loadtest.workloads.tokenizer import default_tokenizer_path
from simulator.machine import cpu_model

REPO = Path(__file__).resolve().parents[1]
MODEL = "timed"
console = Console() if sys.stdout.isatty() else Console(width=180)


# ---- the runs --------------------------------------------------------------------------

def start_server(args: argparse.Namespace, log: Path) -> tuple[subprocess.Popen, str]:
    return start_in_child(port=args.port, ttft_s=args.ttft, itl_s=args.itl, model=MODEL, log=log,
                          extra_args=("--loop", args.loop))


def fetch_truth(url: str, keep: Path) -> tuple[list[Trace], float]:
    """The recorded traces since the last reset (also kept in ``keep``), and the server's
    monotonic -> Unix offset."""
    response = httpx.get(f"{url}/truth", timeout=120)
    keep.write_bytes(response.content)
    truth = response.json()
    return traces_from_truth(truth), truth["unix_offset"]


def reset_truth(url: str) -> None:
    httpx.post(f"{url}/truth/reset", timeout=30).raise_for_status()


class MachineCpu:
    """Busy CPU seconds of the whole machine (every process, other agents' too) and of
    the timed server, sampled over a run."""

    def __init__(self, server_pid: int) -> None:
        self.server, self.machine = Sampler.of_tree(server_pid), Sampler.of_machine()

    def stop(self) -> None:
        self.server.stop()
        self.machine.stop()

    def report(self, start: float, end: float, client_cpu_s: float) -> dict:
        machine, server = self.machine.between(start, end), self.server.between(start, end)
        return {"machine_cpu_s": machine, "server_cpu_s": server, "others_cpu_s": machine - server - client_cpu_s}


def machine_facts() -> dict:
    return {"cpu": cpu_model(), "cores": psutil.cpu_count(), "loadavg_1m": os.getloadavg()[0]}


def loadtest_command(url: str, users: int, args: argparse.Namespace, out: Path) -> list[str]:
    cli = Path(sys.executable).with_name("loadtest")
    entry = [str(cli)] if cli.exists() else [sys.executable, "-m", "loadtest"]
    return [*entry, "run", "--target", url, "--model", MODEL, "--profile", f"concurrency:users={users}",
            "--workload", f"random:input_len={args.input_len},output_len={args.output_len}",
            "--duration", f"{args.duration_s:g}s", "--warmup", f"{args.warmup_s:g}s",
            "--tokenizer", str(args.tokenizer), "--seed", "0", "--workers", str(args.loadtest_workers),
            "--prompt-pool", str(expected_requests(users, args) + users), "--reports", "json", "--quiet",
            "--out", str(out)]


def configured_e2e(args: argparse.Namespace) -> float:
    return args.ttft + (args.output_len - 1) * args.itl


def expected_requests(users: int, args: argparse.Namespace) -> int:
    """Requests ``users`` closed-loop users complete in the measured time (at the configured timing)."""
    return users * max(1, round((args.duration_s - args.warmup_s) / configured_e2e(args)))


def run_loadtest(url: str, users: int, args: argparse.Namespace, out: Path) -> dict:
    out.parent.mkdir(parents=True, exist_ok=True)
    reset_truth(url)
    machine = MachineCpu(args.server_pid)
    cpu = run_measured(loadtest_command(url, users, args, out), cwd=REPO, log=out.with_suffix(".log"))
    machine.stop()
    traces, offset = fetch_truth(url, out.parent / "loadtest_truth.json")
    stage = load_summary(out).headline
    to_server = stage.started_unix - offset  # the stage clock's zero on the server's clock
    window = (to_server + stage.window.start_s, to_server + stage.window.end_s)
    # start_unix is taken just before the body is encoded, a few microseconds before sending
    records = sorted((r for r in read_records(out / "records.jsonl") if r.ok and r.ttft_s is not None),
                     key=lambda r: r.start_unix)
    pairs = pair_in_order([ClientStream.of(r.start_unix - offset, r.ttft_s, r.itl_s) for r in records], traces)
    # measured: started after the warm-up (no cool-down: the rest of the run)
    pairs = [pair for pair, r in zip(pairs, records) if r.start_s >= args.warmup_s]
    measured = [t for _, t in pairs]
    lat = stage.latency
    load_start, load_end = stage.started_unix, stage.started_unix + stage.window.end_s
    return {
        "tool": loadtest_figures(stage),
        "truth": truth_figures(measured, LOADTEST_DEF, window, every_trace=traces),
        "budget": time_budget([c.start for c, _ in pairs], measured, LOADTEST_DEF,
                              lat.ttft.mean or math.nan, lat.e2e.mean or math.nan),
        "send_delay": send_delay(pairs).model_dump(),
        "delivery_lag": delivery_lag(pairs, LOADTEST_DEF).model_dump(),
        "lateness": schedule_lateness(measured, args.ttft, args.itl).model_dump(),
        "generator": stage.generator.model_dump(exclude={"cpu_samples"}),
        "client_cpu_s": (client := cpu.between(load_start, load_end)), "load_s": load_end - load_start,
        "cpu": machine.report(load_start, load_end, client),
        "requests": {"tool": stage.requests.ok, "truth": len(measured)},
    }


def loadtest_figures(stage: StageSummary) -> dict:
    lat = stage.latency
    figures = {f"{m}_{s}": getattr(getattr(lat, m), s) for m in LATENCIES for s in STATS}
    return figures | {"tok_s": stage.throughput.output_tokens_per_s}


def run_vllm(url: str, users: int, args: argparse.Namespace, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    command = vllm_bench_command(
        "--backend", "openai-chat", "--base-url", url,
        "--endpoint", "/v1/chat/completions", "--model", MODEL, "--served-model-name", MODEL,
        "--tokenizer", str(args.tokenizer), "--dataset-name", "random", "--random-input-len", str(args.input_len),
        "--random-output-len", str(args.output_len), "--num-prompts", str(expected_requests(users, args)),
        "--max-concurrency", str(users), "--ignore-eos", "--seed", "0", "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,95", "--save-result", "--save-detailed", "--result-dir", str(out),
        "--result-filename", "vllm_bench.json", "--disable-tqdm", "--num-warmups", str(0 if args.cold else users),
    )  # fmt: skip
    reset_truth(url)
    machine = MachineCpu(args.server_pid)
    cpu = run_measured(command, cwd=out, log=out / "vllm_bench.log")
    machine.stop()
    traces, _ = fetch_truth(url, out / "truth.json")
    result_path = out / "vllm_bench.json"
    result = json.loads(result_path.read_text())
    measured = [t for t in traces if t.request_id is not None]  # the ready check and warm-ups carry none
    load_end = result_path.stat().st_mtime
    # its start times are perf_counter() readings: CLOCK_MONOTONIC, the server's clock
    clients = [ClientStream.of(*fields) for fields in zip(result["start_times"], result["ttfts"], result["itls"])]
    try:  # its request ids end with the request's index
        pairs = [(clients[int(t.request_id.rsplit("-", 1)[1])], t) for t in measured if t.complete]
    except (ValueError, IndexError):
        pairs = pair_in_order(clients, measured)
    return {
        "tool": vllm_figures(result), "truth": truth_figures(measured, VLLM_DEF, None),
        "budget": time_budget(result["start_times"], measured, VLLM_DEF,
                              result["mean_ttft_ms"] / 1e3, result["mean_e2el_ms"] / 1e3),
        "send_delay": send_delay(pairs).model_dump(),
        "delivery_lag": delivery_lag(pairs, VLLM_DEF).model_dump(),
        "lateness": schedule_lateness(measured, args.ttft, args.itl).model_dump(),
        "client_cpu_s": (client := cpu.between(load_start := load_end - result["duration"], load_end)),
        "load_s": result["duration"], "cpu": machine.report(load_start, load_end, client),
        "requests": {"tool": result["completed"], "truth": sum(t.complete for t in measured)},
    }


def vllm_figures(result: dict) -> dict:
    names = {"ttft": "ttft", "itl": "itl", "tpot": "tpot", "e2e": "e2el"}
    figures = {}
    for ours, theirs in names.items():
        figures[f"{ours}_p50"] = result[f"median_{theirs}_ms"] / 1e3
        figures[f"{ours}_p95"] = result[f"p95_{theirs}_ms"] / 1e3
    return figures | {"tok_s": result["output_throughput"]}


# ---- printing ----------------------------------------------------------------------------

def _value(key: str, v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.0f}" if key == "tok_s" else f"{v * 1e3:.2f}"


def _error(key: str, measured: float | None, truth: float | None) -> str:
    if measured is None or truth is None:
        return "-"
    if key == "tok_s":
        return f"{(measured / truth - 1) * 100:+.2f}%"
    return f"{(measured - truth) * 1e3:+.2f} ({(measured / truth - 1) * 100:+.1f}%)"


def _spread(d: dict) -> str:
    return " / ".join(f"{stat} {d[stat] * 1e3:.2f}" for stat in ("p50", "p95", "p99", "max")) + " ms"


def _mark(ok: bool) -> str:
    return "[green]yes[/]" if ok else "[red]NO[/]"


def table(users: int, lt: dict, vl: dict) -> Table:
    t = Table(title=f"{users} concurrent streams: each tool against the truth of its own run (ms; tok/s)")
    for col in ("figure", "truth", "loadtest", "loadtest error", "ok", "truth", "vLLM bench", "vLLM error",
                "ok", "loadtest not worse"):
        t.add_column(col, justify="left" if col == "figure" else "right")
    for key in KEYS:
        name = "output tok/s" if key == "tok_s" else key.replace("_", " ").upper().replace(" P", " p")
        a, ta, b, tb = lt["tool"][key], lt["truth"][key], vl["tool"][key], vl["truth"][key]
        t.add_row(name, _value(key, ta), _value(key, a), _error(key, a, ta), _mark(in_tolerance(key, a, ta)),
                  _value(key, tb), _value(key, b), _error(key, b, tb), _mark(in_tolerance(key, b, tb)),
                  _mark(None not in (a, ta, b, tb) and not_worse(key, a, ta, b, tb)))
    return t


def explain(lt: dict, vl: dict) -> None:
    """Where the time goes: each tool's mean error split in parts, CPU, the server's own timing."""
    for name, run in (("loadtest", lt), ("vLLM bench", vl)):
        late, lag, load = run["lateness"], run["delivery_lag"], run["load_s"]
        parts = ", ".join(f"{k.replace('_', ' ')} {v * 1e3:+.2f}" for k, v in run["budget"].items())
        console.print(f"  {name} ({run['requests']['tool']} requests, server saw {run['requests']['truth']}): "
                      f"mean error = {parts} ms; request start -> server receipt: {_spread(run['send_delay'])}; "
                      f"each chunk read after the server wrote it: {_spread(lag)}; "
                      f"server's writes after their deadline: {_spread(late)}")
        cpu = run["cpu"]
        console.print(f"    cores busy during the load: {cpu['machine_cpu_s'] / load:.2f} of {psutil.cpu_count()}; "
                      f"client {run['client_cpu_s'] / load:.2f}, server {cpu['server_cpu_s'] / load:.2f}, "
                      f"everything else (other agents) {cpu['others_cpu_s'] / load:.2f}")
    g = {k: v or 0 for k, v in lt["generator"].items()}
    console.print(f"  loadtest generator: CPU mean {g['cpu_percent_mean']:.0f}% / p90 {g['cpu_percent_p90']:.0f}% / max "
                  f"{g['cpu_percent_max']:.0f}% of one core, {g['cpu_seconds_per_1k_tokens']:.3f} CPU s per 1k tokens, "
                  f"event-loop lag p99 {g['loop_lag_p99_s'] * 1e3:.1f} ms / max {g['loop_lag_max_s'] * 1e3:.1f} ms"
                  f"{', SATURATED' if g['saturated'] else ''}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="16,128,512", help="comma-separated stream counts")
    parser.add_argument("--duration", default="30s", help="loadtest's load time per concurrency, warm-up included")
    parser.add_argument("--ttft", type=float, default=0.1, help="server's time to first token (s)")
    parser.add_argument("--itl", type=float, default=0.02, help="server's gap between tokens (s)")
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--tokenizer", type=Path, default=default_tokenizer_path(TOKENIZER_MODEL),
                        help="local tokenizer folder for both tools' random prompts")
    parser.add_argument("--cold", action="store_true",
                        help="measure the first requests too (they open the connections); default: loadtest "
                             "--warmup of one E2E, vLLM --num-warmups C")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop", help="the server's event loop")
    parser.add_argument("--loadtest-workers", type=int, default=1,
                        help="loadtest's generator processes (default 1: the server shares the cores; "
                             "the CLI's own default is one per core)")
    parser.add_argument("--port", type=int, default=8300)
    parser.add_argument("--out", type=Path, default=REPO / "results" / "loadtest_fidelity")
    args = parser.parse_args()
    try:
        args.duration_s = parse_duration(args.duration)
    except ConfigError as exc:
        parser.error(str(exc))
    args.warmup_s = 0.0 if args.cold else round(configured_e2e(args), 3)  # each user's first request
    if args.warmup_s >= args.duration_s:
        parser.error(f"--duration must be longer than the warm-up ({args.warmup_s:g} s)")
    if args.loadtest_workers < 1:
        parser.error("--loadtest-workers must be at least 1")
    levels = [int(c) for c in args.concurrency.split(",") if c.strip().isdigit() and int(c) > 0]
    if len(levels) != len(args.concurrency.split(",")):
        parser.error(f"--concurrency takes positive integers separated by commas, not {args.concurrency!r}")
    if not any((args.tokenizer / name).is_file() for name in ("tokenizer_config.json", "tokenizer.json")):
        parser.error(f"no tokenizer in {args.tokenizer}: run ./scripts/setup or pass --tokenizer")
    loopback_if_root("benchmarks.loadtest_fidelity")
    args.out.mkdir(parents=True, exist_ok=True)
    machine = machine_facts()
    console.print(f"machine: {machine['cpu']}, {machine['cores']} cores, load average {machine['loadavg_1m']:.1f} "
                  "before the runs (other processes on this machine share its cores)")
    server, url = start_server(args, args.out / "timed_server.log")
    args.server_pid = server.pid
    results = []
    try:
        for index, users in enumerate(levels):
            folder = args.out / f"{index}-c{users}"
            with console.status(f"{users} streams: loadtest and vLLM bench"):
                if index % 2 == 0:
                    lt = run_loadtest(url, users, args, folder / "loadtest")
                    vl = run_vllm(url, users, args, folder / "vllm")
                else:
                    vl = run_vllm(url, users, args, folder / "vllm")
                    lt = run_loadtest(url, users, args, folder / "loadtest")
            console.print(table(users, lt, vl))
            explain(lt, vl)
            results.append({"concurrency": users, "loadtest_first": index % 2 == 0, "loadtest": lt, "vllm_bench": vl})
    finally:
        stop(server)
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    machine["loadavg_1m_after"] = os.getloadavg()[0]
    figures = {"args": settings, "machine": machine, "levels": results}
    (args.out / "results.json").write_text(json.dumps(figures, indent=2))
    console.print(f"figures written to {args.out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
