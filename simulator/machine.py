"""Which machine the simulator runs on, against the one a CPU profile was fitted on.

A CPU profile's constants hold for the CPU model they were fitted on (the same runs
moved 0.52x between an AMD and an Intel box of this project's kind): ``fitted_on_cpu``
names it, and :func:`cpu_mismatch` is the warning a simulation carries when it runs
elsewhere (refit with ``python -m simulator calibrate --quick``).
"""

from __future__ import annotations

import platform
from pathlib import Path

from simulator.hardware import HardwareKind, HardwareProfile


def cpu_model() -> str:
    """This machine's CPU model name (``/proc/cpuinfo``)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def cpu_mismatch(profile: HardwareProfile, here: str | None = None) -> str | None:
    """A warning when a CPU profile was fitted on another CPU model than this one."""
    if profile.kind is not HardwareKind.CPU or not profile.fitted_on_cpu:
        return None
    here = here or cpu_model()
    if profile.fitted_on_cpu.lower() in here.lower() or here.lower() in profile.fitted_on_cpu.lower():
        return None
    return (f"hardware profile {profile.name!r} was fitted on {profile.fitted_on_cpu!r}, this machine is {here!r}: "
            f"its figures may be far off here (refit: python -m simulator calibrate --quick)")
