"""Load-test clients run as child programs to their end, their CPU sampled meanwhile:
vLLM's own benchmark (``vllm.benchmarks.serve``, run by :data:`VLLM_BENCH`) and
``loadtest run``, measured side by side."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from benchmarks.common.cpu import Sampler
from benchmarks.common.servers import REPO

VLLM_BENCH = """
import argparse, json, sys
from vllm.benchmarks.serve import add_cli_args, main
parser = argparse.ArgumentParser()
add_cli_args(parser)
args = parser.parse_args(sys.argv[1:])
main(args)
"""  # python -c VLLM_BENCH <bench serve's flags>


def vllm_bench_command(*flags: str) -> list[str]:
    """The command running vLLM's ``bench serve`` with ``flags``."""
    return [sys.executable, "-c", VLLM_BENCH, *flags]


def clean_env() -> dict[str, str]:
    """This environment without ``LD_PRELOAD``, offline, the repository importable."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env["HF_HUB_OFFLINE"] = "1"
    return env


def run_measured(command: list[str], *, cwd: Path, log: Path | None) -> Sampler:
    """Run ``command`` to its end (output in ``log``), sampling the CPU of its process
    tree; ``SystemExit`` when it fails."""
    handle = log.open("w") if log else subprocess.DEVNULL
    process = subprocess.Popen(command, cwd=cwd, env=clean_env(), stdout=handle, stderr=subprocess.STDOUT)
    sampler = Sampler.of_tree(process.pid)
    code = process.wait()
    sampler.stop()
    if code != 0:
        raise SystemExit(f"{command[:4]} failed with exit code {code}" + (f"; see {log}" if log else ""))
    return sampler
