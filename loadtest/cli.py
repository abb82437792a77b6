"""``loadtest``: load-test any OpenAI-compatible endpoint, compare runs, score its answers.

Exit codes: :class:`loadtest.errors.ExitCode`. ``loadtest sweep`` and ``loadtest plan``
are deprecated aliases of ``sweep run`` and ``sweep plan``; they start ``python -m sweep``
as a separate program, so this package never imports the sweep or the serving stack.
``loadtest simulate`` starts ``python -m simulator run`` the same way.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from loadtest.errors import ConfigError, ExitCode, LoadTestError
from loadtest.generator.priority import PRIORITIES
from loadtest.quality import command as quality_command
from loadtest.units import parse_duration

DEFAULT_PROFILE = "concurrency:users=8"
DEFAULT_WORKLOAD = "random:input_len=256,output_len=128"

EXIT_OK, EXIT_SLO_FAILED, EXIT_USAGE, EXIT_FAILED, EXIT_WORKER_FAILED = (
    ExitCode.OK, ExitCode.SLO_MISSED, ExitCode.USAGE, ExitCode.FAILED, ExitCode.WORKER_LOST)

# The generator processes' scheduling (loadtest.generator.priority), for `run` and `worker`.
PRIORITY_OPTION = dict(choices=PRIORITIES, default="realtime",
                       help="the generator processes' CPU scheduling: real-time (round-robin, lowest priority) when the "
                            "OS allows it: root or CAP_SYS_NICE on Linux; normal otherwise (default: %(default)s)")

# Deprecated `loadtest` commands -> the `sweep` command that replaced them.
SWEEP_ALIASES = {"sweep": "run", "plan": "plan"}


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loadtest", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a load test against an OpenAI-compatible endpoint")
    t = run.add_argument_group("target")
    t.add_argument("--target", default="http://127.0.0.1:8000", help="base URL (default: %(default)s)")
    t.add_argument("--model", default="smollm2-135m-instruct", help="served model name (default: %(default)s)")
    t.add_argument("--model-mix", default=None, metavar="M=W,...|zipf:S[:N]",
                   help="spread sessions over served models (a base and its LoRA adapters): weights, or a Zipf "
                        "law over the models GET /v1/models lists (the first N); figures per model in the reports")
    t.add_argument("--tenant", action="append", default=[], metavar="name=N,key=K|env:VAR[,class=C][,weight=W][,workload=W][,SLO]",
                   help="a tenant sending a weighted share of the sessions with its own key, priority class, "
                        "SLO and requests (repeat for each); figures and verdicts per tenant and per class in the "
                        "reports")
    t.add_argument("--tenants", type=Path, default=None, metavar="FILE",
                   help="tenants from a YAML or JSON file (a list of name, key, class, weight, slo, workload)")
    t.add_argument("--endpoint", choices=("chat", "completions"), default="chat")
    t.add_argument("--no-stream", action="store_true", help="non-streamed requests (no TTFT/ITL)")
    t.add_argument("--no-exact-output", action="store_true", help="do not send ignore_eos (answers may stop early)")
    t.add_argument("--temperature", type=float, default=None)
    t.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"), help="bearer token (default: $OPENAI_API_KEY)")
    t.add_argument("--timeout", type=_duration, default=300.0, help="per-request timeout (default: 300s)")
    t.add_argument("--metrics-url", default=None, help="default: TARGET/metrics")
    t.add_argument("--no-metrics", action="store_true", help="do not scrape /metrics")
    t.add_argument("--scrape-interval", type=_duration, default=2.0)
    t.add_argument("--extra-body", default=None, metavar="JSON",
                   help="a JSON object (or @FILE) of fields added to every request body, e.g. "
                        "'{\"top_p\": 0.9, \"priority\": 1}'")
    t.add_argument("--gpu-metrics", default=None, metavar="URL,...|nvml",
                   help="GPU telemetry: DCGM exporter /metrics URLs (comma-separated), or nvml")
    t.add_argument("--gpu-interval", type=_duration, default=1.0, help="GPU sampling interval (default 1s)")
    load = run.add_argument_group("load")
    load.add_argument("--profile", default=DEFAULT_PROFILE, help="NAME:key=value,... (default: %(default)s; see `loadtest list`)")
    load.add_argument("--workload", default=None,
                      help=f"NAME:key=value,... (default: {DEFAULT_WORKLOAD}; a replay's own trace)")
    load.add_argument("--duration", type=_duration, default=None, help="load time per stage, e.g. 60s (default 60s unless --requests)")
    load.add_argument("--requests", type=int, default=None, help="request count per stage")
    load.add_argument("--warmup", type=_duration, default=0.0, help="excluded from figures (start of the load)")
    load.add_argument("--cooldown", type=_duration, default=0.0, help="excluded from figures (end of the load)")
    load.add_argument("--time-limit", type=_duration, default=None, help="hard bound per stage (default: duration + drain + 5s)")
    load.add_argument("--drain-timeout", type=_duration, default=None, help="wait for in-flight requests after the load")
    load.add_argument("--slo", default=None, help="e.g. ttft_p95=500ms,tpot_p95=50ms,e2e_p95=10s,error_rate=1%%")
    load.add_argument("--seed", type=int, default=0)
    load.add_argument("--tokenizer", type=Path, default=None, help="local HF folder (default: $SERVEOUT_HOME/models/MODEL)")
    load.add_argument("--prompt-pool", type=int, default=None, help="sessions prepared per stage")
    load.add_argument("--cancel", default=None, metavar="FRACTION",
                      help="client cancellation: abandon this share of requests (e.g. 10%%) --cancel-after sending")
    load.add_argument("--cancel-after", type=_duration, default=1.0, help="(default 1s)")
    g = run.add_argument_group("generator (see docs/loadtest.md, 'Load generation past one core')")
    g.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                   help="local worker processes (default: one per core, %(default)s here; 1: a single process)")
    g.add_argument("--expect-workers", type=int, default=None,
                   help="workers to wait for in all, local plus remote (`loadtest worker`); default --workers")
    g.add_argument("--master-bind", default=None, metavar="HOST:PORT",
                   help="where the master listens for workers (default: 127.0.0.1, any free port)")
    g.add_argument("--generator-priority", **PRIORITY_OPTION)
    out = run.add_argument_group("output")
    out.add_argument("--out", type=Path, default=None, help="results folder (default: results/loadtest-<time>)")
    out.add_argument("--reports", default=None, help="comma-separated report formats (default: all)")
    out.add_argument("--label", default=None)
    out.add_argument("--quiet", action="store_true", help="no live progress")

    compare = sub.add_parser("compare", help="compare runs side by side (ratios to the first, with noise bands)")
    compare.add_argument("runs", type=Path, nargs="+", metavar="RUN", help="results folders; the first is the baseline")
    compare.add_argument("--fail-on-regression", action="store_true",
                         help=f"exit {int(ExitCode.REGRESSION)} when a run is worse than the baseline beyond noise")
    compare.add_argument("--figures", default=None,
                         help="comma-separated figure names the regression gate looks at (default: all), "
                              "e.g. 'TTFT p95,output tok/s'")

    report = sub.add_parser("report", help="rewrite the reports of a results folder")
    report.add_argument("run", type=Path)
    report.add_argument("--reports", default=None)

    worker = sub.add_parser("worker", help="serve the stages of a `loadtest run` master on another machine")
    worker.add_argument("--master", required=True, metavar="HOST:PORT", help="the master's --master-bind address")
    worker.add_argument("--processes", type=int, default=os.cpu_count() or 1,
                        help="worker processes (default: one per core, %(default)s here)")
    worker.add_argument("--idle-timeout", type=_duration, default=600.0,
                        help="stop when no master answers for this long (default: 10m)")
    worker.add_argument("--generator-priority", **PRIORITY_OPTION)

    quality_command.add_parser(sub, _duration)

    sub.add_parser("simulate", help="simulate a load test against vLLM replicas on given hardware "
                   "(`python -m simulator run`; see docs/simulator.md)", add_help=False)
    for alias, command in SWEEP_ALIASES.items():
        sub.add_parser(alias, help=f"deprecated: use `sweep {command}`", add_help=False)
    listing = sub.add_parser("list", help="list profiles, workloads, report formats and prompt sets")
    listing.add_argument("what", nargs="?", choices=("profiles", "workloads", "reports", "prompt-sets"))
    return parser


def config_from_args(args: argparse.Namespace):
    """The typed config of ``loadtest run``'s options."""
    from loadtest.analysis.slo import parse_slos
    from loadtest.config import CancelConfig, GeneratorConfig, GpuConfig, LoadTestConfig, TargetConfig, parse_host_port
    from loadtest.profiles import ReplayProfile, parse_profile
    from loadtest.workloads import parse_workload
    from loadtest.workloads.model_mix import parse_model_mix
    from loadtest.workloads.tenant_mix import parse_tenants

    profile = parse_profile(args.profile)
    replay = isinstance(profile, ReplayProfile)
    workload = args.workload or (None if replay else DEFAULT_WORKLOAD)
    duration = args.duration
    if duration is None and not args.requests:
        # a replay lasts its trace: the load stops a second after the last arrival
        duration = math.floor(profile.plan().span_s) + 1.0 if replay else 60.0
    try:
        target = TargetConfig(
            url=args.target,
            model=args.model,
            endpoint=args.endpoint,
            stream=not args.no_stream,
            exact_output=not args.no_exact_output,
            temperature=args.temperature,
            api_key=args.api_key,
            request_timeout_s=args.timeout,
            metrics_url=args.metrics_url,
            scrape_metrics=not args.no_metrics,
            scrape_interval_s=args.scrape_interval,
            extra_body=_json_object(args.extra_body, "--extra-body") if args.extra_body else {},
        )
        host, port = parse_host_port(args.master_bind) if args.master_bind else ("127.0.0.1", 0)
        generator = GeneratorConfig(workers=args.workers, expect_workers=args.expect_workers, master_host=host,
                                    master_port=port, priority=args.generator_priority)  # fmt: skip
        return LoadTestConfig(
            target=target,
            profile=profile,
            workload=parse_workload(workload) if workload else None,
            duration_s=duration,
            max_requests=args.requests,
            warmup_s=args.warmup,
            cooldown_s=args.cooldown,
            time_limit_s=args.time_limit,
            drain_timeout_s=args.drain_timeout,
            slos=parse_slos(args.slo),
            seed=args.seed,
            tokenizer=args.tokenizer,
            prompt_pool=args.prompt_pool,
            label=args.label,
            generator=generator,
            cancel=CancelConfig(fraction=args.cancel, after_s=args.cancel_after) if args.cancel else None,
            gpu=_gpu(args.gpu_metrics, args.gpu_interval, GpuConfig) if args.gpu_metrics else None,
            model_mix=parse_model_mix(args.model_mix) if args.model_mix is not None else None,
            tenants=parse_tenants(args.tenant, args.tenants),
        )
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'config'}: {e['msg']}" for e in exc.errors())
        raise ConfigError(problems) from None


