"""The sweep: find the cheapest configuration that meets an SLO at a target traffic.

Pure core (no Ray, no Locust, no network): spec and price loading, candidates and
budget, verdicts, sampling (rates and repeats of a trial), cost maths, search
strategies, selection, scaling efficiency, capacity model, the results folder, and
report rendering. The orchestration plugs in through
:class:`Measure` and runs :func:`run_sweep`. PNG plots live in
:mod:`sweep.report_plots` (not imported here: matplotlib is slow to import).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# Exported names and their modules, imported lazily: `import loadtest` (and the
# `loadtest` CLI) must not pay for the sweep or import `serving`.
_EXPORTS = {
    "Answer": "sweep.selection",
    "AnswerKind": "sweep.selection",
    "BudgetSpec": "sweep.spec",
    "Candidate": "sweep.candidate",
    "CapacitySearch": "sweep.capacity_search",
    "EngineKnobs": "sweep.candidate",
    "Evidence": "sweep.results",
    "Feasibility": "sweep.candidate",
    "GridStrategy": "sweep.strategy",
    "LoadPoint": "sweep.results",
    "LoadProfileSpec": "sweep.spec",
    "Measure": "sweep.loop",
    "MeasuredResult": "sweep.results",
    "MeasuredCount": "sweep.capacity",
    "Objective": "sweep.spec",
    "ObjectiveVerdict": "sweep.verdicts",
    "Outcome": "sweep.verdicts",
    "PlanRow": "sweep.capacity",
    "PointRow": "sweep.rows",
    "PointVerdict": "sweep.verdicts",
    "Price": "sweep.prices",
    "PriceTable": "sweep.prices",
    "ReplicaRange": "sweep.spec",
    "ReportStatus": "sweep.report",
    "ResultsFolder": "sweep.results_folder",
    "ResultsFolderError": "sweep.errors",
    "RunRecord": "sweep.results",
    "RunRow": "sweep.rows",
    "RunStatus": "sweep.results",
    "SCHEMA_VERSION": "sweep.report",
    "ScalingKind": "sweep.scaling",
    "ScalingRow": "sweep.scaling",
    "SearchSettings": "sweep.spec",
    "SearchSpace": "sweep.space",
    "Shape": "sweep.candidate",
    "ShapeCapacity": "sweep.capacity",
    "SilentObserver": "sweep.loop",
    "SloSpec": "sweep.spec",
    "SpaceSpec": "sweep.spec",
    "SpecError": "sweep.errors",
    "Strategy": "sweep.strategy",
    "SweepAborted": "sweep.errors",
    "SweepError": "sweep.errors",
    "SweepObserver": "sweep.loop",
    "SweepReport": "sweep.report",
    "SweepSpec": "sweep.spec",
    "TrafficSpec": "sweep.spec",
    "Trial": "sweep.results",
    "TrialPurpose": "sweep.results",
    "UnknownStrategyError": "sweep.errors",
    "WorkloadSpec": "sweep.spec",
    "apply_overrides": "sweep.spec_file",
    "build_report": "sweep.report",
    "build_rows": "sweep.rows",
    "check_feasibility": "sweep.candidate",
    "choose": "sweep.selection",
    "combine": "sweep.sampling",
    "cost_per_hour": "sweep.economics",
    "cost_per_million_tokens": "sweep.economics",
    "create_strategy": "sweep.strategy",
    "evaluate_point": "sweep.verdicts",
    "fit_capacity": "sweep.capacity",
    "load_price_table": "sweep.prices",
    "load_sweep_spec": "sweep.spec_file",
    "measure_rates": "sweep.sampling",
    "measure_safely": "sweep.loop",
    "measurement_fingerprint": "sweep.spec",
    "pareto_front": "sweep.selection",
    "plan": "sweep.capacity",
    "plan_for": "sweep.capacity",
    "render_markdown": "sweep.report_markdown",
    "replicas_that_fit": "sweep.candidate",
    "run_sweep": "sweep.loop",
    "scaling_efficiency": "sweep.economics",
    "scaling_rows": "sweep.scaling",
    "strategy_registry": "sweep.strategy",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sweep' has no attribute {name!r}")
    return getattr(import_module(module), name)
