"""How close the simulator comes to real runs it was not fitted to (issue 11, part 3).

Everything is measured and fitted on THIS machine, in one run (figures from one
machine are never targets on another):

1. **Step times** (fit): ``benchmarks.step_time --quick`` drives one in-process vLLM
   engine through a grid of batches; ``simulator.calibration.fit_profile`` fits the
   ``cpu`` profile's efficiencies to them (``--step-times FILE`` reuses a file).
2. **In the stack** (fit): four ``loadtest run``s against the real stack (one user;
   one user with long prompts; four users; two replicas) fit the profile's in-stack
   constants (:func:`fitted_stack_profile`): what the serving path adds to a request,
   the jitter and slowdown of engine steps that share this machine's cores with the
   serving path and the load generator, the serving path's cost per streamed token, and
   what each of two replicas gets of the machine.
3. **Validation**: real stack runs neither fit saw (other rates, prompt and output
   lengths, a closed loop, 2 replicas, other routing policies), each also simulated
   with the same :class:`~loadtest.config.LoadTestConfig` and the fitted profile.

Prints predicted against measured TTFT p50/p95, TPOT p50/p95 and output tok/s with
the error of each, writes ``results/simulator_accuracy.json`` and the fitted profile
``results/cpu-fitted.yaml``. Figures, never assertions. As root the script re-runs
itself in a loopback-only network namespace. About 15 minutes on 2 cores.

    .venv/bin/python -m benchmarks.simulator_accuracy [--step-times FILE] [--cases NAME,...]
        [--duration 60] [--warmup 10] [--measured results/simulator_accuracy.json]

``--measured`` predicts again the real runs of an earlier results file (a change to
the simulator or the fit, checked without measuring).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks.common.isolation import loopback_if_root
from benchmarks.common.model import MODEL, catalog, model_path, stack_config
from loadtest.analysis.summary import StageSummary
from loadtest.cli import build_parser, config_from_args
from loadtest.config import LoadTestConfig
from loadtest.run.orchestrator import RunOptions, run_load_test
from serving.config.model_spec import ModelCatalog
from serving.config.stack import RoutingSpec
from serving.cluster.local import ClusterOptions, LocalCluster
from serving.routing import parse_policy_name
from simulator.calibration import fit_profile, load_step_times, write_profile
from simulator.config import SimulationConfig
from simulator.hardware import Figure, HardwareProfile, load_hardware
from simulator.machine import cpu_model
from simulator.simulate import simulate

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"
FIT_ROUNDS = 6  # coordinate-wise updates of the in-stack constants; six rounds settle them
LOGNORMAL_P95_Z = 1.645  # a lognormal's p95 / p50 is exp(1.645 sigma)
console = Console() if sys.stdout.isatty() else Console(width=170)


@dataclass(frozen=True)
class Case:
    """One load test on one deployment; ``fit``: which in-stack fit run it is (empty: a
    validation case; see :func:`fitted_stack_profile`)."""

    name: str
    profile: str
    workload: str
    replicas: int = 1
    routing: str = "least-loaded"
    fit: str = ""

    @property
    def deployment(self) -> tuple[int, str]:
        return self.replicas, self.routing


RANDOM = "random:input_len={},output_len={}"
BATCH_USERS = 4  # the fit run for the cost per sequence
CASES = (  # loads this 2-core box carries without a growing queue (it prefills ~300-500 tok/s)
    Case("fit: 1 user", "concurrency:users=1", RANDOM.format(128, 64), fit="base"),
    Case("fit: 1 user, long prompts", "concurrency:users=1", RANDOM.format(512, 32), fit="long prompts"),
    Case(f"fit: {BATCH_USERS} users", f"concurrency:users={BATCH_USERS}", RANDOM.format(128, 64), fit="batch"),
    Case("2 users", "concurrency:users=2", RANDOM.format(128, 64)),
    Case("poisson 0.5 rps", "poisson:rate=0.5", RANDOM.format(128, 64)),
    Case("poisson 1 rps, short prompts, long answers", "poisson:rate=1", RANDOM.format(32, 128)),
    Case("4 users, long prompts", "concurrency:users=4", RANDOM.format(512, 32)),
    Case("fit: 2 replicas, 2 users", "concurrency:users=2", RANDOM.format(128, 64), replicas=2, fit="replicas"),
    Case("2 replicas, least-loaded", "poisson:rate=0.8", RANDOM.format(128, 64), replicas=2),
    Case("2 replicas, round-robin", "poisson:rate=0.8", RANDOM.format(128, 64), replicas=2, routing="round-robin"),
    Case("2 replicas, prefix-affinity, shared prefixes", "poisson:rate=0.8",
         "shared-prefix:num_prefixes=4,prefix_len=256,question_len=32,output_len=64",
         replicas=2, routing="prefix-affinity"),
)


@dataclass(frozen=True)
class Figures:
    """The compared figures of one stage (seconds, tokens/s)."""

    ttft_p50: float | None
    ttft_p95: float | None
    tpot_p50: float | None
    tpot_p95: float | None
    output_tok_s: float | None
    ok: int

    @classmethod
    def of(cls, stage: StageSummary) -> Figures:
        lat = stage.latency
        return cls(lat.ttft.p50, lat.ttft.p95, lat.tpot.p50, lat.tpot.p95,
                   stage.throughput.output_tokens_per_s, stage.requests.ok)


COMPARED = (("TTFT p50", "ttft_p50", 1e3), ("TTFT p95", "ttft_p95", 1e3), ("TPOT p50", "tpot_p50", 1e3),
            ("TPOT p95", "tpot_p95", 1e3), ("tok/s", "output_tok_s", 1.0))


def error_pct(predicted: float | None, measured: float | None) -> float | None:
    if predicted is None or not measured:
        return None
    return (predicted - measured) / measured * 100.0


# --- fitting -------------------------------------------------------------------------------------------


def step_times_file(given: Path | None) -> Path:
    """The step-time file: ``given``, or a fresh quick grid measured now (a child process:
    vLLM's in-process engine and Ray do not share a process)."""
    if given is not None:
        return given
    out = RESULTS / "step_times-cpu-accuracy.json"
    console.print("[bold]1/3[/] step times of one in-process vLLM engine (benchmarks.step_time --quick)")
    subprocess.run([sys.executable, "-m", "benchmarks.step_time", "--quick", "--out", str(out)], check=True,
                   cwd=REPO)
    return out


def fitted_step_profile(path: Path, catalog: ModelCatalog) -> HardwareProfile:
    times = load_step_times(path)
    fit = fit_profile(times, load_hardware("cpu"), catalog.get(times.model).architecture, file_name=path.name)
    console.print(f"step-time fit: MAPE {fit.mape:.1f}% over {len(fit.step_s)} steps; " + ", ".join(
        f"{name} {figure.value:.4g}" for name, figure in fit.profile.efficiency))
    return fit.profile


@dataclass(frozen=True)
class FitRun:
    """A fit case, its load-test config and its measured figures."""

    case: Case
    config: LoadTestConfig
    real: Figures


@dataclass
class StackConstants:
    """The in-stack constants of a CPU profile, as :func:`fitted_stack_profile` moves them."""

    noise: float = 0.0
    fixed: float = 1.0  # x the step and sequence overheads
    compute: float = 1.0  # x the memory, compute and network terms
    path_ms: float = 0.0  # the serving path's time per request
    seq_us: float = 0.0  # per sequence per step
    core_speedup: float = 2.0  # one replica on all cores over one core

    def profile(self, base: HardwareProfile, source: dict[str, str]) -> HardwareProfile:
        figure = lambda value, key: Figure(value=round(value, 4), source=source[key])  # noqa: E731
        return base.model_copy(update={
            "serving_path_ms": figure(self.path_ms, "base+long prompts"),
            "in_stack_noise": figure(self.noise, "noise"),
            "in_stack_slowdown": figure(self.fixed, "base"),
            "in_stack_compute_slowdown": figure(self.compute, "base+long prompts"),
            "in_stack_seq_us": figure(self.seq_us, "batch"),
            "in_stack_core_speedup": figure(self.core_speedup, "replicas")})


def fitted_stack_profile(profile: HardwareProfile, fits: dict[str, FitRun], path: Path) -> HardwareProfile:
    """``profile`` with its in-stack constants fitted to the four fit runs (written to ``path``).

    Each constant has the run that shows it best, and they are updated in turn, a few rounds:
    - step noise: a lognormal's sigma from the one-user run's TTFT p95 / p50;
    - fixed-cost slowdown: the one-user run's TPOT p50 (decode steps of one sequence);
    - serving path and compute slowdown: the TTFT p50s of the one-user runs with short and
      long prompts (one prefill each: a line through the two, ``path + k x engine``);
    - the cost per sequence: the four-user run's TPOT p50 (its steps carry ~4 sequences);
    - the core speed-up: the two-replica run's TPOT p50 (each replica on one core).
    """
    base, long, batch, replicas = (fits[k] for k in ("base", "long prompts", "batch", "replicas"))

    def run_source(*runs: FitRun) -> str:
        return "fitted: benchmarks.simulator_accuracy, " + "; ".join(
            f"`loadtest run --profile {r.case.profile} --workload {r.case.workload}` on {r.case.replicas} "
            f"replica(s)" for r in runs) + " against the real stack"

    source = {"noise": f"{run_source(base)}: ln(TTFT p95 / p50) / {LOGNORMAL_P95_Z}",
              "base": f"{run_source(base)}: its TPOT p50",
              "base+long prompts": f"{run_source(base, long)}: their TTFT p50s",
              "batch": f"{run_source(batch)}: its TPOT p50",
              "replicas": f"{run_source(replicas)}: its TPOT p50"}
    k = StackConstants(noise=max(math.log((base.real.ttft_p95 or 1.0) / (base.real.ttft_p50 or 1.0))
                                 / LOGNORMAL_P95_Z, 0.0), core_speedup=float(profile.cores or 1))

    def sim(run: FitRun) -> Figures:
        write_profile(k.profile(profile, source), path)
        return simulated(run.case, run.config, path)

    for _ in range(FIT_ROUNDS):
        k.fixed *= base.real.tpot_p50 / sim(base).tpot_p50
        engine_short = sim(base).ttft_p50 - k.path_ms / 1e3
        engine_long = sim(long).ttft_p50 - k.path_ms / 1e3
        scale = (long.real.ttft_p50 - base.real.ttft_p50) / (engine_long - engine_short)
        path_s = base.real.ttft_p50 - scale * engine_short
        if path_s < 0:  # the line through the two crosses below zero: no serving path, one slope
            path_s, scale = 0.0, base.real.ttft_p50 / engine_short
        k.compute, k.path_ms = k.compute * scale, path_s * 1e3
        k.seq_us = max(k.seq_us + (batch.real.tpot_p50 - sim(batch).tpot_p50) / BATCH_USERS * 1e6, 0.0)
        k.core_speedup = min(max(k.core_speedup * replicas.real.tpot_p50 / sim(replicas).tpot_p50, 1.0),
                             float(profile.cores or 1))
    fitted = k.profile(profile, source)
    write_profile(fitted, path)
    console.print(f"in-stack fit: serving path {k.path_ms:.0f} ms, step noise sigma {k.noise:.3f}, fixed costs "
                  f"x{k.fixed:.2f}, compute x{k.compute:.2f}, {k.seq_us:.0f} us per sequence per step, "
                  f"core speed-up x{k.core_speedup:.2f}")
    return fitted


# --- one case ----------------------------------------------------------------------------------------


def loadtest_config(case: Case, url: str, model_path: Path, duration_s: float, warmup_s: float) -> LoadTestConfig:
    args = build_parser().parse_args([
        "run", "--target", url, "--model", MODEL, "--profile", case.profile, "--workload", case.workload,
        "--duration", f"{duration_s + warmup_s:g}s", "--warmup", f"{warmup_s:g}s", "--tokenizer", str(model_path)])
    return config_from_args(args)


def simulated(case: Case, config: LoadTestConfig, profile_path: Path) -> Figures:
    sim = SimulationConfig(hardware=str(profile_path), model=MODEL, replicas=case.replicas,
                           routing=RoutingSpec(policy=parse_policy_name(case.routing)))
    return Figures.of(simulate(config, sim).summary.headline)


def measured(config: LoadTestConfig, out: Path) -> Figures:
    summary = run_load_test(config, RunOptions(out_dir=out, console=Console(quiet=True)))
    return Figures.of(summary.headline)


# --- the report --------------------------------------------------------------------------------------


def table(rows: list[dict]) -> Table:
    t = Table(title="simulator vs real stack (this machine; predicted / measured, error)", title_justify="left")
    t.add_column("case")
    t.add_column("requests ok", justify="right")
    for label, _, _ in COMPARED:
        t.add_column(label, justify="right")
    for row in rows:
        cells = []
        for _, key, scale in COMPARED:
            p, m = row["predicted"][key], row["measured"][key]
            err = error_pct(p, m)
            cells.append("-" if p is None or m is None else
                         f"{p * scale:.1f} / {m * scale:.1f} ({err:+.0f}%)" if err is not None else "-")
        t.add_row(row["case"],
                  f"{row['predicted']['ok']} / {row['measured']['ok']}", *cells)
    return t


def mean_abs_errors(rows: list[dict]) -> dict[str, float | None]:
    out = {}
    for label, key, _ in COMPARED:
        errs = [abs(e) for r in rows if not r["fit"]
                if (e := error_pct(r["predicted"][key], r["measured"][key])) is not None]
        out[label] = sum(errs) / len(errs) if errs else None
    return out


def measure_cases(cases: list[Case], args: argparse.Namespace, model_path: Path) -> dict[str, Figures]:
    """Each case's figures on the real stack (deployments reused between consecutive
    cases that share one)."""
    out: dict[str, Figures] = {}
    with LocalCluster(ClusterOptions(http_port=args.port)) as cluster:
        deployed = url = None
        for case in cases:
            if case.deployment != deployed:
                overrides = {"gateway": {"port": args.port}, "replicas": {"num_replicas": case.replicas},
                             "routing": {"policy": case.routing}}
                config = stack_config(overrides)
                with console.status(f"deploying {case.replicas} replica(s), {case.routing}") as status:
                    url = cluster.deploy(config, on_progress=lambda s: status.update(f"deploying: {s}"))
                deployed = case.deployment
            test = loadtest_config(case, url, model_path, args.duration, args.warmup)
            with console.status(f"real stack: {case.name}"):
                out[case.name] = measured(test, RESULTS / "simulator_accuracy" / case.name.replace(" ", "_"))
            console.print(f"measured {case.name}: {out[case.name]}")
    return out


def previously_measured(path: Path) -> dict[str, Figures]:
    return {row["case"]: Figures(**row["measured"]) for row in json.loads(path.read_text())["cases"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--step-times", type=Path, help="reuse a step-time file instead of measuring one")
    parser.add_argument("--measured", type=Path,
                        help="reuse the real runs of an earlier results file (predict again, measure nothing)")
    parser.add_argument("--cases", help="comma-separated case names to run (default: all; the fit cases always run)")
    parser.add_argument("--duration", type=float, default=60.0, help="measured seconds per case")
    parser.add_argument("--warmup", type=float, default=10.0, help="warm-up seconds per case")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--out", type=Path, default=RESULTS / "simulator_accuracy.json")
    args = parser.parse_args()
    if args.measured is None:
        loopback_if_root("benchmarks.simulator_accuracy")
    wanted = set(args.cases.split(",")) if args.cases else None
    cases = [c for c in CASES if c.fit or wanted is None or c.name in wanted]
    weights = model_path()
    step_times = step_times_file(args.step_times)
    profile = fitted_step_profile(step_times, catalog())
    if args.measured:
        real = previously_measured(args.measured)
        if missing := [c.name for c in cases if c.fit and c.name not in real]:
            parser.error(f"{args.measured} has no real run of the fit case(s) {', '.join(missing)}")
        cases = [c for c in cases if c.name in real]
    else:
        console.print("[bold]2/3[/] real stack runs")
        real = measure_cases(cases, args, weights)

    console.print("[bold]3/3[/] the same load tests simulated")
    profile_path = RESULTS / "cpu-fitted.yaml"
    config_of = {c.name: loadtest_config(c, "http://simulated.invalid", weights, args.duration, args.warmup)
                 for c in cases}
    fits = {c.fit: FitRun(c, config_of[c.name], real[c.name]) for c in cases if c.fit}
    profile = fitted_stack_profile(profile, fits, profile_path)
    rows = [{"case": c.name, "fit": c.fit, **asdict(c), "measured": asdict(real[c.name]),
             "predicted": asdict(simulated(c, config_of[c.name], profile_path))} for c in cases]
    console.print(table(rows))
    errors = mean_abs_errors(rows)
    console.print("mean |error| over the validation cases: " + ", ".join(
        f"{k} {v:.1f}%" for k, v in errors.items() if v is not None))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"cpu": cpu_model(), "step_times": str(step_times), "profile": str(profile_path),
                                    "duration_s": args.duration, "cases": rows, "mean_abs_error_pct": errors},
                                   indent=2))
    console.print(f"figures written to {args.out}; fitted profile {profile_path}")


if __name__ == "__main__":
    main()