def _json_object(text: str, option: str) -> dict:
    """A JSON object from ``text`` or, for ``@PATH``, from that file."""
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{option}: cannot read {text[1:]}: {exc.strerror}") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{option}: not JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{option}: expected a JSON object {{...}}, got {type(value).__name__}")
    return value


def _gpu(text: str, interval_s: float, cls):
    sources = [p.strip() for p in text.split(",") if p.strip()]
    return cls(dcgm_urls=tuple(s for s in sources if s != "nvml"), nvml="nvml" in sources, interval_s=interval_s)


def _reports(text: str | None) -> tuple[str, ...] | None:
    return None if not text else tuple(p.strip() for p in text.split(",") if p.strip())


def cmd_run(args: argparse.Namespace, console: Console) -> int:
    from loadtest.reports import report_registry
    from loadtest.reports.table import summary_renderable
    from loadtest.run.orchestrator import RunOptions, run_load_test

    config = config_from_args(args)
    reports = _reports(args.reports)
    registry = report_registry()
    for name in reports or ():
        registry.get(name)  # fail on an unknown format before the run, not after it
    out = args.out or Path("results") / time.strftime("loadtest-%Y%m%d-%H%M%S")
    err = Console(stderr=True)
    err.print(f"[bold]loadtest[/] {config.profile.kind} x {config.workload.kind} -> {config.target.url} ({config.target.model}); results in {out}")
    summary = run_load_test(config, RunOptions(out_dir=out, reports=reports, progress=not args.quiet, console=err))
    console.print(summary_renderable(summary))
    console.print(f"results: {out}")
    return EXIT_SLO_FAILED if summary.passed is False else EXIT_OK


