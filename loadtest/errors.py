"""The one exception tree of :mod:`loadtest` (and of :mod:`sweep`, which extends it),
and the exit codes of their commands.

Every error the load tester raises on purpose is a :class:`LoadTestError`; each class
names the exit code a command ends with when it escapes (:class:`ExitCode`). Failed
*requests* are not exceptions: they are recorded and counted by kind
(:class:`loadtest.analysis.records.ErrorKind`).
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum
from typing import ClassVar


class ExitCode(IntEnum):
    """Exit codes of ``loadtest`` and ``sweep`` (docs/loadtest.md, "Exit codes")."""

    OK = 0
    SLO_MISSED = 1  # a run missed an SLO; a sweep found no candidate meeting it
    USAGE = 2  # an invalid option, spec string, spec file or config value
    FAILED = 3  # the work could not be carried out (target unreachable, generator failed, ...)
    WORKER_LOST = 4  # a load-generator worker crashed or was lost: its records cannot be trusted
    MODEL_UNAVAILABLE = 5  # a sweep's model is not in the catalog or not prepared
    NO_ISOLATION = 6  # --isolate-network: no loopback-only network namespace can be made
    REGRESSION = 7  # loadtest compare --fail-on-regression: a run is worse than the baseline beyond noise
    INTERRUPTED = 130  # Ctrl-C


class LoadTestError(Exception):
    """Base of every loadtest (and sweep) error."""

    exit_code: ClassVar[ExitCode] = ExitCode.FAILED


class ConfigError(LoadTestError):
    """An option, spec string or config value is invalid."""

    exit_code = ExitCode.USAGE


class UnknownNameError(ConfigError):
    """A registered name (profile, workload, report format, ...) does not exist.

    The message lists the valid names.
    """

    def __init__(self, kind: str, name: str, valid: Iterable[str]) -> None:
        self.kind = kind
        self.name = name
        self.valid = tuple(sorted(valid))
        super().__init__(f"unknown {kind} {name!r}; valid: {', '.join(self.valid)}")


class SLOError(ConfigError):
    """An SLO specification cannot be parsed or cannot apply to this run."""


class WorkloadError(LoadTestError):
    """A workload cannot be built (missing tokenizer, bad prompt file, ...)."""


class ParseError(LoadTestError):
    """Malformed wire data (Prometheus text, SSE payload, JSONL record)."""


class TargetError(LoadTestError):
    """The target cannot be reached or does not serve the requested model."""


class GeneratorError(LoadTestError):
    """The load generator process failed or had to be killed."""


class WorkerError(GeneratorError):
    """A load-generator worker of a distributed run crashed, was lost or lost records."""

    exit_code = ExitCode.WORKER_LOST


class SummaryError(LoadTestError):
    """A summary file is missing, unreadable or of an unsupported schema version."""
