"""The simulator's branch of the load tester's exception tree (:mod:`loadtest.errors`).

Each class carries the exit code of the ``python -m simulator`` (``loadtest simulate``)
command it ends (:class:`loadtest.errors.ExitCode`)::

    LoadTestError                     (loadtest.errors)                       exit
    └── SimulatorError                any other simulator failure                3
        ├── SimulationConfigError     also a loadtest ConfigError: an unknown   2
        │                             hardware/model, a bad option or data file
        └── CalibrationError          a step-time file cannot be fitted          3
"""

from __future__ import annotations

from loadtest.errors import ConfigError, LoadTestError


class SimulatorError(LoadTestError):
    """Base of every error the simulator raises."""


class SimulationConfigError(SimulatorError, ConfigError):
    """An invalid option, hardware profile, model spec or step-time file (the message says which)."""


class CalibrationError(SimulatorError):
    """The step times cannot be fitted (too few points, nothing to fit)."""