def cmd_worker(args: argparse.Namespace, console: Console) -> int:
    from loadtest.config import parse_host_port
    from loadtest.generator.child import serve_master

    parse_host_port(args.master)
    if args.processes < 1:
        raise ConfigError("--processes must be >= 1")
    err = Console(stderr=True)
    err.print(f"[bold]loadtest worker[/]: {args.processes} process(es) serving {args.master} (Ctrl-C to stop)")
    served = serve_master(args.master, args.processes, connect_timeout_s=args.idle_timeout,
                          priority=args.generator_priority, log=err.print)  # fmt: skip
    console.print(f"served {served} worker stage(s)")
    return EXIT_OK


def cmd_compare(args: argparse.Namespace, console: Console) -> int:
    from loadtest.analysis.summary import load_summary
    from loadtest.reports.compare import compare_runs, regressions, runs_table

    if len(args.runs) < 2:
        raise ConfigError("compare needs at least two runs (the first is the baseline)")
    summaries = [load_summary(run) for run in args.runs]
    labels = [str(run) for run in args.runs]
    per_run = compare_runs(summaries)
    console.print(runs_table(per_run, labels))
    for label, s in zip(labels, summaries):
        for warning in s.warnings:
            console.print(f"[red]{label}: {warning}[/]")
    figures = None if not args.figures else {f.strip() for f in args.figures.split(",") if f.strip()}
    known = {row.figure.name.lower() for row in per_run[0]}
    if figures and (unknown := sorted(f for f in figures if f.lower() not in known)):
        raise ConfigError(f"--figures: unknown figure(s) {', '.join(unknown)}; "
                          f"valid: {', '.join(row.figure.name for row in per_run[0])}")
    found = regressions(per_run, labels, figures)
    for regression in found:
        console.print(f"[bold red]regression[/] {regression.describe()}")
    if args.fail_on_regression and found:
        return int(ExitCode.REGRESSION)
    return EXIT_OK


