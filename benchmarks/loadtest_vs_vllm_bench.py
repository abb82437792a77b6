"""loadtest vs vLLM's own benchmark, same workload, against one bare vLLM server.

Starts a bare vLLM OpenAI server (the default model with serveout's engine settings,
``benchmarks/common/references.py``),
then runs, on the same server and with the same workload (random prompts, 64 input
tokens, 128 output tokens with ignore_eos, N requests at concurrency C):

  1. ``loadtest run`` (closed loop ``concurrency:users=C``, ``--requests N``);
  2. vLLM's ``bench serve`` module (``vllm.benchmarks.serve``: ``--backend openai-chat
     --dataset-name random --max-concurrency C --num-prompts N --ignore-eos``);

and prints TTFT p50/p95, TPOT p50/p95 and output tokens/s side by side with ratios
(loadtest / vLLM), plus the load generator's CPU seconds per 1,000 streamed tokens.
As a referee it also prints the server's own mean TTFT / ITL / E2E / queue time for
each tool's run (vLLM's histograms on ``/metrics``, differenced around the run) and
each client's own CPU seconds over its load phase (process tree, sampled with psutil):
on a 2-core box a client's CPU is taken from the server. Rounds alternate which tool
goes first. Figures are printed, never asserted.

Everything runs inside a loopback-only network namespace and holds the heavy lock
(the script re-executes itself under ``unshare -n`` and ``flock /tmp/serveout-heavy.lock``
unless ``--no-isolation`` is given). Run from the repository root:

    .venv/bin/python benchmarks/loadtest_vs_vllm_bench.py [--rounds 2] [--out results/bench]
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: the repo's packages (bare vLLM server, Prometheus parser)
from benchmarks.common.isolation import loopback_holding_lock  # noqa: E402
from benchmarks.common.model import MODEL, model_path  # noqa: E402
from benchmarks.common.references import bare_vllm_server  # noqa: E402
from benchmarks.common.vllm_bench import run_measured, vllm_bench_command  # noqa: E402

LOCK = "/tmp/serveout-heavy.lock"


def run_loadtest(port: int, args: argparse.Namespace, out: Path, requests: int) -> dict:
    command = [
        sys.executable, "-m", "loadtest", "run", "--target", f"http://127.0.0.1:{port}", "--model", MODEL,
        "--profile", f"concurrency:users={args.concurrency}",
        "--workload", f"random:input_len={args.input_len},output_len={args.output_len}",
        "--requests", str(requests), "--seed", str(args.seed), "--quiet", "--out", str(out),
        "--tokenizer", str(model_path()),
    ]  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    before = scrape(port)
    cpu = run_measured(command, cwd=ROOT, log=out.parent / f"{out.name}.log")
    after = scrape(port)
    summary = json.loads((out / "summary.json").read_text())
    stage = summary["stages"][summary["headline_stage"]]
    lat, gen = stage["latency"], stage["generator"]
    load_start = stage["started_unix"]
    load_end = load_start + stage["window"]["end_s"]
    return server_means(before, after) | {
        "ttft_mean_ms": lat["ttft"]["mean"] * 1e3,
        "itl_mean_ms": lat["itl"]["mean"] * 1e3,
        "e2e_mean_ms": lat["e2e"]["mean"] * 1e3,
        "client_cpu_s_load": cpu.between(load_start, load_end),
        "ttft_p50_ms": lat["ttft"]["p50"] * 1e3,
        "ttft_p95_ms": lat["ttft"]["p95"] * 1e3,
        "tpot_p50_ms": lat["tpot"]["p50"] * 1e3,
        "tpot_p95_ms": lat["tpot"]["p95"] * 1e3,
        "itl_p50_ms": lat["itl"]["p50"] * 1e3,
        "e2e_p95_ms": lat["e2e"]["p95"] * 1e3,
        "output_tok_s": stage["throughput"]["output_tokens_per_s"],
        "duration_s": stage["window"]["duration_s"],
        "completed": stage["requests"]["ok"],
        "output_tokens": stage["tokens"]["output_total"],
        "generator_cpu_s_load": gen["cpu_seconds_load"],
        "generator_cpu_s_total": gen["cpu_seconds"],
        "generator_cpu_s_per_1k_tokens": gen["cpu_seconds_per_1k_tokens"],
        "generator_cpu_p90_percent": gen["cpu_percent_p90"],
        "loop_lag_p99_ms": (gen["loop_lag_p99_s"] or 0) * 1e3,
    }


def run_vllm_bench(port: int, args: argparse.Namespace, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    command = vllm_bench_command(
        "--backend", "openai-chat", "--base-url", f"http://127.0.0.1:{port}", "--endpoint", "/v1/chat/completions",
        "--model", str(model_path()), "--served-model-name", MODEL, "--tokenizer", str(model_path()),
        "--dataset-name", "random", "--random-input-len", str(args.input_len),
        "--random-output-len", str(args.output_len), "--num-prompts", str(args.requests),
        "--max-concurrency", str(args.concurrency), "--ignore-eos", "--seed", str(args.seed),
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,95",
        "--save-result", "--result-dir", str(out), "--result-filename", "vllm_bench.json", "--disable-tqdm",
    )  # fmt: skip
    before = scrape(port)
    cpu = run_measured(command, cwd=out, log=out / "vllm_bench.log")
    after = scrape(port)
    result_path = out / "vllm_bench.json"
    result = json.loads(result_path.read_text())
    load_end = result_path.stat().st_mtime
    return server_means(before, after) | {
        "ttft_mean_ms": result["mean_ttft_ms"],
        "itl_mean_ms": result["mean_itl_ms"],
        "e2e_mean_ms": result["mean_e2el_ms"],
        "client_cpu_s_load": cpu.between(load_end - result["duration"], load_end),
        "ttft_p50_ms": result["median_ttft_ms"],
        "ttft_p95_ms": result["p95_ttft_ms"],
        "tpot_p50_ms": result["median_tpot_ms"],
        "tpot_p95_ms": result["p95_tpot_ms"],
        "itl_p50_ms": result["median_itl_ms"],
        "e2e_p95_ms": result["p95_e2el_ms"],
        "output_tok_s": result["output_throughput"],
        "duration_s": result["duration"],
        "completed": result["completed"],
        "output_tokens": result["total_output_tokens"],
    }


SERVER_HISTOGRAMS = {
    "ttft": "vllm:time_to_first_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",
    "e2e": "vllm:e2e_request_latency_seconds",
    "queue": "vllm:request_queue_time_seconds",
}


def scrape(port: int) -> dict[str, float]:
    """Sums and counts of vLLM's latency histograms (the server's own view)."""
    from loadtest.analysis.server_metrics import parse_samples

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        samples = parse_samples(response.read().decode())
    totals: dict[str, float] = {}
    for key, name in SERVER_HISTOGRAMS.items():
        for suffix in ("_sum", "_count"):
            totals[key + suffix] = sum(x.value for x in samples if x.name == name + suffix)
    totals["generation_tokens"] = sum(x.value for x in samples if x.name == "vllm:generation_tokens_total")
    return totals


def server_means(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Mean latencies (ms) the server itself measured between two scrapes."""
    out = {}
    for key in SERVER_HISTOGRAMS:
        count = after[key + "_count"] - before[key + "_count"]
        out[f"server_{key}_mean_ms"] = (after[key + "_sum"] - before[key + "_sum"]) / count * 1e3 if count else 0.0
    out["server_generation_tokens"] = after["generation_tokens"] - before["generation_tokens"]
    return out


