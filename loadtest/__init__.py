"""serveout's load tester: drives any OpenAI-compatible endpoint over HTTP with Locust
and reports exact latency percentiles, throughput, SLO verdicts and goodput.

The public API is below (see ``docs/loadtest.md``). Names are imported lazily so that
importing :mod:`loadtest` stays cheap and pulls in neither Locust/gevent (which lives
only in the load-generator process) nor matplotlib or transformers.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from loadtest._version import __version__

_EXPORTS = {
    # running
    "run_load_test": "loadtest.run.orchestrator",
    "RunOptions": "loadtest.run.orchestrator",
    "load_summary": "loadtest.analysis.summary",
    "save_summary": "loadtest.analysis.summary",
    "compare_summaries": "loadtest.reports.compare",
    # configuration
    "LoadTestConfig": "loadtest.config",
    "TargetConfig": "loadtest.config",
    "Endpoint": "loadtest.config",
    "parse_profile": "loadtest.profiles",
    "parse_workload": "loadtest.workloads",
    "parse_slos": "loadtest.analysis.slo",
    "Objective": "loadtest.analysis.slo",
    # results
    "Summary": "loadtest.analysis.summary",
    "StageSummary": "loadtest.analysis.summary",
    "RateSearchReport": "loadtest.analysis.summary",
    "SCHEMA_VERSION": "loadtest.analysis.summary",
    "Distribution": "loadtest.analysis.stats",
    "RequestRecord": "loadtest.analysis.records",
    "ErrorKind": "loadtest.analysis.records",
    # errors
    "LoadTestError": "loadtest.errors",
    "ConfigError": "loadtest.errors",
    "UnknownNameError": "loadtest.errors",
    "SLOError": "loadtest.errors",
    "WorkloadError": "loadtest.errors",
    "ParseError": "loadtest.errors",
    "TargetError": "loadtest.errors",
    "GeneratorError": "loadtest.errors",
    "WorkerError": "loadtest.errors",
    "SummaryError": "loadtest.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'loadtest' has no attribute {name!r}")
    return getattr(import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from loadtest.analysis.records import ErrorKind, RequestRecord
    from loadtest.analysis.slo import Objective, parse_slos
    from loadtest.analysis.stats import Distribution
    from loadtest.analysis.summary import (
        SCHEMA_VERSION,
        RateSearchReport,
        StageSummary,
        Summary,
        load_summary,
        save_summary,
    )
    from loadtest.config import Endpoint, LoadTestConfig, TargetConfig
    from loadtest.errors import (
        ConfigError,
        GeneratorError,
        LoadTestError,
        ParseError,
        SLOError,
        SummaryError,
        TargetError,
        UnknownNameError,
        WorkloadError,
    )
    from loadtest.profiles import parse_profile
    from loadtest.reports.compare import compare_summaries
    from loadtest.run.orchestrator import RunOptions, run_load_test
    from loadtest.workloads import parse_workload
