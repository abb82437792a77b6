"""The sweep: find the cheapest configuration that meets an SLO at a target traffic.

Pure core (no Ray, no Locust, no network): spec and price loading, candidates and
budget, verdicts, sampling (rates and repeats of a trial), cost maths, search
strategies, selection, scaling efficiency, capacity model, the results folder, and
report rendering. The orchestration plugs in through
:class:`Measure` and runs :func:`run_sweep`. PNG plots live in
:mod:`loadtest.sweep.plots` (not imported here: matplotlib is slow to import).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# Exported names and their modules, imported lazily: `import loadtest` (and the
# `loadtest` CLI) must not pay for the sweep or import `serving`.
_EXPORTS = {
    "Answer": "loadtest.sweep.selection",
    "AnswerKind": "loadtest.sweep.selection",
    "BudgetSpec": "loadtest.sweep.spec",
    "Candidate": "loadtest.sweep.candidate",
    "CapacitySearch": "loadtest.sweep.capacity_search",
    "EngineKnobs": "loadtest.sweep.candidate",
    "Evidence": "loadtest.sweep.results",
    "Feasibility": "loadtest.sweep.candidate",
    "GridStrategy": "loadtest.sweep.strategy",
    "LoadPoint": "loadtest.sweep.results",
    "LoadProfileSpec": "loadtest.sweep.spec",
    "Measure": "loadtest.sweep.runner",
    "MeasuredResult": "loadtest.sweep.results",
    "MeasuredCount": "loadtest.sweep.capacity",
    "Objective": "loadtest.sweep.spec",
    "ObjectiveVerdict": "loadtest.sweep.verdicts",
    "Outcome": "loadtest.sweep.verdicts",
    "PlanRow": "loadtest.sweep.capacity",
    "PointRow": "loadtest.sweep.figures",
    "PointVerdict": "loadtest.sweep.verdicts",
    "Price": "loadtest.sweep.prices",
    "PriceTable": "loadtest.sweep.prices",
    "ReplicaRange": "loadtest.sweep.spec",
    "ReportStatus": "loadtest.sweep.report",
    "ResultsFolder": "loadtest.sweep.store",
    "ResultsFolderError": "loadtest.sweep.errors",
    "RunRecord": "loadtest.sweep.results",
    "RunRow": "loadtest.sweep.figures",
    "RunStatus": "loadtest.sweep.results",
    "SCHEMA_VERSION": "loadtest.sweep.report",
    "ScalingKind": "loadtest.sweep.scaling",
    "ScalingRow": "loadtest.sweep.scaling",
    "SearchSettings": "loadtest.sweep.spec",
    "SearchSpace": "loadtest.sweep.space",
    "Shape": "loadtest.sweep.candidate",
    "ShapeCapacity": "loadtest.sweep.capacity",
    "SilentObserver": "loadtest.sweep.runner",
    "SloSpec": "loadtest.sweep.spec",
    "SpaceSpec": "loadtest.sweep.spec",
    "SpecError": "loadtest.sweep.errors",
    "Strategy": "loadtest.sweep.strategy",
    "SweepAborted": "loadtest.sweep.errors",
    "SweepError": "loadtest.sweep.errors",
    "SweepObserver": "loadtest.sweep.runner",
    "SweepReport": "loadtest.sweep.report",
    "SweepSpec": "loadtest.sweep.spec",
    "TrafficSpec": "loadtest.sweep.spec",
    "Trial": "loadtest.sweep.results",
    "TrialPurpose": "loadtest.sweep.results",
    "UnknownStrategyError": "loadtest.sweep.errors",
    "WorkloadSpec": "loadtest.sweep.spec",
    "apply_overrides": "loadtest.sweep.spec_io",
    "build_report": "loadtest.sweep.report",
    "build_rows": "loadtest.sweep.figures",
    "check_feasibility": "loadtest.sweep.candidate",
    "choose": "loadtest.sweep.selection",
    "combine": "loadtest.sweep.sampling",
    "cost_per_hour": "loadtest.sweep.economics",
    "cost_per_million_tokens": "loadtest.sweep.economics",
    "create_strategy": "loadtest.sweep.strategy",
    "evaluate_point": "loadtest.sweep.verdicts",
    "fit_capacity": "loadtest.sweep.capacity",
    "load_price_table": "loadtest.sweep.prices",
    "load_sweep_spec": "loadtest.sweep.spec_io",
    "measure_rates": "loadtest.sweep.sampling",
    "measure_safely": "loadtest.sweep.runner",
    "measurement_fingerprint": "loadtest.sweep.spec",
    "pareto_front": "loadtest.sweep.selection",
    "plan": "loadtest.sweep.capacity",
    "plan_for": "loadtest.sweep.capacity",
    "render_markdown": "loadtest.sweep.markdown",
    "replicas_that_fit": "loadtest.sweep.candidate",
    "run_sweep": "loadtest.sweep.runner",
    "scaling_efficiency": "loadtest.sweep.economics",
    "scaling_rows": "loadtest.sweep.scaling",
    "strategy_registry": "loadtest.sweep.strategy",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'loadtest.sweep' has no attribute {name!r}")
    return getattr(import_module(module), name)
