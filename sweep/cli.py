"""``sweep run``, ``sweep plan`` and ``sweep mix`` (formerly ``loadtest sweep`` / ``loadtest plan``).

    sweep run SPEC.yaml [--out DIR] [--set key=value ...] [--retry-failed]
    sweep run SPEC.yaml --simulate [--hardware NAME]      # no Ray: every candidate simulated
    sweep plan --results DIR [--traffic 4rps] [--headroom 0.1]   # or --spec SPEC --simulate
    sweep mix SPEC.yaml --traffic 40 [--hardware h200,b300]      # cheapest mix of GPU kinds (simulated)

``sweep`` owns a local Ray cluster for its duration (in a loopback-only network
namespace with ``--isolate-network``), measures the candidates the search proposes,
and writes ``sweep.json``, ``report.md`` and ``plots/`` into DIR after every trial.
Rerunning the same spec into the same DIR resumes; Ctrl-C leaves a valid partial report.
With ``--simulate`` the same sweep runs against the simulator (:mod:`sweep.measure.simulated`)
and every output is labelled simulated. ``run`` lives in :mod:`sweep.commands.run`, ``plan`` and
``mix`` in :mod:`sweep.commands.planning`.

Exit codes (:class:`loadtest.errors.ExitCode`; the classes in :mod:`sweep.errors`):
0 a configuration meets the SLO, 1 none does, 2 an invalid spec, price table,
override or option (or ``sweep run`` without the serving extra), 3 the sweep failed,
5 the spec's model is unknown or not prepared, 6 ``--isolate-network`` cannot
isolate, 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import sys

from loadtest.cli import run_command
from sweep.commands.planning import add_mix_arguments, add_plan_arguments, cmd_mix, cmd_plan
from sweep.commands.run import add_run_arguments, cmd_run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sweep", description=__doc__.splitlines()[0].replace("``", ""))
    sub = parser.add_subparsers(dest="command", required=True)
    running = sub.add_parser("run", help="deploy candidate configurations and find the cheapest meeting the SLO")
    add_run_arguments(running)
    planning = sub.add_parser("plan", help="the capacity model: traffic -> GPUs, when to add a replica, "
                                           "where more GPUs stop paying (measured or --simulate)")
    add_plan_arguments(planning)
    mixing = sub.add_parser("mix", help="the cheapest mix of GPU kinds for a traffic level (simulated, "
                                        "Melange-style)")
    add_mix_arguments(mixing)
    return parser


COMMANDS = {"run": cmd_run, "plan": cmd_plan, "mix": cmd_mix}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    args.argv = argv  # what --isolate-network runs again inside the namespace
    return run_command(COMMANDS[args.command], args)


if __name__ == "__main__":
    sys.exit(main())
