"""serveout's simulator: vLLM replicas (continuous batching, paged KV with prefix
caching, preemption; a calibrated step-time model) behind serveout's own router,
admission control and autoscaling policy, driven by the load tester's traffic.

The API the sweep and the planner call (docs/simulator.md):

- :class:`SimulationConfig` - the cluster (hardware, model, replicas, TP, routing, ...);
- :func:`simulate` ``(LoadTestConfig, SimulationConfig) -> SimulationResult`` - its
  ``summary`` is the load tester's :class:`~loadtest.analysis.summary.Summary`;
- :func:`write_simulation` - ``summary.json``, the reports and ``simulation.json``;
- :func:`replica_setup`, :class:`StepTimeModel`, :func:`load_hardware` - the parts.

Names are imported lazily, so importing :mod:`simulator` stays cheap.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "SimulationConfig": "simulator.config",
    "SimulationResult": "simulator.simulate",
    "StageFigures": "simulator.simulate",
    "simulate": "simulator.simulate",
    "write_simulation": "simulator.simulate",
    "ReplicaSetup": "simulator.engine",
    "replica_setup": "simulator.engine",
    "StepShape": "simulator.step_time",
    "StepTimeModel": "simulator.step_time",
    "HardwareProfile": "simulator.hardware",
    "load_hardware": "simulator.hardware",
    "hardware_names": "simulator.hardware",
    "SimulatorError": "simulator.errors",
    "SimulationConfigError": "simulator.errors",
    "CalibrationError": "simulator.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'simulator' has no attribute {name!r}")
    return getattr(import_module(module), name)


if TYPE_CHECKING:  # pragma: no cover
    from simulator.config import SimulationConfig
    from simulator.engine import ReplicaSetup, replica_setup
    from simulator.errors import CalibrationError, SimulationConfigError, SimulatorError
    from simulator.hardware import HardwareProfile, hardware_names, load_hardware
    from simulator.simulate import SimulationResult, StageFigures, simulate, write_simulation
    from simulator.step_time import StepShape, StepTimeModel