def cmd_report(args: argparse.Namespace, console: Console) -> int:
    from loadtest.analysis.records import read_records
    from loadtest.analysis.summary import load_summary
    from loadtest.reports import write_reports

    summary = load_summary(args.run)
    folder = args.run if args.run.is_dir() else args.run.parent
    records = read_records(folder / "records.jsonl")
    for path in write_reports(summary, records, folder, _reports(args.reports)):
        console.print(str(path))
    return EXIT_OK


def cmd_list(args: argparse.Namespace, console: Console) -> int:
    from loadtest.profiles import profile_registry
    from loadtest.reports import report_registry
    from loadtest.specs import describe
    from loadtest.workloads import bundled_sets, workload_registry

    if args.what in (None, "profiles", "workloads"):
        for title, registry in (("profiles", profile_registry()), ("workloads", workload_registry())):
            if args.what not in (None, title):
                continue
            table = Table(title=title, title_justify="left")
            for col in ("name", "parameters (defaults)", "what"):
                table.add_column(col)
            for row in describe(registry):
                table.add_row(*row)
            console.print(table)
    if args.what in (None, "reports"):
        console.print("report formats: " + ", ".join(report_registry().names()))
    if args.what in (None, "prompt-sets"):
        console.print("prompt sets: " + ", ".join(bundled_sets()))
    return EXIT_OK


COMMANDS = {"run": cmd_run, "compare": cmd_compare, "report": cmd_report, "list": cmd_list,
            "worker": cmd_worker, "quality": quality_command.cmd_quality}


def forward_to_sweep(alias: str, args: list[str]) -> int:
    """``loadtest sweep|plan ARGS`` (deprecated): ``sweep run|plan ARGS``, as a child program."""
    command = SWEEP_ALIASES[alias]
    Console(stderr=True).print(f"[yellow]`loadtest {alias}` is deprecated: use `sweep {command}`[/]")
    child = subprocess.Popen([sys.executable, "-m", "sweep", command, *args])
    try:
        return child.wait()
    except KeyboardInterrupt:  # the child got the same Ctrl-C and writes its partial report
        return child.wait()


def forward_to_simulator(args: list[str]) -> int:
    """``loadtest simulate ARGS``: ``python -m simulator run ARGS``, as a child program."""
    child = subprocess.Popen([sys.executable, "-m", "simulator", "run", *args])
    try:
        return child.wait()
    except KeyboardInterrupt:
        return child.wait()


def run_command(command: Callable[[argparse.Namespace, Console], int], args: argparse.Namespace) -> int:
    """Run one command; an escaping :class:`LoadTestError` becomes one line and its exit code."""
    # Piped or logged output: wide enough that result tables are not cut to 80 columns.
    console = Console() if sys.stdout.isatty() else Console(width=160)
    try:
        return command(args, console)
    except LoadTestError as exc:
        label = "error" if exc.exit_code == ExitCode.USAGE else "failed"
        Console(stderr=True, soft_wrap=True).print(f"[red]{label}:[/] {escape(str(exc))}", highlight=False)
        return exc.exit_code
    except KeyboardInterrupt:
        Console(stderr=True).print("[red]interrupted[/]")
        return ExitCode.INTERRUPTED


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in SWEEP_ALIASES:
        return forward_to_sweep(argv[0], argv[1:])
    if argv and argv[0] == "simulate":
        return forward_to_simulator(argv[1:])
    args = build_parser().parse_args(argv)
    return run_command(COMMANDS[args.command], args)


if __name__ == "__main__":
    sys.exit(main())