FIGURES = (
    ("TTFT p50 (ms)", "ttft_p50_ms"),
    ("TTFT p95 (ms)", "ttft_p95_ms"),
    ("TPOT p50 (ms)", "tpot_p50_ms"),
    ("TPOT p95 (ms)", "tpot_p95_ms"),
    ("ITL p50 (ms)", "itl_p50_ms"),
    ("E2E p95 (ms)", "e2e_p95_ms"),
    ("output tok/s", "output_tok_s"),
    ("duration (s)", "duration_s"),
    ("client TTFT mean", "ttft_mean_ms"),
    ("server TTFT mean", "server_ttft_mean_ms"),
    ("client ITL mean", "itl_mean_ms"),
    ("server ITL mean", "server_itl_mean_ms"),
    ("client E2E mean", "e2e_mean_ms"),
    ("server E2E mean", "server_e2e_mean_ms"),
    ("server queue mean", "server_queue_mean_ms"),
    ("client CPU s", "client_cpu_s_load"),
    ("completed", "completed"),
    ("output tokens", "output_tokens"),
    ("server gen tokens", "server_generation_tokens"),
)


def print_table(title: str, ours: dict, theirs: dict) -> None:
    print(f"\n{title}")
    print(f"{'figure':<18}{'loadtest':>12}{'vllm bench':>12}{'ratio':>9}")
    for name, key in FIGURES:
        a, b = ours[key], theirs[key]
        ratio = f"{a / b:.3f}" if b else "-"
        print(f"{name:<18}{a:>12.2f}{b:>12.2f}{ratio:>9}")
    print(
        f"loadtest generator: {ours['generator_cpu_s_load']:.2f} CPU s during the load "
        f"({ours['generator_cpu_s_total']:.2f} s with start-up), "
        f"{ours['generator_cpu_s_per_1k_tokens']:.3f} CPU s per 1,000 streamed tokens, "
        f"p90 {ours['generator_cpu_p90_percent']:.0f}% of one core, loop lag p99 {ours['loop_lag_p99_ms']:.1f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2, help="rounds; odd rounds run vLLM's benchmark first")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "loadtest_vs_vllm_bench")
    parser.add_argument("--no-isolation", action="store_true", help="already in a netns holding the lock")
    args = parser.parse_args()
    if not args.no_isolation:
        loopback_holding_lock(LOCK)
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    with bare_vllm_server(args.port, args.out / "vllm_server.log"):
        print("vLLM healthy", flush=True)
        # warm-up, discarded: first requests pay one-off costs on the server
        run_loadtest(args.port, args, args.out / "warmup", requests=args.concurrency)
        for round_index in range(args.rounds):
            folder = args.out / f"round{round_index}"
            if round_index % 2 == 0:  # alternate which tool goes first
                ours = run_loadtest(args.port, args, folder / "loadtest", args.requests)
                theirs = run_vllm_bench(args.port, args, folder / "vllm")
            else:
                theirs = run_vllm_bench(args.port, args, folder / "vllm")
                ours = run_loadtest(args.port, args, folder / "loadtest", args.requests)
            results.append({"loadtest": ours, "vllm_bench": theirs, "loadtest_first": round_index % 2 == 0})
            print_table(
                f"round {round_index + 1} ({'loadtest' if round_index % 2 == 0 else 'vllm bench'} first): "
                f"random {args.input_len} in / {args.output_len} out, "
                f"{args.requests} requests at concurrency {args.concurrency}",
                ours,
                theirs,
            )
    (args.out / "results.json").write_text(json.dumps({"args": vars(args) | {"out": str(args.out)}, "rounds": results}, indent=2))
    print(f"\nresults: {args.out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
