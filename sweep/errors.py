"""The sweep's branch of the load tester's exception tree (:mod:`loadtest.errors`).

Each class carries the exit code of the ``sweep`` command it ends
(:class:`loadtest.errors.ExitCode`)::

    LoadTestError                       (loadtest.errors)                    exit
    └── SweepError                      any other sweep failure                 3
        ├── SpecError                   also a loadtest ConfigError: a sweep    2
        │   │                           spec, price table or CLI override is invalid
        │   └── UnknownStrategyError    also a loadtest UnknownNameError;       2
        │                               lists valid names
        ├── ServingNotInstalledError    also a loadtest ConfigError: `sweep     2
        │                               run` without the serving extra (Ray, vLLM)
        ├── ResultsFolderError          the results folder or its sweep.json    3
        │                               is unusable
        ├── SweepAborted                a measurer asks the whole sweep to stop 3
        ├── ModelUnavailableError       the spec's model is not in the catalog  5
        │                               or not prepared (checked before Ray starts)
        └── NoIsolationError            --isolate-network: no loopback-only     6
                                        network namespace can be made

Errors of the serving stack (:mod:`serving.errors`) do not cross the seam: the
sweep catches them where it calls ``serving`` and raises one of these instead.
A measurer that fails on ONE candidate does not raise: it returns a
``MeasuredResult`` with status ``failed-to-deploy``, ``crashed`` or ``tool-error``.
Any other exception it lets escape is recorded as ``tool-error`` by the loop, which
goes on.
"""

from __future__ import annotations

from loadtest.errors import ConfigError, ExitCode, LoadTestError, UnknownNameError


class SweepError(LoadTestError):
    """Base of every error the sweep raises."""


class SpecError(SweepError, ConfigError):
    """A sweep spec, price table or override is invalid (the message names the file/key)."""


class UnknownStrategyError(SpecError, UnknownNameError):
    """A strategy name that is not registered; the message lists the valid names."""


class ServingNotInstalledError(SweepError, ConfigError):
    """``sweep run`` needs the serving extra (``pip install '.[cpu]'``); the message lists what is missing."""


class ResultsFolderError(SweepError):
    """The results folder cannot be used (not a folder, newer schema, unreadable report)."""


class SweepAborted(SweepError):
    """Raised by a measurer to stop the sweep; the loop writes a partial report first."""


class ModelUnavailableError(SweepError):
    """The spec's model is not in the model catalog, or its weights are not prepared."""

    exit_code = ExitCode.MODEL_UNAVAILABLE


class NoIsolationError(SweepError):
    """``--isolate-network`` cannot run the sweep in a loopback-only network namespace."""

    exit_code = ExitCode.NO_ISOLATION
