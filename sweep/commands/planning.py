"""``sweep plan``: the capacity model of a sweep (measured, or simulated with ``--simulate``).

    sweep plan --results DIR [--traffic 4rps] [--headroom 0.1] [--min-efficiency 0.8]
    sweep plan --spec SPEC --simulate [--hardware NAME] [--out DIR] [--traffic ...]

Prints, per shape, what each replica count carries and the traffic above which the
next replica is needed ("add a replica at X req/s"), the scaling and marginal
efficiencies and the first replica that stops paying; then the traffic -> GPUs curve of
the cheapest shape, and with ``--traffic`` the plan for that traffic. Writes
``capacity_curve.png`` (``--plot``, default the results folder's ``plots/``).
With ``--spec SPEC --simulate`` the capacities come from a simulated sweep of SPEC
(run into ``--out``, or reused from it when already there).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from loadtest.errors import ConfigError, ExitCode

if TYPE_CHECKING:  # imported by the command that uses them (the CLI starts fast)
    from sweep.capacity.curve import CurvePoint, ReplicaStep
    from sweep.capacity.model import ShapeCapacity
    from sweep.report.document import SweepReport


def parse_rps(text: str, flag: str = "--traffic") -> float:
    """``4``, ``4rps`` or ``4 req/s`` as req/s (> 0); :class:`ConfigError` otherwise."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(rps|req/s)?\s*", text)
    if not match or float(match.group(1)) <= 0:
        raise ConfigError(f"{flag} wants requests per second above 0, e.g. 4 or 4rps, not {text!r}")
    return float(match.group(1))


def add_plan_arguments(planning: argparse.ArgumentParser) -> None:
    source = planning.add_mutually_exclusive_group(required=True)
    source.add_argument("--results", type=Path, help="a sweep results folder (measured or simulated)")
    source.add_argument("--spec", type=Path, help="with --simulate: a sweep spec to simulate first")
    planning.add_argument("--simulate", action="store_true", help="capacities from a simulated sweep of --spec")
    planning.add_argument("--hardware", default=None, help="with --simulate: a simulator hardware profile")
    planning.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a spec field")
    planning.add_argument("--out", type=Path, default=None,
                          help="with --spec: the simulated sweep's folder (default: results/sweep-<name>-simulated)")
    planning.add_argument("--traffic", default=None, help="requests per second to plan for, e.g. 4 or 4rps")
    planning.add_argument("--headroom", type=float, default=None,
                          help="share of capacity kept spare, in [0, 1) (default: 0.1, as in report.md)")
    planning.add_argument("--min-efficiency", type=float, default=None,
                          help="an added replica adding less than this share of one replica's capacity "
                               "stops paying (default: 0.8)")
    planning.add_argument("--plot", type=Path, default=None,
                          help="the PNG to write (default: RESULTS/plots/capacity_curve.png)")


def plan_report(args: argparse.Namespace, console: Console) -> tuple[SweepReport, Path]:
    """The report ``sweep plan`` reads: ``--results``', or a simulated sweep of ``--spec``."""
    from sweep.report.folder import ResultsFolder

    if args.results is not None:
        if args.simulate or args.hardware:
            raise ConfigError("--simulate and --hardware go with --spec SPEC (to simulate it), not --results")
        return ResultsFolder(args.results).read_report(), args.results
    if not args.simulate:
        raise ConfigError("--spec plans from a simulated sweep: add --simulate (or plan --results DIR)")
    from serving.model_store import models_dir
    from sweep.measure.models import model_catalog
    from sweep.search.simulated_sweep import run_simulated_sweep
    from sweep.spec.files import load_price_table, load_sweep_spec
    from sweep.spec.sweep_spec import as_simulated

    spec = as_simulated(load_sweep_spec(args.spec, args.set), args.hardware)
    out = args.out or Path("results") / f"sweep-{spec.name}-simulated"
    with console.status(f"simulated sweep of {spec.name} into {out} (reused if already there)") as status:
        report = run_simulated_sweep(spec, load_price_table(spec.prices), ResultsFolder(out),
                                     model_catalog(models_dir()), models_dir(),
                                     on_phase=lambda phase: status.update(f"simulated sweep of {spec.name}: {phase}"))
    if args.traffic is not None:
        report = simulate_plan_counts(report, spec, parse_rps(args.traffic), args.headroom, console)
    return report, out


