"""Figures per model, per tenant and per priority class of a stage (pure): the groups of
:mod:`loadtest.analysis.per_group`, computed over the measured requests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from loadtest.analysis.columns import RecordColumns
from loadtest.analysis.per_group import groups
from loadtest.analysis.per_model import ModelFigures
from loadtest.analysis.per_tenant import KEY_CLASS, ClassFigures, TenantFigures
from loadtest.analysis.records import ErrorKind
from loadtest.analysis.samples import client_cancelled, good_requests, latency_samples, slo_report
from loadtest.analysis.slo import Metric, Objective, SLOReport
from loadtest.analysis.stats import Distribution
from loadtest.analysis.timeline import emissions_of, scan_emissions


def group_figures(
    columns: RecordColumns,
    measured: RecordColumns,
    window: tuple[float, float],
    field: str,
    *,
    objectives: Sequence[Objective] = (),
    judged: Mapping[str, Sequence[Objective]] | None = None,
    minimum: int = 2,
    skip: str | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    """Each group of the ``field`` column (:func:`groups`) with the fields of its
    :class:`GroupFigures`. Goodput counts against ``objectives``, or against a group's own
    in ``judged``, which are also given their verdicts."""
    names, all_names = getattr(measured, field), getattr(columns, field)
    if names is None or all_names is None:
        return []
    start, end = window
    duration = end - start
    found = []
    for name, mine in groups(names, minimum=minimum, skip=skip):
        rows = measured.take(mine)
        ok = rows.take(rows.ok)
        samples = latency_samples(ok)
        streamed = scan_emissions(emissions_of(columns.take(all_names == name)), window=window)[0]
        counted = len(rows) - client_cancelled(rows)
        failed = counted - len(ok)
        if own := (judged or {}).get(name):
            figures = {m: Distribution.of(samples[m], intervals=True) for m in samples}
            slo = slo_report(own, ok, samples, figures, failed / counted if counted else None, len(rows), duration)
        else:
            figures = {m: Distribution.of(samples[m]) for m in samples}
            good = good_requests(objectives, ok)
            slo = SLOReport(good_requests=good, goodput_rps=good / duration if objectives and duration > 0 else None,
                            goodput_fraction=good / len(rows) if objectives else None)  # fmt: skip
        found.append((name, dict(
            requests=len(rows), errors=failed,
            rate_limited=sum(k is ErrorKind.HTTP_429 for k in rows.error_kind), share=len(rows) / len(measured),
            ttft=figures[Metric.TTFT], itl=figures[Metric.ITL], tpot=figures[Metric.TPOT], e2e=figures[Metric.E2E],
            output_tokens_per_s=streamed / duration if duration > 0 and streamed is not None else None, slo=slo,
        )))  # fmt: skip
    return found


def model_figures(columns: RecordColumns, measured: RecordColumns, window: tuple[float, float],
                  objectives: Sequence[Objective] = ()) -> tuple[ModelFigures, ...]:
    """The figures of each model the measured requests named (none for a single one)."""
    return tuple(ModelFigures(model=name, **fields)
                 for name, fields in group_figures(columns, measured, window, "model", objectives=objectives))


def tenant_figures(columns: RecordColumns, measured: RecordColumns, window: tuple[float, float],
                   objectives: Sequence[Objective] = (),
                   own: Mapping[str, Sequence[Objective]] | None = None) -> tuple[TenantFigures, ...]:
    """The figures of each tenant of the measured requests (none without tenants);
    ``own``: tenants' own SLOs, judged."""
    classes = {}
    if measured.tenant is not None and measured.priority_class is not None:
        classes = dict(zip(measured.tenant.tolist(), measured.priority_class.tolist()))
    found = group_figures(columns, measured, window, "tenant", objectives=objectives, judged=own, minimum=1, skip="")
    return tuple(TenantFigures(tenant=name, priority_class=classes.get(name) or None, **fields) for name, fields in found)


def class_figures(columns: RecordColumns, measured: RecordColumns, window: tuple[float, float],
                  objectives: Sequence[Objective] = ()) -> tuple[ClassFigures, ...]:
    """The figures of each priority class the tenants' requests asked for (none when no
    tenant asked for one); requests of tenants without a class: :data:`KEY_CLASS`."""
    if measured.tenant is None or measured.priority_class is None:
        return ()
    asked = measured.priority_class[measured.tenant != ""]
    if not (asked != "").any():
        return ()
    of_tenants = measured.take(measured.tenant != "")
    found = group_figures(columns, of_tenants, window, "priority_class", objectives=objectives, minimum=1)
    return tuple(ClassFigures(priority_class=name or KEY_CLASS, **fields) for name, fields in found)
