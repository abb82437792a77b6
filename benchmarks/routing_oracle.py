"""Routing and autoscaling judged against oracles, at 24 replicas (issue 21); simulated.

**Routing.** On two clusters of 24 H200s (6 replicas of Llama 3.3 70B at TP4; 24 of
Llama 3.1 8B at TP1) and three workloads (the Mooncake trace excerpt replayed; generated
multi-turn chat that resends its history, no session header; RAG questions over shared
documents; the last two half English, half Vietnamese), every routing policy on the same
requests (:mod:`simulator.fixed_run`): the engines' prefix hit rate against the offline
bound (:mod:`simulator.oracles.prefix_bound`, load cap 1.2x the mean), TTFT p50/p95,
max/mean replica load (requests routed; time-averaged requests in flight) and SLO
attainment. ``cache-aware`` reads the simulated engines' caches (the counterpart of vLLM's
KV events); ``cache-aware (no events)`` is the same policy on its own routing record.

**Autoscaling.** A day (``--day-duration``, default the real 24 h) of the ``day`` profile
on the 6 x TP4 stack of ``deploy/stacks``: the queue-depth policy as the stack sets it or
with other ``--targets``, ``--upscale-delays``, ``--downscale-delays``, ``--look-backs``, ``--downscale-margins``
and ``--stabilize on,off`` (each combination is a run), and its trend variant
(``--trend-targets``), against the clairvoyant (:mod:`simulator.oracles.clairvoyant`)
run at a range of per-replica capacities: for each policy run, the clairvoyant's fewest
GPU-hours at no lower SLO attainment.

    .venv/bin/python -m benchmarks.routing_oracle [--part routing|autoscaling|all]
        [--clusters 6xTP4,24xTP1] [--workloads mooncake,chat,rag] [--day-duration 24h] [--quick]

Prints the tables and writes ``results/routing_oracle.json``. Figures are printed, never
asserted. The real stack's part (2 replicas on this box) is its own program,
``benchmarks/routing_oracle_real.py``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from loadtest.cli import build_parser, config_from_args
from loadtest.workloads.tokenizer import default_tokenizer_path, load_tokenizer
from serving.config.stack import AutoscalingSpec, RoutingPolicyName, RoutingSpec
from simulator.config import SimulationConfig
from simulator.replica_setup import replica_setup
from simulator.fixed_run import FixedRunResult, Slo, run_fixed
from simulator.oracles.clairvoyant import first_stage_arrivals, run_clairvoyant
from simulator.oracles.prefix_bound import prefix_bound
from simulator.autoscale_run import figures_of, grid_of, run_autoscale, stack_policy
from simulator.workloads.conversations import ConversationMix, conversation_requests
from simulator.workloads.mooncake import mooncake_requests
from simulator.workloads.rag import RagMix, rag_requests
from simulator.workloads.requests import RequestSet

REPO = Path(__file__).resolve().parents[1]
STACK = REPO / "deploy" / "stacks" / "llama-3.3-70b-instruct-h200-3x8.yaml"
TOKENIZER_MODEL = "smollm2-135m-instruct"
SLO = Slo(ttft_s=2.0, tpot_s=0.1)
LOAD_CAP = 1.2
HIT_GOAL, LOAD_GOAL, GPU_HOURS_GOAL = 0.95, 1.2, 1.10
NO_EVENTS = "cache-aware (no events)"
POLICIES = ("round-robin", "least-loaded", "session", "prefix-affinity", "cache-aware", NO_EVENTS)
console = Console() if sys.stdout.isatty() else Console(width=200)


@dataclass(frozen=True)
class Cluster:
    name: str
    model: str
    replicas: int
    tensor_parallel: int
    mooncake: tuple[float, int]  # speed, copies
    chat_sessions_per_s: float
    rag_rate: float
    rag_documents: int

    def sim(self, policy: str) -> SimulationConfig:
        name = "cache-aware" if policy == NO_EVENTS else policy
        return SimulationConfig(hardware="h200", model=self.model, replicas=self.replicas,
                                tensor_parallel=self.tensor_parallel, max_in_flight=1_000_000,
                                routing=RoutingSpec(policy=RoutingPolicyName(name)))


CLUSTERS = {
    "6xTP4": Cluster("6 x TP4 H200, Llama 3.3 70B", "llama-3.3-70b-instruct", 6, 4, (1.5, 1), 8.0, 35.0, 1500),
    "24xTP1": Cluster("24 x TP1 H200, Llama 3.1 8B", "llama-3.1-8b-instruct", 24, 1, (2.0, 4), 32.0, 140.0, 3000),
}


def workload(name: str, cluster: Cluster, tokenizer, *, quick: bool) -> RequestSet:
    minutes = 2.0 if quick else 6.0
    if name == "mooncake":
        speed, copies = cluster.mooncake
        return mooncake_requests(speed=speed, copies=copies)
    if name == "chat":
        rate = cluster.chat_sessions_per_s
        return conversation_requests(ConversationMix(sessions=int(rate * 60 * minutes), session_rate=rate), tokenizer)
    if name == "rag":
        return rag_requests(RagMix(requests=int(cluster.rag_rate * 60 * minutes), rate=cluster.rag_rate,
                                   documents=cluster.rag_documents), tokenizer)
    raise SystemExit(f"unknown workload {name!r}; valid: mooncake, chat, rag")


def run_row(policy: str, result: FixedRunResult, bound_rate: float, rr_p95: float | None) -> dict:
    p95 = result.ttft_p(95)
    return {"policy": policy, "hit_rate": result.hit_rate, "vs_oracle": result.hit_rate / bound_rate if bound_rate else None,
            "ttft_p50_s": result.ttft_p(50), "ttft_p95_s": p95,
            "p95_vs_round_robin": p95 / rr_p95 if p95 and rr_p95 else None,
            "max_over_mean_routed": result.max_over_mean_routed,
            "max_over_mean_in_flight": result.max_over_mean_in_flight,
            "slo_attainment": result.slo_attainment, "requests": result.requests, "ok": result.ok,
            "preemptions": result.preemptions, "routed": list(result.routed)}


def routing_part(args: argparse.Namespace) -> list[dict]:
    tokenizer = load_tokenizer(default_tokenizer_path(TOKENIZER_MODEL))
    scenarios = []
    for key in args.clusters:
        cluster = CLUSTERS[key]
        setup = replica_setup(cluster.sim("round-robin"))
        for name in args.workloads:
            requests = workload(name, cluster, tokenizer, quick=args.quick).fit(setup.spec.max_model_len)
            bound = prefix_bound([r.prompt for r in requests.requests], replicas=cluster.replicas,
                                 capacity_blocks=setup.kv_tokens // setup.replica().unit_tokens,
                                 block_tokens=setup.replica().unit_tokens, load_cap=LOAD_CAP)
            rows: list[dict] = []
            rr_p95 = None
            for policy in args.policies:
                started = time.process_time()
                result = run_fixed(requests, cluster.sim(policy), SLO, seed=args.seed, setup=setup,
                                   engine_view=policy != NO_EVENTS)
                if policy == "round-robin":
                    rr_p95 = result.ttft_p(95)
                rows.append(run_row(policy, result, bound.hit_rate, rr_p95) | {"cpu_s": time.process_time() - started})
            scenario = {"cluster": key, "cluster_label": cluster.name, "workload": name, "source": requests.source,
                        "notes": list(requests.notes), "requests": len(requests), "span_s": requests.span_s,
                        "prompt_tokens": requests.prompt_tokens, "kv_tokens_per_replica": setup.kv_tokens,
                        "oracle": {"hit_rate": bound.hit_rate, "binding": bound.binding, "load_cap": bound.load_cap,
                                   "load_capped_hit_blocks": bound.load_capped_hits,
                                   "pooled_hit_blocks": bound.pooled_hits},
                        "policies": rows}
            scenarios.append(scenario)
            print_scenario(scenario)
    return scenarios


def _f(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def print_scenario(s: dict) -> None:
    o = s["oracle"]
    table = Table(title=f"{s['cluster_label']}: {s['workload']} ({s['requests']} requests over {s['span_s']:.0f} s; "
                        f"{s['source']}{'; ' + '; '.join(s['notes']) if s['notes'] else ''})")
    for col in ("policy", "hit rate", "vs oracle", "TTFT p50 ms", "TTFT p95 ms", "p95 vs RR",
                "max/mean requests", "max/mean in flight", "SLO attainment"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    table.add_row("oracle (bound)", f"{o['hit_rate']:.3f}", "1.00", "", "", "", f"<= {LOAD_CAP}", "", "")
    for r in s["policies"]:
        table.add_row(r["policy"], f"{r['hit_rate']:.3f}", _f(r["vs_oracle"], ".3f"),
                      _f(r["ttft_p50_s"] and r["ttft_p50_s"] * 1000, ".0f"),
                      _f(r["ttft_p95_s"] and r["ttft_p95_s"] * 1000, ".0f"), _f(r["p95_vs_round_robin"], ".2f"),
                      f"{r['max_over_mean_routed']:.2f}", f"{r['max_over_mean_in_flight']:.2f}",
                      f"{r['slo_attainment']:.1%}")
    console.print(table)


def goal_rows(scenarios: list[dict], policy: str = "cache-aware") -> list[dict]:
    out = []
    for s in scenarios:
        r = next((r for r in s["policies"] if r["policy"] == policy), None)
        if r is None:
            continue
        met = (r["vs_oracle"] is not None and r["vs_oracle"] >= HIT_GOAL and r["max_over_mean_routed"] <= LOAD_GOAL
               and (r["p95_vs_round_robin"] or math.inf) <= 1.0)
        out.append({"cluster": s["cluster"], "workload": s["workload"], "vs_oracle": r["vs_oracle"],
                    "max_over_mean_routed": r["max_over_mean_routed"], "p95_vs_round_robin": r["p95_vs_round_robin"],
                    "met": met})
    return out


def print_goals(rows: list[dict]) -> None:
    table = Table(title=f"goal: cache-aware >= {HIT_GOAL}x oracle hit rate, max/mean requests <= {LOAD_GOAL}, "
                        f"TTFT p95 <= round-robin's")
    for col in ("cluster", "workload", "vs oracle", "max/mean requests", "p95 vs RR", "met"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["cluster"], r["workload"], _f(r["vs_oracle"], ".3f"), f"{r['max_over_mean_routed']:.2f}",
                      _f(r["p95_vs_round_robin"], ".3f"), "yes" if r["met"] else "NO")
    console.print(table)


# --- autoscaling ------------------------------------------------------------------------

def day_config(duration: str, seed: int = 0):
    return config_from_args(build_parser().parse_args([
        "run", "--target", "http://simulated.invalid", "--no-metrics", "--seed", str(seed),
        "--profile", "day:peak_rate=30,trough_rate=3,max_concurrency=4096",
        "--workload", "random:input_len=1024,output_len=256", "--duration", duration, "--slo", "ttft_p95=2s"]))


def autoscaling_part(args: argparse.Namespace) -> dict:
    config = day_config(args.day_duration, args.seed)
    stack = stack_policy(STACK)
    base = SimulationConfig(hardware="h200", model=stack.model, tensor_parallel=4,
                            routing=RoutingSpec(policy=RoutingPolicyName.LEAST_LOADED), max_in_flight=stack.max_in_flight)
    start = replica_setup(base).replica_start_s
    spec = stack.autoscaling
    settings = itertools.product(args.targets or [spec.target_queue_per_replica],
                                 args.upscale_delays or [spec.upscale_delay_s],
                                 args.downscale_delays or [spec.downscale_delay_s],
                                 args.look_backs or [spec.look_back_period_s],
                                 args.downscale_margins or [spec.downscale_margin], args.stabilize)
    variants = [(f"queue-depth, target {t:g}, upscale {u:g} s, downscale {d:g} s, look-back {lb:g} s, margin {m:g}"
                 + ("" if stable else ", unstabilized"),
                 spec.model_copy(update={"target_queue_per_replica": t, "upscale_delay_s": u, "downscale_delay_s": d,
                                         "look_back_period_s": lb, "downscale_margin": m,
                                         "stabilize_downscale": stable}))
                for t, u, d, lb, m, stable in settings]
    horizon = start + spec.upscale_delay_s
    variants += [(f"trend, target {t:g}, horizon {horizon:g} s",
                  spec.model_copy(update={"target_queue_per_replica": t, "trend_horizon_s": horizon}))
                 for t in args.trend_targets]
    runs = []
    for name, policy in variants:
        started = time.process_time()
        report = run_autoscale(config, base, policy, statics=[])
        r = report.autoscaled
        runs.append({"name": name, "policy": policy.model_dump(mode="json"), "gpu_hours": r.gpu_hours,
                     "slo_attainment": r.slo_attainment, "ttft_p95_s": r.ttft_p95_s, "passed": r.passed,
                     "failed": r.failed, "mean_replicas": r.mean_replicas, "scale_ups": len(r.scale_ups),
                     "cpu_s": time.process_time() - started})
        console.print(f"{name}: {r.gpu_hours:.1f} GPU-hours, SLO attainment {r.slo_attainment:.2%}")
    arrivals = first_stage_arrivals(config)
    grid = grid_of(config, spec)
    clairvoyant = []
    for capacity in args.capacities:
        started = time.process_time()
        run = run_clairvoyant(config, base, spec, capacity, arrivals=arrivals)
        f = figures_of(f"clairvoyant {capacity:g} req/s", run.result, grid, spec)
        clairvoyant.append({"capacity_rps": capacity, "gpu_hours": run.gpu_hours, "slo_attainment": run.slo_attainment,
                            "ttft_p95_s": f.ttft_p95_s, "passed": f.passed, "mean_replicas": f.mean_replicas,
                            "cpu_s": time.process_time() - started})
        console.print(f"clairvoyant at {capacity:g} req/s per replica: {run.gpu_hours:.1f} GPU-hours, "
                      f"SLO attainment {run.slo_attainment:.2%}")
    for r in runs:
        best = min((c for c in clairvoyant if c["slo_attainment"] >= r["slo_attainment"] - 1e-9),
                   key=lambda c: c["gpu_hours"], default=None)
        r["clairvoyant_gpu_hours"] = best["gpu_hours"] if best else None
        r["vs_clairvoyant"] = r["gpu_hours"] / best["gpu_hours"] if best else None
    result = {"scenario": {"stack": str(STACK.relative_to(REPO)), "day_duration": args.day_duration, "seed": args.seed,
                           "profile": "day:peak_rate=30,trough_rate=3", "workload": "random:input_len=1024,output_len=256",
                           "slo": "ttft_p95=2s", "replica_start_s": start, "requests": int(len(arrivals))},
              "runs": runs, "clairvoyant": clairvoyant}
    print_autoscaling(result)
    return result


def print_autoscaling(result: dict) -> None:
    s = result["scenario"]
    table = Table(title=f"autoscaling over a day ({s['day_duration']}, {s['requests']} requests, {s['stack']}, "
                        f"replica start {s['replica_start_s']:g} s, SLO {s['slo']})")
    for col in ("run", "GPU-hours", "SLO attainment", "TTFT p95 ms", "mean replicas", "clairvoyant GPU-hours",
                "vs clairvoyant"):
        table.add_column(col)
    for r in result["runs"]:
        table.add_row(r["name"], f"{r['gpu_hours']:.1f}", _f(r["slo_attainment"], ".2%"),
                      _f(r["ttft_p95_s"] and r["ttft_p95_s"] * 1000, ".0f"), f"{r['mean_replicas']:.2f}",
                      _f(r["clairvoyant_gpu_hours"], ".1f"), _f(r["vs_clairvoyant"], ".3f"))
    for c in result["clairvoyant"]:
        table.add_row(f"clairvoyant, {c['capacity_rps']:g} req/s per replica", f"{c['gpu_hours']:.1f}",
                      f"{c['slo_attainment']:.2%}", _f(c["ttft_p95_s"] and c["ttft_p95_s"] * 1000, ".0f"),
                      f"{c['mean_replicas']:.2f}", "", "")
    console.print(table)


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("routing", "autoscaling", "all"), default="all")
    parser.add_argument("--clusters", type=lambda s: s.split(","), default=list(CLUSTERS))
    parser.add_argument("--workloads", type=lambda s: s.split(","), default=["mooncake", "chat", "rag"])
    parser.add_argument("--policies", type=lambda s: s.split(","), default=list(POLICIES))
    parser.add_argument("--quick", action="store_true", help="2-minute generated workloads instead of 6")
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated workloads and the day's arrivals")
    parser.add_argument("--day-duration", default="24h", help="the day's length in simulated time (1h: 24x compressed)")
    parser.add_argument("--targets", type=_floats, default=[], help="queue-depth targets (default the stack's)")
    parser.add_argument("--trend-targets", type=_floats, default=[], help="trend policy targets (default none)")
    parser.add_argument("--downscale-delays", type=_floats, default=[],
                        help="queue-depth downscale delays to try (s; default the stack's)")
    parser.add_argument("--upscale-delays", type=_floats, default=[],
                        help="queue-depth upscale delays to try (s; default the stack's)")
    parser.add_argument("--look-backs", type=_floats, default=[],
                        help="queue-depth look-back periods to try (s; default the stack's)")
    parser.add_argument("--downscale-margins", type=_floats, default=[],
                        help="queue-depth downscale margins to try (default the stack's)")
    parser.add_argument("--stabilize", type=lambda s: [x == "on" for x in s.split(",")], default=[True],
                        help="queue-depth downscale stabilisation to try: on, off or on,off")
    parser.add_argument("--capacities", type=_floats, default=[7.5, 7.6, 7.7, 7.75, 8.0],
                        help="clairvoyant capacities (req/s per replica); the yardstick is the cheapest at no "
                             "lower attainment, so keep them fine near the SLO's edge")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "routing_oracle.json")
    args = parser.parse_args()
    unknown = [c for c in args.clusters if c not in CLUSTERS] + [p for p in args.policies if p not in POLICIES]
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}; clusters {', '.join(CLUSTERS)}; policies {', '.join(POLICIES)}")
    out: dict = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}}
    if args.part in ("routing", "all"):
        out["routing"] = routing_part(args)
        out["goals"] = goal_rows(out["routing"])
        print_goals(out["goals"])
    if args.part in ("autoscaling", "all"):
        out["autoscaling"] = autoscaling_part(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2, default=float))
    console.print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()