def simulate_plan_counts(report: SweepReport, spec, traffic: float, headroom: float | None,
                         console: Console) -> SweepReport:
    """The report with every replica count the plan for ``traffic`` needs simulated
    (:func:`sweep.search.simulated_sweep.with_simulated_counts`), not extrapolated."""
    from serving.model_store import models_dir
    from sweep.capacity.model import DEFAULT_HEADROOM
    from sweep.measure.models import model_catalog
    from sweep.search.simulated_sweep import with_simulated_counts
    from sweep.spec.files import load_price_table

    prices, catalog = load_price_table(spec.prices), model_catalog(models_dir())
    spare = DEFAULT_HEADROOM if headroom is None else headroom
    with console.status("simulating the replica counts the plan needs") as status:
        capacity = tuple(
            with_simulated_counts(spec, prices, m, traffic, spare, catalog, models_dir(),
                                  on_count=lambda shape, n: status.update(f"simulating {n} x {shape}"))
            for m in report.capacity)
    return report.model_copy(update={"capacity": capacity})


def _fmt(value: float | int | None, form: str = "{:.3g}") -> str:
    return "-" if value is None else form.format(value)


def steps_table(steps: tuple[ReplicaStep, ...], currency: str, title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for col in ("replicas", "GPUs", f"{currency}/h", "carries (req/s)", "add a replica above (req/s)",
                "scaling eff.", "marginal eff.", "pays", "basis"):
        table.add_column(col)
    for s in steps:
        table.add_row(str(s.replicas), str(s.accelerators), f"{s.cost_per_hour:.2f}", _fmt(s.capacity_rps),
                      _fmt(s.add_next_above_rps), _fmt(s.scaling_efficiency, "{:.2f}"),
                      _fmt(s.marginal_efficiency, "{:.2f}"), "yes" if s.pays else "[red]no[/]", s.basis)
    return table


def curve_table(curve: tuple[CurvePoint, ...], currency: str, caption: str | None) -> Table:
    table = Table(title="traffic -> GPUs (cheapest shape meeting the SLO)", title_justify="left", caption=caption)
    for col in ("traffic (req/s)", "shape", "replicas", "GPUs", f"{currency}/h"):
        table.add_column(col)
    for p in curve:
        table.add_row(f"{p.from_rps:.3g} - {p.to_rps:.3g}", p.shape_id, str(p.replicas), str(p.accelerators),
                      f"{p.cost_per_hour:.2f}")
    return table


def traffic_table(models: tuple[ShapeCapacity, ...], traffic: float, headroom: float, report: SweepReport) -> Table:
    from sweep.capacity.model import capacity_plan

    currency = report.prices.currency
    table = Table(title=f"{traffic:g} req/s of {report.spec.model} ({report.spec.name}), "
                        f"{headroom:.0%} of capacity kept spare", title_justify="left")
    table.add_column("shape", no_wrap=True)
    for col in ("replicas", "accelerators", f"{currency}/h", f"{currency} / M output tok",
                "carries (req/s)", "add a replica above (req/s)", "accelerators then", "basis"):
        table.add_column(col)
    for row in capacity_plan(models, traffic, headroom):
        table.add_row(row.shape_id, _fmt(row.replicas, "{}"), _fmt(row.accelerators, "{}"),
                      _fmt(row.cost_per_hour, "{:.3f}"), _fmt(row.cost_per_million_output_tokens, "{:.3f}"),
                      _fmt(row.capacity_rps), _fmt(row.next_replica_at_rps),
                      "budget full" if row.feasible and row.next_accelerators is None
                      else _fmt(row.next_accelerators, "{}"),
                      row.reason)
    return table


def cmd_plan(args: argparse.Namespace, console: Console) -> int:
    from sweep.capacity.curve import DEFAULT_MIN_EFFICIENCY, replica_steps, stops_paying_at, traffic_curve
    from sweep.capacity.model import DEFAULT_HEADROOM
    from sweep.capacity.plot import capacity_curve_png
    from sweep.spec.sweep_spec import simulated_label

    traffic = None if args.traffic is None else parse_rps(args.traffic)
    headroom = DEFAULT_HEADROOM if args.headroom is None else args.headroom
    if not 0.0 <= headroom < 1.0:
        raise ConfigError(f"--headroom is the share of capacity kept spare, in [0, 1), not {headroom:g}")
    min_efficiency = DEFAULT_MIN_EFFICIENCY if args.min_efficiency is None else args.min_efficiency
    if not 0.0 < min_efficiency <= 1.0:
        raise ConfigError(f"--min-efficiency is a share of one replica's capacity, in (0, 1], not {min_efficiency:g}")
    report, folder = plan_report(args, console)
    if not report.capacity:
        raise ConfigError(f"{folder} holds no capacity measurements yet (no shape met the SLO)")
    label = simulated_label(report.spec)
    currency = report.prices.currency
    steps = {m.shape.id: replica_steps(m, headroom, min_efficiency) for m in report.capacity}
    for shape_id, rows in steps.items():
        console.print(steps_table(rows, currency, f"{'SIMULATED: ' if label else ''}{shape_id}: "
                                                  f"{headroom:.0%} of capacity kept spare"))
        stop = stops_paying_at(rows)
        console.print(f"  {shape_id}: " + ("every added replica pays (marginal efficiency >= "
                                           f"{min_efficiency:g})" if stop is None else
                                           f"more GPUs stop paying at replica {stop.replicas} ({stop.accelerators} "
                                           f"GPUs): it adds {stop.marginal_efficiency:.0%} of one replica"))
    curve = traffic_curve(report.capacity, headroom)
    console.print(curve_table(curve, currency, "simulated, not measured" if label else None))
    if traffic is not None:
        console.print(traffic_table(report.capacity, traffic, headroom, report))
        if label:
            from simulator.accuracy import band_for, capacity_flag
            from sweep.capacity.model import capacity_plan

            band = band_for(report.spec.hardware)
            for row in capacity_plan(report.capacity, traffic, headroom):
                if flag := capacity_flag(traffic, row.next_replica_at_rps, band):
                    console.print(f"[yellow]{row.shape_id}, near a step:[/] {flag}")
    plot = args.plot or folder / "plots" / "capacity_curve.png"
    title = f"{'SIMULATED: ' if label else ''}{report.spec.name}, {headroom:.0%} headroom"
    capacity_curve_png(curve, steps, min_efficiency, title, plot)
    if label:
        console.print(f"[bold yellow]{label}[/]")
    console.print(f"plot: {plot}")
    return ExitCode.OK


def add_mix_arguments(mixing: argparse.ArgumentParser) -> None:
    mixing.add_argument("spec", type=Path, help="sweep spec YAML: model, traffic shape, SLO, TP sizes, prices")
    mixing.add_argument("--traffic", required=True, help="requests per second to carry, e.g. 40 or 40rps")
    mixing.add_argument("--hardware", default="h200,b300",
                        help="GPU kinds to mix, comma-separated (simulator profiles priced in the price table; "
                             "default: %(default)s)")
    mixing.add_argument("--headroom", type=float, default=None, help="share of capacity kept spare (default: 0.1)")
    mixing.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a spec field")


def cmd_mix(args: argparse.Namespace, console: Console) -> int:
    """``sweep mix``: simulate one replica of every GPU kind x TP size for its capacity at
    the SLO, then solve for the cheapest mix carrying the traffic (:mod:`sweep.capacity.mix`)."""
    import time

    from serving.config.model_spec import AcceleratorKind
    from serving.model_store import models_dir
    from sweep.capacity.mix import ReplicaType, cheapest_mix, cheapest_single_type
    from sweep.capacity.model import DEFAULT_HEADROOM
    from sweep.measure.models import model_catalog
    from sweep.measure.simulated import check_simulable
    from sweep.search.simulated_sweep import replica_capacity
    from sweep.spec.files import load_price_table, load_sweep_spec
    from sweep.spec.space import SearchSpace
    from sweep.spec.sweep_spec import as_simulated

    started = time.monotonic()
    traffic = parse_rps(args.traffic)
    headroom = DEFAULT_HEADROOM if args.headroom is None else args.headroom
    if not 0.0 <= headroom < 1.0:
        raise ConfigError(f"--headroom is the share of capacity kept spare, in [0, 1), not {headroom:g}")
    kinds = [k.strip() for k in args.hardware.split(",") if k.strip()]
    valid = {k.value for k in AcceleratorKind}
    if not kinds or any(k not in valid for k in kinds):
        raise ConfigError(f"--hardware wants GPU kinds among {', '.join(sorted(valid))}, not {args.hardware!r}")
    base = load_sweep_spec(args.spec, [*args.set, f"traffic.profile.rate_rps={traffic}"])
    prices = load_price_table(base.prices)
    catalog = model_catalog(models_dir())
    types, notes = [], []
    with console.status("simulating one replica of each type") as status:
        for kind in kinds:
            spec = as_simulated(base, kind).model_copy(
                update={"budget": base.budget.model_copy(update={"accelerator": AcceleratorKind(kind)})})
            check_simulable(spec, catalog)
            price = prices.hourly(AcceleratorKind(kind))
            for shape in SearchSpace(spec, prices).shapes:
                name = f"{kind}-{shape.id}"
                status.update(f"simulating one {name} replica up to its capacity")
                capacity, how = replica_capacity(spec, prices, shape, catalog, models_dir())
                notes.append((name, capacity, how))
                if capacity is not None:
                    per_replica = shape.tp * spec.budget.accelerators_per_rank
                    types.append(ReplicaType(name=name, accelerators=per_replica,
                                             cost_per_hour=per_replica * price, capacity_rps=capacity))
    table = Table(title=f"SIMULATED replica types of {base.model}: capacity at the SLO", title_justify="left")
    for col in ("type", "GPUs", f"{prices.currency}/h", "capacity (req/s)", f"{prices.currency}/h per req/s", "how"):
        table.add_column(col)
    for name, capacity, how in notes:
        t = next((t for t in types if t.name == name), None)
        table.add_row(name, "-" if t is None else str(t.accelerators), "-" if t is None else f"{t.cost_per_hour:.2f}",
                      _fmt(capacity), "-" if t is None else f"{t.cost_per_hour / t.capacity_rps:.2f}", how)
    console.print(table)
    mix, alone = cheapest_mix(types, traffic, headroom), cheapest_single_type(types, traffic, headroom)
    if mix is None or alone is None:
        raise ConfigError(f"no replica type meets the SLO in simulation; nothing carries {traffic:g} req/s")
    answer = Table(title=f"SIMULATED cheapest mix for {traffic:g} req/s ({headroom:.0%} spare)", title_justify="left",
                   caption="simulated, not measured")
    for col in ("plan", "replicas", "GPUs", f"{prices.currency}/h", "carries (req/s)"):
        answer.add_column(col)
    for label, m in (("mix", mix), ("best single type", alone)):
        answer.add_row(f"{label}: " + " + ".join(f"{n} x {name}" for name, n in m.counts.items()), str(m.replicas),
                       str(m.accelerators), f"{m.cost_per_hour:.2f}", f"{m.capacity_rps:.3g}")
    console.print(answer)
    saving = 1 - mix.cost_per_hour / alone.cost_per_hour
    console.print(f"the mix saves {saving:.0%} against the best single type; capacities assumed to add up behind "
                  f"one least-loaded router")
    console.print(f"[bold yellow]SIMULATED, not measured: capacities from the simulator on {', '.join(kinds)} "
                  "(GPU constants assumed until calibrated, docs/simulator.md)[/]")
    console.print(f"answered in {time.monotonic() - started:.1f} s wall time")
    return ExitCode.OK
