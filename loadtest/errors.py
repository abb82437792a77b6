"""The one exception tree of :mod:`loadtest`.

Every error the load tester raises on purpose is a :class:`LoadTestError`.
Failed *requests* are not exceptions: they are recorded and counted by kind
(:class:`loadtest.records.ErrorKind`).
"""

from __future__ import annotations

from collections.abc import Iterable


class LoadTestError(Exception):
    """Base of every loadtest error."""


class ConfigError(LoadTestError):
    """An option, spec string or config value is invalid."""


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


class SummaryError(LoadTestError):
    """A summary file is missing, unreadable or of an unsupported schema version."""
