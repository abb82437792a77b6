"""The sweep's branch of the load tester's exception tree (:mod:`loadtest.errors`).

::

    LoadTestError                       (loadtest.errors)
    └── SweepError
        ├── SpecError                   also a loadtest ConfigError: a sweep spec, price
        │   │                           table or CLI override is invalid
        │   └── UnknownStrategyError    also a loadtest UnknownNameError; lists valid names
        ├── ResultsFolderError          the results folder or its sweep.json is unusable
        └── SweepAborted                a measurer asks the whole sweep to stop

A measurer that fails on ONE candidate does not raise: it returns a
``MeasuredResult`` with status ``failed-to-deploy`` or ``crashed``. Any other
exception it lets escape is recorded as ``crashed`` by the loop, which goes on.
"""

from __future__ import annotations

from loadtest.errors import ConfigError, LoadTestError, UnknownNameError


class SweepError(LoadTestError):
    """Base of every error the sweep raises."""


class SpecError(SweepError, ConfigError):
    """A sweep spec, price table or override is invalid (the message names the file/key)."""


class UnknownStrategyError(SpecError, UnknownNameError):
    """A strategy name that is not registered; the message lists the valid names."""


class ResultsFolderError(SweepError):
    """The results folder cannot be used (not a folder, newer schema, unreadable report)."""


class SweepAborted(SweepError):
    """Raised by a measurer to stop the sweep; the loop writes a partial report first."""
