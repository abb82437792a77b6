"""``python -m simulator`` (also ``loadtest simulate``): a calibrated simulator of vLLM
replicas behind serveout's router.

    python -m simulator run --hardware h200 --model llama-3.3-70b-instruct --replicas 6 \\
        --tensor-parallel 4 --routing least-loaded --profile poisson:rate=50 \\
        --workload random:input_len=1024,output_len=256 --duration 1h --out results/sim
    python -m simulator calibrate STEP_TIMES.json --hardware cpu --out simulator/hardware/cpu-fitted.yaml
    python -m simulator calibrate --quick     # fit THIS machine's cpu profile (in-process vLLM engine, no Ray)
    python -m simulator hardware              # the profiles and their assumed constants

``run`` takes every load option of ``loadtest run`` (``--profile``, ``--workload``,
``--duration``, ``--requests``, ``--warmup``, ``--cooldown``, ``--slo``, ``--seed``,
``--tokenizer``, ``--prompt-pool``, ``--endpoint``, ``--out``, ``--reports``,
``--label``, ``--quiet``), parsed by the load tester's own parser, and writes the same
``summary.json`` and reports, labelled simulated, plus ``simulation.json``.

Exit codes (:class:`loadtest.errors.ExitCode`): 0 done (SLO met or none set), 1 an SLO
missed, 2 an invalid option, spec, profile or file, 3 the simulation or fit failed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from loadtest.cli import build_parser as loadtest_parser
from loadtest.cli import config_from_args, run_command
from loadtest.errors import ExitCode
from simulator.config import REPO, SimulationConfig
from simulator.errors import SimulationConfigError
from simulator.lora import adapter_names

SIMULATED_TARGET = "http://simulated.invalid"


def _autoscale(text: str) -> tuple[int, int]:
    low, sep, high = text.partition("..")
    if not sep or not low.isdigit() or not high.isdigit() or int(low) > int(high) or int(high) < 1:
        raise argparse.ArgumentTypeError(f"expected MIN..MAX replicas, e.g. 1..8; got {text!r}")
    return int(low), int(high)


LOAD_OPTIONS = ("--profile", "--workload", "--duration", "--requests", "--warmup", "--cooldown", "--slo", "--seed",
                "--tokenizer", "--prompt-pool", "--endpoint", "--timeout", "--time-limit", "--no-exact-output",
                "--out", "--reports", "--label", "--quiet")  # what a simulation reads of `loadtest run`'s options


def plain(text: str) -> str:
    """Help text without reStructuredText's double backticks."""
    return text.replace("``", "")


