"""What guided decoding costs: tok/s and TPOT with and without a JSON schema, same run.

Deploys the default model on ``--replicas`` (2) engine replicas and drives it with
``loadtest run`` and the ``structured`` workload (patient-record extraction from
invented clinic notes, the same notes for every output with the same seed): one run
per output in ``--outputs`` (``text`` = no constraint, ``json_schema`` = the record's
schema; any of ``json_object``, ``tool_named``, ``tool_required``, ``tool_auto`` too),
``--concurrency`` (8) closed-loop streams, ``--requests`` (48) each, every round in
the opposite order from the last (drift on a shared machine cancels), after one
warm-up request of each (compiles the grammar: xgrammar caches it per schema).

Answers stop where the model (or the grammar) ends them (``--no-exact-output``: a
finished grammar only allows EOS); the mean output length per request is printed beside
the speeds, which are per generated token.

    .venv/bin/python -m benchmarks.structured_outputs [--outputs text,json_schema] [--rounds 2]

Figures are printed and written to ``results/structured_outputs.json``, never asserted.
As root the script re-runs itself in a loopback-only network namespace.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.common.isolation import loopback_if_root
from benchmarks.common.model import MODEL, model_path, stack_config
from serving.errors import ServeoutError
from serving.cluster.local import ClusterOptions, LocalCluster

REPO = Path(__file__).resolve().parents[1]
OUTPUTS = ("text", "json_object", "json_schema", "tool_named", "tool_required", "tool_auto")
FIGURES = ("output_tok_s", "tpot_p50_ms", "tpot_p95_ms", "ttft_p50_ms", "output_tokens_per_request", "failed")


def figures(summary: dict) -> dict[str, float]:
    """The figures of one ``loadtest run`` (its headline stage) that this benchmark compares (pure)."""
    stage = summary["stages"][summary["headline_stage"]]
    latency, requests = stage["latency"], stage["requests"]
    ok = requests["ok"] or 1
    return {
        "output_tok_s": stage["throughput"]["output_tokens_per_s"],
        "tpot_p50_ms": latency["tpot"]["p50"] * 1e3,
        "tpot_p95_ms": latency["tpot"]["p95"] * 1e3,
        "ttft_p50_ms": latency["ttft"]["p50"] * 1e3,
        "output_tokens_per_request": stage["tokens"]["output_total"] / ok,
        "failed": requests["failed"],
    }


def mean_figures(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's mean over rounds (pure)."""
    return {name: statistics.fmean(run[name] for run in runs) for name in FIGURES}


def run_loadtest(url: str, output: str, requests: int, args: argparse.Namespace, out: Path) -> dict[str, float]:
    command = [
        sys.executable, "-m", "loadtest", "run", "--target", url, "--model", MODEL,
        "--profile", f"concurrency:users={args.concurrency}",
        "--workload", f"structured:{output},output_len={args.output_len}",
        "--requests", str(requests), "--seed", str(args.seed), "--no-exact-output",
        "--tokenizer", str(model_path()), "--quiet", "--out", str(out),
    ]  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    with (out.parent / f"{out.name}.log").open("w") as log:
        subprocess.run(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, check=True)
    return figures(json.loads((out / "summary.json").read_text()))


def print_table(results: dict[str, dict[str, float]], reference: str) -> None:
    print(f"{'output':<15}{'tok/s':>9}{'TPOT p50':>10}{'TPOT p95':>10}{'TTFT p50':>10}{'tokens/req':>11}"
          f"{'failed':>7}{'tok/s vs ' + reference:>16}{'TPOT vs ' + reference:>15}")
    base = results.get(reference)
    for output, f in results.items():
        speed = f"{f['output_tok_s'] / base['output_tok_s']:.2f}x" if base else "-"
        tpot = f"{f['tpot_p50_ms'] / base['tpot_p50_ms']:.2f}x" if base else "-"
        print(f"{output:<15}{f['output_tok_s']:>9.1f}{f['tpot_p50_ms']:>8.1f}ms{f['tpot_p95_ms']:>8.1f}ms"
              f"{f['ttft_p50_ms']:>8.0f}ms{f['output_tokens_per_request']:>11.1f}{f['failed']:>7.0f}"
              f"{speed:>16}{tpot:>15}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--outputs", default="text,json_schema", help=f"comma list of: {', '.join(OUTPUTS)}")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--requests", type=int, default=48, help="requests per run")
    parser.add_argument("--output-len", type=int, default=128, help="max_tokens of each request")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--out", type=Path, default=REPO / "results" / "structured_outputs.json")
    args = parser.parse_args()
    outputs = [o.strip() for o in args.outputs.split(",") if o.strip()]
    unknown = sorted(set(outputs) - set(OUTPUTS))
    if not outputs or unknown:
        parser.error(f"unknown output(s) {', '.join(unknown) or '(none given)'}; valid: {', '.join(OUTPUTS)}")
    if min(args.replicas, args.concurrency, args.requests, args.output_len, args.rounds) < 1:
        parser.error("--replicas, --concurrency, --requests, --output-len and --rounds must be >= 1")
    loopback_if_root("benchmarks.structured_outputs")
    config = stack_config({"replicas": {"num_replicas": args.replicas}, "gateway": {"port": args.port}})
    folder = args.out.with_suffix("")
    runs: dict[str, list[dict[str, float]]] = {o: [] for o in outputs}
    try:
        with LocalCluster(ClusterOptions(http_port=args.port)) as cluster:
            cluster.deploy(config, on_progress=lambda s: print(f"serveout: {s}", flush=True))
            url = cluster.url
            for output in outputs:
                run_loadtest(url, output, 1, args, folder / f"warmup-{output}")
            for round_index in range(args.rounds):
                order = outputs if round_index % 2 == 0 else outputs[::-1]
                for output in order:
                    f = run_loadtest(url, output, args.requests, args, folder / f"round{round_index + 1}-{output}")
                    runs[output].append(f)
                    print(f"round {round_index + 1} {output}: {f['output_tok_s']:.1f} tok/s, "
                          f"TPOT p50 {f['tpot_p50_ms']:.1f} ms", flush=True)
    except (ServeoutError, subprocess.CalledProcessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(3) from None
    results = {o: mean_figures(r) for o, r in runs.items()}
    print(f"\n{args.replicas} replicas, {args.concurrency} streams, {args.requests} requests x {args.rounds} rounds "
          f"per output, max_tokens {args.output_len}")
    print_table(results, outputs[0])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"settings": vars(args) | {"out": str(args.out)}, "runs": runs,
                                    "means": results}, indent=2))
    print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()
