"""Figures per tenant and per priority class, for a run with tenants (``--tenant``):
the summary's :class:`TenantFigures` and :class:`ClassFigures` (pure).

:mod:`loadtest.analysis.group_figures` computes them over the measured requests
(:mod:`loadtest.analysis.per_group`). A tenant with an SLO of its own gets its verdicts
(``slo.passed``), and a stage fails when a tenant misses its SLO; goodput counts against
the tenant's own SLO, else the run's. A tenant is named, never its key.
"""

from __future__ import annotations

from collections.abc import Sequence

from loadtest.analysis.per_group import GroupFigures

KEY_CLASS = "(key's class)"  # the class of requests that asked for none: each key's own


class TenantFigures(GroupFigures):
    """One tenant's measured requests and their figures."""

    tenant: str
    priority_class: str | None = None


class ClassFigures(GroupFigures):
    """The measured requests that asked for one priority class (:data:`KEY_CLASS`: for
    none), of every tenant, and their figures."""

    priority_class: str


def tenant_misses(tenants: Sequence[TenantFigures]) -> list[str]:
    """Why tenants missed their own SLO, one reason per missed objective."""
    return [f"tenant {t.tenant}: {r.objective.key} missed" for t in tenants for r in t.slo.objectives if not r.passed]