def load_options_epilog() -> str:
    """The load options ``run`` and ``autoscale`` pass to ``loadtest run``'s own parser, as help text."""
    runner = next(a for a in loadtest_parser()._subparsers._group_actions).choices["run"]
    lines = ["load options (parsed by `loadtest run`'s parser, same meaning; its other options are accepted and "
             "have no effect on a simulation):"]
    actions = {option: action for action in runner._actions for option in action.option_strings}
    for action in (actions[name] for name in LOAD_OPTIONS if name in actions):
        flag = ", ".join(action.option_strings) + (f" {action.metavar or action.dest.upper()}" if action.nargs != 0
                                                   else "")
        help_text = plain(action.help or "see `loadtest run --help`")
        help_text = help_text.replace("%(default)s", str(action.default)).replace("%%", "%")
        lines.append(f"  {flag:<30} {help_text}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="simulator", description=plain(__doc__.splitlines()[0]))
    sub = parser.add_subparsers(dest="command", required=True)
    epilog = load_options_epilog()
    run = sub.add_parser("run", help="simulate a load test against a cluster (plus every load option of "
                                     "`loadtest run`)", epilog=epilog,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("--hardware", required=True, help="a profile name (see `simulator hardware`) or YAML path")
    run.add_argument("--model", default="smollm2-135m-instruct", help="a model spec name (default: %(default)s)")
    run.add_argument("--replicas", type=int, default=1, help="engine replicas (autoscaling: the initial count)")
    run.add_argument("--tensor-parallel", type=int, default=None, help="ranks per replica (default: the spec's)")
    run.add_argument("--routing", default="least-loaded", help="routing policy (default: %(default)s)")
    run.add_argument("--autoscale", type=_autoscale, default=None, metavar="MIN..MAX",
                     help="queue-depth autoscaling between MIN and MAX replicas")
    run.add_argument("--max-in-flight", type=int, default=None, help="gateway admission bound (default: 256)")
    run.add_argument("--max-num-seqs", type=int, default=None, help="engine max_num_seqs (default: the spec's)")
    run.add_argument("--replica-start", type=float, default=None, metavar="SECONDS",
                     help="a new replica's start time (default: the hardware profile's)")
    run.add_argument("--quantization", choices=["fp8"], default=None, help="fp8 weights (default: the spec's dtype)")
    run.add_argument("--kv-cache-dtype", choices=["auto", "fp8"], default="auto",
                     help="KV cache element type (default: %(default)s, the model's dtype)")
    run.add_argument("--session-header", action="store_true",
                     help="requests carry their session id (for the session policy)")
    run.add_argument("--adapters", type=adapter_names, default=(), metavar="N|NAME,...",
                     help="LoRA adapters of the model: a count N (adapter-1 ... adapter-N) or names; requests "
                          "name them through --model-mix")
    run.add_argument("--max-loras", type=int, default=None,
                     help="adapter slots per engine batch (default: the spec's, else 2)")
    run.add_argument("--adapter-slots", choices=["on", "off"], default="on",
                     help="the router ranks first the replicas that can batch the request's adapter now "
                          "(default: %(default)s, as serving)")
    run.add_argument("--max-cpu-loras", type=int, default=None,
                     help="adapters each replica keeps in host memory (default: the spec's, else max(max_loras, 16))")
    run.add_argument("--models-dir", type=Path, default=REPO / "models")

    calibrate = sub.add_parser("calibrate", help="fit a hardware profile's efficiencies to measured step times")
    calibrate.add_argument("step_times", type=Path, nargs="?", help="a step-time JSON file (schema: docs/simulator.md)")
    calibrate.add_argument("--quick", action="store_true",
                           help="fit THIS machine: measure its bandwidth and peak, time an in-process vLLM engine's "
                                "steps (benchmarks.step_time --quick, no Ray) and fit the cpu profile (a few minutes)")
    calibrate.add_argument("--hardware", default=None, help="the profile to fit (default: the file's)")
    calibrate.add_argument("--out", type=Path, default=None,
                           help="where the fitted profile YAML goes (default with --quick: results/cpu-fitted.yaml)")
    calibrate.add_argument("--models-dir", type=Path, default=REPO / "models")

    sub.add_parser("hardware", help="list the hardware profiles and their assumed constants")

    autoscale = sub.add_parser("autoscale", aliases=["replay"],
                               help="one load (e.g. --profile day:...) autoscaled vs static replica counts: "
                                    "GPU-hours, SLO attainment, scale-up lag (plus the load options of "
                                    "`loadtest run`; `replay` is the old name)", epilog=epilog,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    autoscale.add_argument("--hardware", required=True, help="a profile name (see `simulator hardware`) or YAML path")
    autoscale.add_argument("--stack", type=Path, default=None,
                        help="a stack file whose model, autoscaling policy, routing and gateway bound to use")
    autoscale.add_argument("--model", default=None, help="a model spec name (default: the stack's, else smollm2)")
    autoscale.add_argument("--tensor-parallel", type=int, default=None, help="ranks per replica (default: the spec's)")
    autoscale.add_argument("--autoscale", type=_autoscale, default=None, metavar="MIN..MAX",
                        help="the autoscaler's bounds (default: the stack's)")
    autoscale.add_argument("--static", type=_static_counts, default=None, metavar="N[,M...]",
                        help="static replica counts to compare (default: MAX and the smallest meeting the SLO)")
    autoscale.add_argument("--replica-start", type=float, default=None, metavar="SECONDS",
                        help="a new replica's start time (default: the hardware profile's)")
    autoscale.add_argument("--routing", default=None, help="routing policy (default: the stack's, else least-loaded)")
    autoscale.add_argument("--max-in-flight", type=int, default=None,
                        help="gateway admission bound (default: the stack's, else 256)")
    autoscale.add_argument("--models-dir", type=Path, default=REPO / "models")
    return parser


def _static_counts(text: str) -> tuple[int, ...]:
    parts = [p.strip() for p in text.split(",")]
    if not parts or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise argparse.ArgumentTypeError(f"expected replica counts N[,M...] (each >= 1); got {text!r}")
    return tuple(int(p) for p in parts)


def simulation_config(args: argparse.Namespace) -> SimulationConfig:
    from pydantic import ValidationError

    from serving.config.model_spec import LoraSettings, ModelCatalog
    from serving.config.stack import AutoscalingSpec, RoutingSpec
    from serving.errors import ConfigError as ServingConfigError
    from serving.routing import parse_policy_name

    try:
        policy = parse_policy_name(args.routing)
        routing = RoutingSpec(policy=policy, adapter_slots=getattr(args, "adapter_slots", "on") == "on")
        engine = None
        updates = {"max_num_seqs": args.max_num_seqs} if args.max_num_seqs is not None else {}
        lora = {k: v for k in ("max_loras", "max_cpu_loras") if (v := getattr(args, k, None)) is not None}
        if updates or lora:
            spec = ModelCatalog(args.models_dir).get(args.model)
            if lora:
                updates["lora"] = LoraSettings.model_validate((spec.engine.lora or LoraSettings()).model_dump() | lora)
            engine = spec.engine.model_copy(update=updates)
        autoscaling = AutoscalingSpec()
        if args.autoscale is not None:
            low, high = args.autoscale
            autoscaling = AutoscalingSpec(enabled=True, min_replicas=low, max_replicas=high)
        extra = {"max_in_flight": args.max_in_flight} if args.max_in_flight else {}
        return SimulationConfig(
            hardware=args.hardware, model=args.model, replicas=args.replicas, tensor_parallel=args.tensor_parallel,
            routing=routing, autoscaling=autoscaling, engine=engine,
            replica_start_s=args.replica_start, send_session_id=args.session_header, models_dir=args.models_dir,
            quantization=getattr(args, "quantization", None), kv_cache_dtype=getattr(args, "kv_cache_dtype", "auto"),
            adapters=getattr(args, "adapters", ()), **extra)
    except ServingConfigError as exc:
        raise SimulationConfigError(str(exc)) from None
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise SimulationConfigError(problems) from None


def cmd_run(args: argparse.Namespace, rest: list[str], console: Console) -> int:
    from loadtest.reports.table import summary_renderable
    from simulator.accuracy import band_for, margin_flags, simulated_label
    from simulator.replica_setup import replica_setup
    from simulator.machine import cpu_mismatch
    from simulator.simulate import simulate, write_simulation

    sim = simulation_config(args)
    replica_setup(sim)  # a bad hardware/model/TP combination fails here, before any output
    load_args = loadtest_parser().parse_args(["run", "--target", SIMULATED_TARGET, "--model", args.model,
                                              "--no-metrics", *rest])
    config = config_from_args(load_args)
    out = load_args.out or Path("results") / time.strftime("simulate-%Y%m%d-%H%M%S")
    err = Console(stderr=True)
    err.print(f"[bold]simulator[/] {sim.label}: {config.profile.kind} x {config.workload.kind}; results in {out}")
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[now]}"),
                  TimeElapsedColumn(), console=err, disable=load_args.quiet, transient=True) as bar:
        tasks: dict[int, int] = {}
        total = config.duration_s or None

        def progress(plan, t: float) -> None:
            if plan.index not in tasks:
                tasks[plan.index] = bar.add_task(f"stage {plan.index} ({plan.label})", total=total, now="")
            bar.update(tasks[plan.index], completed=t, now=f"{t:,.0f} s simulated")

        result = simulate(config, sim, progress=progress)
    reports = tuple(p.strip() for p in load_args.reports.split(",")) if load_args.reports else None
    write_simulation(result, out, reports)
    console.print(summary_renderable(result.summary))
    if mismatch := cpu_mismatch(result.setup.hardware):
        console.print(f"[bold yellow]warning:[/] {mismatch}")
    band = band_for(sim.hardware)
    console.print(f"[bold yellow]{simulated_label(sim.hardware, band)}[/]")
    for flag in margin_flags(result.summary.headline.slo.objectives, band):
        console.print(f"[yellow]near the limit:[/] {flag}")
    figures = result.stages[result.summary.headline_stage]
    console.print(f"simulated in {result.wall_s:.1f} s; {figures.gpu_hours:.2f} GPU-hours; "
                  f"{figures.preemptions} preemptions; results: {out}")
    if (lora := figures.adapters) is not None:
        console.print(f"adapters: {lora.loads} loads, {lora.evictions} evictions, {lora.activations} activations, "
                      f"{lora.slot_skips} slot skips, {lora.stall_s:.2f} s of steps stalled loading them")
    return ExitCode.SLO_MISSED if result.summary.passed is False else ExitCode.OK


def cmd_calibrate(args: argparse.Namespace, console: Console) -> int:
    from simulator.calibration import fit_profile, load_step_times, write_profile
    from simulator.replica_setup import load_model
    from simulator.hardware import load_hardware

    if args.quick == (args.step_times is not None):
        raise SimulationConfigError("calibrate takes a step-time file or --quick (to measure this machine), one of them")
    if args.quick:
        args.step_times, hardware = quick_measurements(args.hardware or "cpu", console)
        args.out = args.out or REPO / "results" / "cpu-fitted.yaml"
    elif args.out is None:
        raise SimulationConfigError("--out is needed: where the fitted profile goes")
    times = load_step_times(args.step_times)
    spec = load_model(times.model, args.models_dir)
    if not args.quick:
        hardware = load_hardware(args.hardware or times.hardware)
    fit = fit_profile(times, hardware, spec.architecture, file_name=args.step_times.name)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_profile(fit.profile, args.out)
    table = Table(title=f"step times: measured vs fitted ({len(fit.step_s)} steps)", title_justify="left")
    for col in ("prefill", "decode", "context", "seqs", "measured ms", "fitted ms", "error"):
        table.add_column(col, justify="right")
    predicted = fit.step_s * (1 + fit.errors_pct / 100)
    for step, measured, fitted, error in zip(times.steps, fit.step_s, predicted, fit.errors_pct):
        table.add_row(*(str(n) for n in (step.prefill_tokens, step.decode_seqs, step.context_tokens, step.num_seqs)),
                      f"{measured * 1e3:.2f}", f"{fitted * 1e3:.2f}", f"{error:+.1f}%")
    console.print(table)
    for name, figure in fit.profile.efficiency:
        if figure is None:
            continue
        console.print(f"{name}: {figure.value:.4g}{'' if not figure.assumed else ' (assumed, not fitted)'}")
    console.print(f"MAPE {fit.mape:.1f}% over {len(fit.step_s)} steps; fitted profile: {args.out}")
    return ExitCode.OK


def quick_measurements(name: str, console: Console):
    """``calibrate --quick``: this machine's bandwidth and float32 peak (numpy), then the
    step times of an in-process vLLM engine (a child process: ``benchmarks.step_time
    --quick``, no Ray, no HTTP); returns the step-time file and the profile to fit, its
    measured figures replaced and ``fitted_on_cpu`` this CPU."""
    import subprocess

    from simulator.hardware import Figure, load_hardware
    from simulator.machine import cpu_model
    from simulator.measure_cpu import matmul_tflops, memory_bandwidth_gbps

    base, here = load_hardware(name), cpu_model()
    bandwidth, peak = memory_bandwidth_gbps(), matmul_tflops()
    console.print(f"{here}: {bandwidth:.1f} GB/s, {peak:.4f} float32 TFLOP/s; timing an in-process vLLM engine's steps")
    out = REPO / "results" / "step_times-cpu-quick.json"
    subprocess.run([sys.executable, "-m", "benchmarks.step_time", "--quick", "--out", str(out)], cwd=REPO, check=True)
    source = f"measured: python -m simulator calibrate --quick on {here} ({time.strftime('%Y-%m-%d')})"
    peaks = {**base.peak_tflops, "float32": Figure(value=round(peak, 4), source=source)}
    return out, base.model_copy(update={
        "memory_bandwidth_gbps": Figure(value=round(bandwidth, 1), source=source), "peak_tflops": peaks,
        "fitted_on_cpu": here, "description": f"{base.description} (refitted on {here})"})


def cmd_autoscale(args: argparse.Namespace, rest: list[str], console: Console) -> int:
    from serving.config.stack import AutoscalingSpec
    from simulator.replica_setup import replica_setup
    from simulator.autoscale_run import run_autoscale, stack_policy
    from simulator.autoscale_report import print_autoscale, write_autoscale

    stack = stack_policy(args.stack) if args.stack else None
    policy = stack.autoscaling if stack else AutoscalingSpec()
    if args.autoscale is None and stack is None:
        raise SimulationConfigError("autoscale needs --autoscale MIN..MAX or a --stack file with an autoscaling policy")
    low, high = args.autoscale or (policy.min_replicas, policy.max_replicas)
    args.model = args.model or (stack.model if stack and stack.model else "smollm2-135m-instruct")
    args.routing = args.routing or (stack.routing.value if stack else "least-loaded")
    args.max_in_flight = args.max_in_flight or (stack.max_in_flight if stack else None)
    args.replicas, args.autoscale, args.max_num_seqs, args.session_header = high, (low, high), None, False
    base = simulation_config(args)  # validates the cluster options (MAX replicas: the largest cluster run)
    replica_setup(base)
    policy = AutoscalingSpec.model_validate(policy.model_dump() | {"enabled": True, "min_replicas": low,
                                                                   "max_replicas": high})
    load_args = loadtest_parser().parse_args(["run", "--target", SIMULATED_TARGET, "--model", args.model,
                                              "--no-metrics", *rest])
    config = config_from_args(load_args)
    out = load_args.out or Path("results") / time.strftime("autoscale-%Y%m%d-%H%M%S")
    err = Console(stderr=True)
    err.print(f"[bold]simulator autoscale[/] {args.model} on {args.hardware}: {config.profile.kind} x "
              f"{config.workload.kind}, autoscaled {low}..{high} vs static "
              f"{','.join(map(str, args.static)) if args.static else f'{high} + the smallest meeting the SLO'}; "
              f"results in {out}")
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[now]}"),
                  TimeElapsedColumn(), console=err, disable=load_args.quiet, transient=True) as bar:
        tasks: dict[str, int] = {}

        def progress(name: str, t: float) -> None:
            if name not in tasks:
                tasks[name] = bar.add_task(name, total=config.duration_s, now="")
            bar.update(tasks[name], completed=t, now=f"{t:,.0f} s simulated")

        report = run_autoscale(config, base, policy, statics=args.static, progress=progress)
    write_autoscale(report, out)
    print_autoscale(report, console)
    console.print(f"simulated in {sum(r.wall_s for r in report.runs):.0f} s; results: {out}")
    return ExitCode.OK


def cmd_hardware(args: argparse.Namespace, console: Console) -> int:
    from simulator.hardware import hardware_names, load_hardware

    for name in hardware_names():
        profile = load_hardware(name)
        console.print(f"[bold]{name}[/]: {profile.description}")
        console.print(f"  assumed until calibrated: {', '.join(profile.assumptions()) or 'nothing'}")
    return ExitCode.OK


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args, rest = build_parser().parse_known_args(argv)
    if args.command == "run":
        return run_command(lambda a, console: cmd_run(a, rest, console), args)
    if args.command in ("autoscale", "replay"):
        if args.command == "replay":
            Console(stderr=True).print("[yellow]`simulator replay` is deprecated: use `simulator autoscale`[/]")
        return run_command(lambda a, console: cmd_autoscale(a, rest, console), args)
    if rest:
        build_parser().error(f"unrecognized arguments: {' '.join(rest)}")
    return run_command({"calibrate": cmd_calibrate, "hardware": cmd_hardware}[args.command], args)
